"""SGLang's load format "wcache" against the pinned SGLang, on CPU, each SGLang process a fresh one.

* registration: sglang.srt.plugins.load_plugins() runs the installed wcache
  entry point (group sglang.srt.plugins); then the --load-format choices
  contain "wcache", SGLang's CLI parser accepts it, LoadConfig(load_format=
  "wcache") verifies (through the HookRegistry hook) to the loader class,
  and get_model_loader returns a WcacheModelLoader with the options of
  --model-loader-extra-config and preloaded_weights_bytes 0; an unknown
  option is refused by name; other load formats still verify as before;
* the loader's cases (sglang_child.py: a process set up as SGLang sets up a
  scheduler before it loads the model, SGLang's own Llama classes on
  DeviceConfig("cpu")): the default loader (reference), no daemon on a
  CPU-only host (SGLang's loader, the same tensors; wcache's line in
  SGLang's log gives the reason), fallback "error" (refused), publish into
  an empty mock daemon (the model continues on the daemon's memory), attach
  (every tensor equal to the reference's, in the daemon's memory,
  preloaded_weights_bytes = the daemon's bytes), another dtype (refused
  naming dtype). Each start's log (SGLang's logging, configured as its
  scheduler does) has wcache's line once;
* versions: the supported range, and an SGLang outside it (its version
  string changed before the plugins load) gets an error naming the range
  and no load format; ``pip install 'wcache[sglang]'`` into this
  environment installs wcache alone.

Not here, because SGLang's kernels on PyPI are CUDA-only (its CPU engine
needs a CPU build of sgl_kernel that PyPI does not carry): a forward pass,
KV-cache sizing and CUDA IPC, which test/gpu/gpu-check.sh (step sglang)
runs. Skipped without SGLang (clients/python/engines/test.sh sglang runs it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

if importlib.util.find_spec("sglang") is None:  # found, not imported: the tests run SGLang in fresh processes
    pytest.skip("SGLang is not installed in this Python (run clients/python/engines/test.sh sglang)",
                allow_module_level=True)

import engine_child  # noqa: E402
import harness  # noqa: E402
from engine_log import wcache_line  # noqa: E402
from extra_install import dry_run_install  # noqa: E402
from tiny_llama import write_tiny_llama  # noqa: E402

pytestmark = pytest.mark.interop

START_TIMEOUT = 1200  # seconds; importing torch and SGLang takes minutes on a loaded 2-core machine
# SGLang's log format (configure_logger): "[YYYY-MM-DD hh:mm:ss<rank prefix>] message".
SGLANG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[^\]]*\] wcache: ")


def run_child(env, *args, expect_rc=0):
    """sglang_child.py in a fresh process: (its JSON, its log)."""
    return engine_child.run("sglang_child.py", env, *args, timeout=START_TIMEOUT, expect_rc=expect_rc)


def sglang_line(log, source):
    """wcache's one line for source in an SGLang log, printed by SGLang's handler in its format; the GPU
    check (test/gpu/engine_check.py) reads the same source from it."""
    line = wcache_line(log, source)
    assert SGLANG_LINE.match(line), f"not in SGLang's log format: {line!r}"
    sys.path.insert(0, os.path.join(harness.REPO, "test", "gpu"))
    try:
        from engine_check import wcache_source  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    assert wcache_source(log) == source, line
    return line


def test_plugin_registers_the_load_format():
    code = r"""
import argparse, json
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.arg_groups.choices import LOAD_FORMAT_CHOICES
from sglang.srt.configs.load_config import LoadConfig, LoadFormat
from sglang.srt.model_loader.loader import get_model_loader
from sglang.srt.server_args import ServerArgs
cfg = LoadConfig(load_format="wcache", model_loader_extra_config={"fallback": "error", "verify": True})
loader = get_model_loader(cfg)
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
args = parser.parse_args(["--model-path", "/models/x", "--load-format", "wcache"])
bad = None
try:
    get_model_loader(LoadConfig(load_format="wcache", model_loader_extra_config={"sockett": "x"}))
except ValueError as exc:
    bad = str(exc)
