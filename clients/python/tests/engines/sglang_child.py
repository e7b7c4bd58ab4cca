"""One SGLang model-load process for test_sglang.py: the tiny Llama through SGLang's loader and classes on CPU.

    sglang_child.py FORMAT DIR [--dtype D] [--extra JSON]

FORMAT is an SGLang load format ("auto": SGLang's default loader; "wcache").
The process is set up as SGLang sets up a scheduler process before it loads
the model (and as SGLang's own weight-cache daemon does without a
scheduler): load_plugins() (the installed wcache entry point), publish()
of the ServerArgs with this process's ranks, configure_scheduler_process()
(SGLang's logging: the root logger, format "[time prefix] message"), a gloo
world of TP=1/PP=1, then get_model_loader(LoadConfig) and load_model on
DeviceConfig("cpu"). No forward pass, no KV cache: SGLang's kernels on PyPI
are CUDA-only.

SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1) needs the CPU build of
sgl_kernel, which PyPI does not carry; without it SGLang takes its generic
path, where RotaryEmbedding's constructor imports vLLM's rotary kernel as a
fallback it would only call in a forward pass. vLLM is not in SGLang's
environment, so this process installs a module vllm._custom_ops whose every
function raises: the model is constructed, and any kernel call would fail
loudly instead of computing anything.

Prints one JSON object (the last line of stdout): the loader's class, the
model's class, a SHA-256 of every parameter and buffer (names, dtypes,
shapes, bytes), for wcache the source, reason, whether every parameter lies
in the attached tensors' memory, and preloaded_weights_bytes (what SGLang's
scheduler adds back to its KV budget). A WcacheError prints {"error",
"message", "fields"} and exits 3. SGLang's log is on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "src"))
sys.path.insert(0, HERE)

from transformers_child import in_attached_memory, tensors_digest  # noqa: E402


def refusing_vllm_ops() -> None:
    """vllm._custom_ops, whose every function raises (see the module docstring);
    only where no vLLM is installed."""
    if importlib.util.find_spec("vllm") is not None:
        return

    def kernel(name):
        if name.startswith("__"):  # module protocol (__file__, __spec__ …): absent, as for any module
            raise AttributeError(name)

        def refuse(*args, **kwargs):
            raise RuntimeError(f"vllm._custom_ops.{name}: no such kernel in this test process (sglang_child.py)")
        return refuse

    ops = types.ModuleType("vllm._custom_ops")
    ops.__getattr__ = kernel  # module __getattr__ (PEP 562): any name is a refusing function
    pkg = types.ModuleType("vllm")
    pkg.__path__ = []
    pkg._custom_ops = ops
    sys.modules.setdefault("vllm", pkg)
    sys.modules.setdefault("vllm._custom_ops", ops)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("format")
    p.add_argument("dir")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--extra", default="{}")
    args = p.parse_args()
    refusing_vllm_ops()

    from sglang.srt.plugins import load_plugins  # noqa: PLC0415

    load_plugins()  # first, as run_scheduler_process does

    from sglang.srt.configs.device_config import DeviceConfig  # noqa: PLC0415
    from sglang.srt.configs.load_config import LoadConfig  # noqa: PLC0415
    from sglang.srt.configs.model_config import ModelConfig  # noqa: PLC0415
    from sglang.srt.distributed.parallel_state import (  # noqa: PLC0415
        init_distributed_environment, initialize_model_parallel)
    from sglang.srt.layers.moe import initialize_moe_config  # noqa: PLC0415
    from sglang.srt.managers.scheduler import configure_scheduler_process  # noqa: PLC0415
    from sglang.srt.model_loader.loader import get_model_loader  # noqa: PLC0415
    from sglang.srt.runtime_context import SpawnRanks, publish  # noqa: PLC0415
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415

    import wcache  # noqa: PLC0415

    extra = json.loads(args.extra)
    server_args = ServerArgs(model_path=args.dir, device="cpu", load_format=args.format, dtype=args.dtype,
                             skip_tokenizer_init=True, model_loader_extra_config=json.dumps(extra), log_level="info")
    publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))
    configure_scheduler_process(server_args, 0)
    initialize_moe_config()
    model_config = ModelConfig(model_path=args.dir, dtype=args.dtype)
    init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{free_port()}",
                                 local_rank=0, backend="gloo")
    initialize_model_parallel()

    load_config = LoadConfig(load_format=args.format, model_loader_extra_config=extra)
    loader = get_model_loader(load_config=load_config, model_config=model_config)
    out = {"loader": type(loader).__module__ + "." + type(loader).__name__}
    try:
        model = loader.load_model(model_config=model_config, device_config=DeviceConfig("cpu"))
    except wcache.WcacheError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc),
                          "fields": sorted(d.field for d in getattr(exc, "diffs", []))}))
        return 3
    w = getattr(model, "_wcache_weights", None)
    if w is not None:
        out.update(source=w.source, reason=w.reason,
                   in_attached_memory=in_attached_memory(model, w, buffers=False) if w.source != "loaded" else False)
    preloaded = getattr(loader, "preloaded_weights_bytes", None)
    out.update({"class": type(model).__name__, "tensors_sha256": tensors_digest(model),
                "tensors": len(list(model.named_parameters())) + len(list(model.named_buffers())),
                "preloaded_weights_bytes": preloaded,
                "preloaded_is_int": isinstance(preloaded, int) and not isinstance(preloaded, bool)})
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
