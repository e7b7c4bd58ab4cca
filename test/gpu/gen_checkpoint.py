#!/usr/bin/env python3
"""Write a llama-like safetensors checkpoint of about --bytes, stdlib only.

    gen_checkpoint.py --dir DIR [--bytes 4GiB] [--shards 2] [--seed 1]

Every tensor is BF16. Contents are pseudo-random and differ per tensor (each
tensor starts at its own rotation of a random block), so a loader that put a
tensor at the wrong offset fails a byte comparison. The last tensor of every
shard has an odd length, so no file's data ends on a 4 KiB boundary (the
O_DIRECT tail path). Shards are written in parallel processes. Prints a JSON summary: files, tensors, bytes.
"""

import argparse
import json
import multiprocessing
import os
import random
import re
import struct
import sys

BLOCK = 16 << 20  # random block, reused with a rotation per tensor


def parse_size(s):
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?i?b?)\s*", s, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"size {s!r}: want e.g. 4GiB, 512MiB, 1000000")
    unit = m.group(2).lower().rstrip("b").rstrip("i")
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[unit]


def plan(total, shards, hidden=4096):
    """Tensor names and shapes (BF16) summing to about total bytes, per shard."""
    per_layer = []
    inter = hidden * 11 // 4
    for name, shape in (("self_attn.q_proj.weight", (hidden, hidden)),
                        ("self_attn.k_proj.weight", (hidden // 4, hidden)),
                        ("self_attn.v_proj.weight", (hidden // 4, hidden)),
                        ("self_attn.o_proj.weight", (hidden, hidden)),
                        ("mlp.gate_proj.weight", (inter, hidden)),
                        ("mlp.up_proj.weight", (inter, hidden)),
                        ("mlp.down_proj.weight", (hidden, inter)),
                        ("input_layernorm.weight", (hidden,)),
                        ("post_attention_layernorm.weight", (hidden,))):
        per_layer.append((name, shape))
    layer_bytes = sum(2 * prod(s) for _, s in per_layer)
    embed = (8192, hidden)
    layers = max(1, -(-(total - 2 * prod(embed)) // layer_bytes))  # round up: at least total bytes
    tensors = [("model.embed_tokens.weight", embed)]
    for i in range(layers):
        tensors += [(f"model.layers.{i}.{n}", s) for n, s in per_layer]
    tensors.append(("model.norm.weight", (hidden,)))
    groups = [[] for _ in range(shards)]
    for i, t in enumerate(tensors):
        groups[min(i * shards // len(tensors), shards - 1)].append(t)
    for i, g in enumerate(groups):  # an odd-length tail per shard
        g.append((f"wcache.tail.{i}", (4097,)))
    return groups


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def write_shard(path, tensors, block, seed):
    header = {"__metadata__": {"format": "pt", "generator": "wcache gen_checkpoint.py"}}
    offset = 0
    for name, shape in tensors:
        n = 2 * prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - (8 + len(raw)) % 8) % 8)
    view = memoryview(block)
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape in tensors:
            left = 2 * prod(shape)
            pos = rng.randrange(len(block))
            while left:
                n = min(left, len(block) - pos)
                f.write(view[pos:pos + n])
                left -= n
                pos = 0
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--bytes", type=parse_size, default=parse_size("4GiB"))
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=4096)
    args = ap.parse_args()
    if args.shards < 1:
        ap.error("--shards must be at least 1")
    os.makedirs(args.dir, exist_ok=True)
    block = os.urandom(BLOCK)
    groups = plan(args.bytes, args.shards, args.hidden)
    files = [os.path.join(args.dir, f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors") for i in range(len(groups))]
    jobs = [(files[i], g, block, args.seed * 1000 + i) for i, g in enumerate(groups)]
    # Shards are written in parallel (fork): page allocation, not Python, bounds a tmpfs write.
    with multiprocessing.get_context("fork").Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        total = sum(pool.starmap(write_shard, jobs))
    count = sum(len(g) for g in groups)
    json.dump({"dir": os.path.abspath(args.dir), "files": files, "tensors": count, "bytes": total}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
