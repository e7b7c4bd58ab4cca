"""SGLang's load format "wcache" against the pinned SGLang: registration through its own plugin loading.

In a fresh process: sglang.srt.plugins.load_plugins() runs the installed
wcache entry point (group sglang.srt.plugins); then the --load-format choices
contain "wcache", SGLang's CLI parser accepts it, LoadConfig(load_format=
"wcache") verifies (through the HookRegistry hook) to the loader class, and
get_model_loader returns a WcacheModelLoader with the options of
--model-loader-extra-config and preloaded_weights_bytes 0; an unknown option
is refused by name; other load formats still verify as before.

The loader's cases build SGLang's model classes, which needs SGLang's GPU
runtime (its CPU backend is a separate build): they are in
test/gpu/gpu-check.sh (step sglang). Skipped without SGLang
(clients/python/engines/test.sh sglang runs it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("sglang") is None:  # found, not imported: the test runs SGLang in a fresh process
    pytest.skip("SGLang is not installed in this Python (run clients/python/engines/test.sh sglang)",
                allow_module_level=True)


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
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1200,
                          env={k: v for k, v in os.environ.items() if not k.startswith("WCACHE_")})
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["choices"] and out["cli"] == "wcache", out
    assert out["format"] == "WcacheModelLoader", out
    assert out["loader"] == "wcache.sglang.WcacheModelLoader", out
    assert out["fallback"] == "error" and out["verify"] is True and out["preloaded"] == 0, out
    assert out["bad"] and "sockett" in out["bad"], out
    assert out["other"], out
