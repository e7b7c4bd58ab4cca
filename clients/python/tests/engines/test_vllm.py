"""vLLM's load format "wcache" against the pinned vLLM, on CPU (VLLM_TARGET_DEVICE=cpu).

* registration: vLLM's own plugin loading (load_general_plugins, the
  vllm.general_plugins entry point of the installed wcache) registers the
  format; get_model_loader(LoadConfig(load_format="wcache")) is a
  WcacheModelLoader, and vLLM's CLI parser accepts --load-format wcache;
* the loader's cases, each a fresh process (vllm_child.py) building the tiny
  Llama with vLLM's own model classes: no daemon (vLLM's default loader),
  empty daemon (default loader, then publish: the model continues on the
  daemon's memory), serving daemon (built on the meta device and attached:
  every parameter and buffer equals the default loader's, and lies in the
  daemon's memory; get_external_weight_memory reports the daemon's bytes),
  mismatch (another dtype: IncompatibleConfigError naming dtype).

What needs a GPU (CUDA IPC handles, the forward pass with vLLM's kernels,
KV sizing with the reported bytes) is in test/gpu/gpu-check.sh.
Skipped without vLLM (clients/python/engines/test.sh vllm runs it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

if importlib.util.find_spec("vllm") is None:  # found, not imported: the tests run vLLM in fresh processes
    pytest.skip("vLLM is not installed in this Python (run clients/python/engines/test.sh vllm)",
                allow_module_level=True)

import engine_child  # noqa: E402
from tiny_llama import write_tiny_llama  # noqa: E402

pytestmark = pytest.mark.interop



def run_child(env, *args, expect_rc=0):
    return engine_child.run("vllm_child.py", env, *args, timeout=1200, expect_rc=expect_rc)[0]


def test_plugin_registers_the_load_format():
    code = r"""
import json, os
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
from vllm.plugins import load_general_plugins
from vllm.config import LoadConfig
from vllm.model_executor.model_loader import get_model_loader
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
load_general_plugins()
loader = get_model_loader(LoadConfig(load_format="wcache", model_loader_extra_config={"fallback": "error"}))
parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
args = parser.parse_args(["--model", "x", "--load-format", "wcache",
                          "--model-loader-extra-config", '{"socket": "/run/x.sock"}'])
bad = None
try:
    get_model_loader(LoadConfig(load_format="wcache", model_loader_extra_config={"sockett": "x"}))
except ValueError as exc:
    bad = str(exc)
print(json.dumps({"loader": type(loader).__module__ + "." + type(loader).__name__,
                  "fallback": loader.options.fallback, "cli_format": args.load_format,
                  "cli_extra": args.model_loader_extra_config, "bad": bad}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1200,
                          env={k: v for k, v in os.environ.items() if not k.startswith("WCACHE_")})
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loader"] == "wcache.vllm.WcacheModelLoader", out
    assert out["fallback"] == "error"
    assert out["cli_format"] == "wcache"
    assert out["cli_extra"] == {"socket": "/run/x.sock"}
    assert out["bad"] and "sockett" in out["bad"], out


def test_loader_cases_on_cpu(world):
    ckpt = tempfile.mkdtemp(prefix="wc-vllm-", dir="/var/tmp")
    try:
        write_tiny_llama(ckpt)
        # CUDA_VISIBLE_DEVICES="": no GPU for the CUDA wheel. vLLM >= 0.34 refuses its CPU platform on
        # x86 without Triton (check_and_update_config: "requires Triton (triton-cpu)"), and counts the
        # installed (GPU) Triton only when it finds one active driver or, as here, CUDA_VISIBLE_DEVICES
        # is set and empty. Nothing here runs a Triton kernel (no forward pass); vLLM 0.33 has no such check.
        env = dict(world.env, WCACHE_BACKEND="mock", VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1",
                   CUDA_VISIBLE_DEVICES="")

        ref = run_child(env, "auto", ckpt)
        assert ref["class"] == "LlamaForCausalLM"

        no_daemon = dict(env, XDG_RUNTIME_DIR=os.path.join(ckpt, "no-daemon"))
        os.mkdir(no_daemon["XDG_RUNTIME_DIR"], 0o700)
        alone = run_child(no_daemon, "wcache", ckpt)
        assert alone["loader"] == "wcache.vllm.WcacheModelLoader"
        assert alone["source"] == "loaded" and alone["external_weight_memory"] == 0
        assert alone["tensors_sha256"] == ref["tensors_sha256"]
        refused = run_child(no_daemon, "wcache", ckpt, "--extra", '{"fallback": "error"}', expect_rc=3)
        assert refused["error"] == "NoDaemonFallbackError", refused

        world.serve(0, None)
        first = run_child(env, "wcache", ckpt)
        assert first["source"] == "published" and first["in_attached_memory"], first
        assert first["external_weight_memory"] == 0  # empty when vLLM asked
        assert first["tensors_sha256"] == ref["tensors_sha256"]

        second = run_child(env, "wcache", ckpt)
        assert second["source"] == "attached" and second["in_attached_memory"], second
        assert second["tensors_sha256"] == ref["tensors_sha256"]
        assert second["tensors"] == ref["tensors"]
        st = world.wcache_json("status", "--json")[0]
        assert second["external_weight_memory"] == st["bytes"] > 0, (second, st)

        other = run_child(env, "wcache", ckpt, "--dtype", "bfloat16", expect_rc=3)
        assert other["error"] == "IncompatibleConfigError" and "dtype" in other["fields"], other
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
