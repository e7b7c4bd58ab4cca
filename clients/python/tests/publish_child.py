"""A separate engine process for the publish tests (run by test_publish.py).

    publish_child.py load-or-publish --model DIR [--fail-load] [--tp-rank R] [--engine-version V]
                     [--gate] [--wait S] [--mutate] [--copy]
        wcache.load_or_publish with a loader that reads the safetensors
        checkpoint and transforms it (every 2-D tensor transposed, as a view,
        and everything scaled by 2), or fails when called (--fail-load).
        --gate: the loader prints "loading" and waits for a line "go" on
        stdin before it returns; --wait: load_or_publish's wait;
        --mutate then scales every returned tensor by 3 in place (an
        engine's fix-up after loading), --copy attaches with copy=True.
    publish_child.py publish-layout [--hold]
        publishes layout_tensors(); with --hold prints "filled" after the copy
        and waits for a line "commit" on stdin before it commits.
    publish_child.py attach-layout
        attaches and describes every tensor.

Discovery comes from the environment (XDG_RUNTIME_DIR, WCACHE_MOCK_*) the
test's harness.World sets; the device is the mock's device 0 (--uuid).
Prints one JSON object on stdout: source, reason and, per tensor, shape,
stride, storage offset, storage address and the SHA-256 of its values as
contiguous float32.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
from typing import Optional

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import st_writer  # noqa: E402
import wcache  # noqa: E402


def config(tp_rank: int = 0, engine_version: str = "1", model: str = "publish-test",
           dp_rank: Optional[int] = None) -> wcache.CacheConfig:
    """The child's CacheConfig; with dp_rank, data-parallel rank dp_rank of 2."""
    dp = {} if dp_rank is None else {"dp_size": 2, "dp_rank": dp_rank}
    return wcache.CacheConfig(model=model, engine_name="publish-child", engine_version=engine_version,
                              tp_size=2, tp_rank=tp_rank, device_capability="mock", **dp)


_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def transformed(model: str):
    """The engine's post-processing: scale by 2, transpose 2-D tensors (a view)."""
    out = {}
    for name, dtype, shape, data in st_writer.read_dir(model):
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        t = raw.view(_DTYPES[dtype]).reshape(shape).float() * 2
        out[name] = t.T if t.dim() == 2 else t
    return out


def layout_tensors():
    """A transposed view, two views of one fused storage, a tensor with a storage offset, a plain one."""
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    fused = torch.arange(100, 148, dtype=torch.float32).reshape(8, 6)
    tail = torch.arange(200, 230, dtype=torch.int32)
    return {"transposed": base.T, "q": fused[:4], "k": fused[4:], "tail": tail[10:], "plain": torch.ones(5)}


def describe(tensors) -> dict:
    return {name: {"shape": list(t.shape), "stride": list(t.stride()), "offset": t.storage_offset(),
                   "storage": (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr(), "device": str(t.device),
                   "sha256": hashlib.sha256(t.float().contiguous().numpy().tobytes()).hexdigest()}
            for name, t in tensors.items()}


def main(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["load-or-publish", "publish-layout", "attach-layout"])
    p.add_argument("--model")
    p.add_argument("--uuid", required=True)
    p.add_argument("--fail-load", action="store_true")
    p.add_argument("--tp-rank", type=int, default=0)
    p.add_argument("--dp-rank", type=int, help="data-parallel rank of 2 (default: no data parallelism)")
    p.add_argument("--hold", action="store_true")
    p.add_argument("--engine-version", default="1")
    p.add_argument("--config-model", default="publish-test", help="the CacheConfig's model (a draft's own)")
    p.add_argument("--gate", action="store_true")
    p.add_argument("--wait", type=float)
    p.add_argument("--mutate", action="store_true")
    p.add_argument("--copy", action="store_true")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    out: dict = {"pid": os.getpid()}
    try:
        if a.mode == "load-or-publish":
            calls = []

            def load():
                calls.append(1)
                if a.fail_load:
                    raise AssertionError("load() called although the daemon holds the weights")
                if a.gate:
                    print("loading", flush=True)
                    if sys.stdin.readline().strip() != "go":
                        raise RuntimeError("told not to finish loading")
                return transformed(a.model), {"layout": "transposed", "scale": "2"}

            kw = {} if a.wait is None else {"wait": a.wait}
            if a.copy:
                kw["copy"] = True
            w = wcache.load_or_publish(config(a.tp_rank, a.engine_version, a.config_model, a.dp_rank), load, device_uuid=a.uuid, **kw)
            if a.mutate:
                for t in w.values():
                    t.mul_(3)
            out.update(source=w.source, reason=w.reason, metadata=w.metadata, loads=len(calls),
                       tensors=describe(w))
        elif a.mode == "publish-layout":
            def hold():
                print("filled", flush=True)
                if sys.stdin.readline().strip() != "commit":
                    raise RuntimeError("told not to commit")

            res = wcache.publish(config(), layout_tensors(), device_uuid=a.uuid, metadata={"k": "v"},
                                 sha256=True, before_commit=hold if a.hold else None)
            out.update(published=res.tensors, bytes=res.bytes, verified=res.verified)
        else:
            att = wcache.attach(config(), device_uuid=a.uuid)
            out.update(metadata=att.metadata, tensors=describe(att.tensors()))
    except wcache.WcacheError as exc:
        out.update(error=type(exc).__name__, message=str(exc),
                   diffs=[d.field for d in getattr(exc, "diffs", [])])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