other = LoadConfig(load_format="safetensors").load_format
print(json.dumps({"choices": "wcache" in LOAD_FORMAT_CHOICES, "format": getattr(cfg.load_format, "__name__", None),
                  "loader": type(loader).__module__ + "." + type(loader).__name__,
                  "fallback": loader.options.fallback, "verify": loader.options.verify,
                  "preloaded": loader.preloaded_weights_bytes, "cli": args.load_format, "bad": bad,
                  "other": other == LoadFormat.SAFETENSORS}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=START_TIMEOUT,
                          env={k: v for k, v in os.environ.items() if not k.startswith("WCACHE_")})
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["choices"] and out["cli"] == "wcache", out
    assert out["format"] == "WcacheModelLoader", out
    assert out["loader"] == "wcache.sglang.WcacheModelLoader", out
    assert out["fallback"] == "error" and out["verify"] is True and out["preloaded"] == 0, out
    assert out["bad"] and "sockett" in out["bad"], out
    assert out["other"], out


def test_loader_cases_on_cpu(world):
    ckpt = tempfile.mkdtemp(prefix="wc-sglang-", dir="/var/tmp")
    try:
        write_tiny_llama(ckpt)
        env = dict(world.env, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")

        ref, _ = run_child(env, "auto", ckpt)
        assert ref["class"] == "LlamaForCausalLM" and ref["loader"].endswith("DefaultModelLoader"), ref

        # A CPU-only host without a daemon to name: SGLang's loader, the same tensors; the fallback's reason is
        # in SGLang's log.
        alone, log = run_child(env, "wcache", ckpt)
        assert alone["loader"] == "wcache.sglang.WcacheModelLoader", alone
        assert alone["source"] == "loaded" and alone["preloaded_weights_bytes"] == 0, alone
        assert alone["tensors_sha256"] == ref["tensors_sha256"]
        assert "(reason: no daemon to name for device cpu)" in sglang_line(log, "loaded")

        mock = dict(env, WCACHE_BACKEND="mock")
        refused, _ = run_child(mock, "wcache", ckpt, "--extra", '{"fallback": "error"}', expect_rc=3)
        assert refused["error"] == "NoDaemonFallbackError", refused

        world.serve(0, None)
        first, log = run_child(mock, "wcache", ckpt)
        assert first["source"] == "published" and first["in_attached_memory"], first
        # Loaded after SGLang sampled its baseline: SGLang counts these weights itself, nothing to add back.
        assert first["preloaded_weights_bytes"] == 0 and first["preloaded_is_int"], first
        assert first["tensors_sha256"] == ref["tensors_sha256"]
        sglang_line(log, "published")

        second, log = run_child(mock, "wcache", ckpt)
        assert second["source"] == "attached" and second["in_attached_memory"], second
        assert second["tensors_sha256"] == ref["tensors_sha256"]
        assert second["tensors"] == ref["tensors"]
        st = world.wcache_json("status", "--json")[0]
        # The arenas the daemon holds (device_bytes, at least the tensor bytes): what SGLang adds back to the
        # free memory it sampled with the daemon's weights already resident.
        assert second["preloaded_is_int"], second
        assert second["preloaded_weights_bytes"] == st["device_bytes"] >= st["bytes"] > 0, (second, st)
        sglang_line(log, "attached")

        other, _ = run_child(mock, "wcache", ckpt, "--dtype", "bfloat16", expect_rc=3)
        assert other["error"] == "IncompatibleConfigError" and "dtype" in other["fields"], other
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def test_the_daemon_named_for_sglangs_device_config(monkeypatch):
    """SGLang's DeviceConfig holds a torch.device of the type alone and the
    rank's gpu_id: a CUDA rank names its GPU's daemon (index gpu_id), a CPU
    one none (the mock backend's device 0 under WCACHE_BACKEND=mock)."""
    import torch  # noqa: PLC0415
    from sglang.srt.configs.device_config import DeviceConfig  # noqa: PLC0415
    from wcache.engines.sglang import _device  # noqa: PLC0415

    for k in [k for k in os.environ if k.startswith("WCACHE_")]:
        monkeypatch.delenv(k)
    assert _device(DeviceConfig("cuda", 3)) == (torch.device("cuda", 3), 3)
    assert _device(DeviceConfig("cpu")) == (torch.device("cpu"), None)
    monkeypatch.setenv("WCACHE_BACKEND", "mock")
    assert _device(DeviceConfig("cpu")) == (torch.device("cpu"), 0)


def test_version_range_is_checked_at_plugin_load():
    """The supported range (wcache.sglang.MIN_VERSION..BELOW_VERSION) holds
    the release the tests run (0.5.23) and its patch releases, nothing
    older or 0.6; SGLang's plugin loading in a process whose SGLang reports
    0.6.0 logs an error naming the range and registers nothing, so SGLang's
    CLI refuses --load-format wcache."""
    from wcache.sglang import supported  # noqa: PLC0415

    for v in ("0.5.23", "0.5.23.post1", "0.5.24", "0.5.30rc1", "0.5.23+cu130"):
        assert supported(v), v
    for v in ("0.5.22", "0.5.9", "0.4.10", "0.6.0", "1.0.0", "0.5", "", "dev"):
        assert not supported(v), v
    code = r"""
import argparse, json, sys
import sglang
sglang.__version__ = "0.6.0"  # what an SGLang outside the range reports
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.arg_groups.choices import LOAD_FORMAT_CHOICES
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
try:
    parser.parse_args(["--model-path", "/models/x", "--load-format", "wcache"])
    cli = "accepted"
except SystemExit as exc:
    cli = f"exit {exc.code}"
print(json.dumps({"choices": "wcache" in LOAD_FORMAT_CHOICES, "cli": cli}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WCACHE_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=START_TIMEOUT,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"choices": False, "cli": "exit 2"}, out
    assert "wcache: SGLang 0.6.0 is outside the range this wcache supports (sglang >=0.5.23,<0.6); " \
           "the load format 'wcache' is not registered" in proc.stderr, proc.stderr[-4000:]
    assert "invalid choice: 'wcache'" in proc.stderr, proc.stderr[-4000:]


def test_extra_installs_beside_sglang(tmp_path):
    """pip install 'wcache[sglang]' into this environment (SGLang, its torch):
    wcache alone is installed, nothing replaced (a dry run, offline)."""
    changed, plan = dry_run_install("sglang", ("sglang", "torch"), str(tmp_path / "uv"))
    assert changed <= {"wcache"}, plan
