"""One vLLM engine process for test_vllm.py: build the tiny model with vLLM's own classes on CPU.

    vllm_child.py FORMAT DIR [--dtype D] [--extra JSON]

FORMAT is a vLLM load format ("auto": vLLM's default loader; "wcache").
Runs vLLM's plugin loading (load_general_plugins), a single-process gloo
"distributed" world of TP=1/PP=1, and get_model() under the CPU platform
(VLLM_TARGET_DEVICE=cpu). Prints one JSON object: the loader's class, the
model's class, a SHA-256 of every parameter and buffer (names, dtypes,
shapes, bytes), for wcache the source and whether every parameter lies in
the attached tensors' memory (buffers are private copies on attach), and get_external_weight_memory. A
WcacheError prints {"error", "message", "fields"} and exits 3.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "src"))
sys.path.insert(0, HERE)

from transformers_child import in_attached_memory, report_error, tensors_digest  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loader_parser() -> argparse.ArgumentParser:
    """The arguments of both vLLM children: FORMAT DIR [--dtype D (float32)] [--extra JSON ({}): the
    loader's model_loader_extra_config]."""
    p = argparse.ArgumentParser()
    p.add_argument("format")
    p.add_argument("dir")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--extra", default="{}")
    return p


def main() -> int:
    args = loader_parser().parse_args()

    from vllm.config import DeviceConfig, LoadConfig, ModelConfig, VllmConfig, set_current_vllm_config  # noqa: PLC0415
    from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: PLC0415
    from vllm.model_executor.model_loader import get_model_loader  # noqa: PLC0415
    from vllm.plugins import load_general_plugins  # noqa: PLC0415

    import wcache  # noqa: PLC0415

    load_general_plugins()
    mc = ModelConfig(model=args.dir, dtype=args.dtype, skip_tokenizer_init=True, max_model_len=128,
                     enforce_eager=True)
    vc = VllmConfig(model_config=mc, device_config=DeviceConfig("cpu"),
                    load_config=LoadConfig(load_format=args.format, model_loader_extra_config=json.loads(args.extra)))
    out = {}
    with set_current_vllm_config(vc):
        init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{free_port()}",
                                     local_rank=0, backend="gloo")
        initialize_model_parallel(1, 1)
        loader = get_model_loader(vc.load_config)
        out["loader"] = type(loader).__module__ + "." + type(loader).__name__
        if hasattr(loader, "get_external_weight_memory"):
            out["external_weight_memory"] = loader.get_external_weight_memory(vc)
        try:
            model = loader.load_model(vllm_config=vc, model_config=mc)
        except wcache.WcacheError as exc:
            return report_error(exc)
    w = getattr(model, "_wcache_weights", None)
    if w is not None:
        out.update(source=w.source, reason=w.reason,
                   in_attached_memory=in_attached_memory(model, w, buffers=False) if w.source != "loaded" else False)
    out.update({"class": type(model).__name__, "tensors_sha256": tensors_digest(model),
                "tensors": len(list(model.named_parameters())) + len(list(model.named_buffers()))})
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
