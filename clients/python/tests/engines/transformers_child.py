"""One engine process for test_transformers.py: load the tiny model and describe it.

    transformers_child.py disk DIR            AutoModelForCausalLM.from_pretrained(DIR)
    transformers_child.py wcache DIR [--dtype D] [--fallback error] [--content-policy P]
                                              wcache.transformers.from_pretrained(DIR)

Prints one JSON object: the class, the SHA-256 of the logits' bytes on a fixed
prompt, a SHA-256 of every parameter and buffer (names, dtypes, shapes,
bytes), config and generation config, the bytes this process read from block
devices while loading (/proc/self/io read_bytes), and for wcache: source,
reason, and whether every parameter and buffer lies in the attached
tensors' memory. An error of wcache prints {"error": class name, "message",
"fields"} and exits 3.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "src"))

import transformers  # noqa: E402
import transformers.models.llama.modeling_llama  # noqa: E402,F401 - read before the measurement

import wcache  # noqa: E402
import wcache.transformers  # noqa: E402

PROMPT = [[1, 17, 42, 99, 7, 3, 250, 11]]


def read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "read_bytes":
                return int(value)
    raise AssertionError("no read_bytes in /proc/self/io")


def tensors_digest(model) -> str:
    h = hashlib.sha256()
    named = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))
    for name, t in sorted(named, key=lambda kv: kv[0]):
        h.update(f"{name}:{t.dtype}:{list(t.shape)};".encode())
        h.update(t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def in_attached_memory(model, weights, buffers: bool = True) -> bool:
    """Every parameter (and buffer) shares its storage with an attached tensor."""
    spans = []
    for t in weights.values():
        st = t.untyped_storage()
        spans.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
    for _, t in list(model.named_parameters(remove_duplicate=False)) + (list(model.named_buffers()) if buffers else []):
        p = t.untyped_storage().data_ptr()
        if not any(lo <= p < hi or (lo == hi == p) for lo, hi in spans):
            return False
    return True


def report_error(exc: BaseException) -> int:
    """Print exc as the children report an error, {"error": class name, "message", "fields": the
    sorted fields of its diffs (a ConfigMismatchError's; none otherwise)}, and return 3, their exit code for it."""
    print(json.dumps({"error": type(exc).__name__, "message": str(exc),
                      "fields": sorted(d.field for d in getattr(exc, "diffs", []))}))
    return 3


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("disk", "wcache"))
    p.add_argument("dir")
    p.add_argument("--dtype")
    p.add_argument("--fallback", default="load")
    p.add_argument("--content-policy")
    args = p.parse_args()
    kwargs = {"dtype": getattr(torch, args.dtype)} if args.dtype else {}

    before = read_bytes()
    if args.mode == "disk":
        model = transformers.AutoModelForCausalLM.from_pretrained(args.dir, **kwargs)
        out = {}
    else:
        try:
            model = wcache.transformers.from_pretrained(args.dir, fallback=args.fallback,
                                                        content_policy=args.content_policy, **kwargs)
        except wcache.WcacheError as exc:
            return report_error(exc)
        w = model.wcache_weights
        out = {"source": w.source, "reason": w.reason,
               "in_attached_memory": in_attached_memory(model, w) if w.source != "loaded" else False}
    loaded_read = read_bytes() - before
    with torch.no_grad():
        logits = model(torch.tensor(PROMPT)).logits
    out.update({
        "class": type(model).__name__,
        "training": model.training,
        "tied": model.lm_head.weight is model.model.embed_tokens.weight,
        "logits_sha256": hashlib.sha256(logits.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest(),
        "logits_head": logits.flatten()[:4].tolist(),
        "tensors_sha256": tensors_digest(model),
        "config": model.config.to_dict(),
        "generation_config": model.generation_config.to_dict(),
        "read_bytes": loaded_read,
    })
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
