"""Writes safetensors checkpoints for tests, and reads them back as they are on disk (stdlib + numpy, no
safetensors package)."""

from __future__ import annotations

import json
import os
import struct
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

Tensor = Tuple[str, str, Sequence[int], bytes]  # name, safetensors dtype, shape, raw bytes

_ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I8": 1, "U8": 1, "I16": 2, "I32": 4, "I64": 8,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8, "C64": 8}


def encode(tensors: Sequence[Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding tensors back to back, in order.
    The header is padded with spaces to a multiple of 8 bytes (like the reference writer)."""
    header: Dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def write(path: str, tensors: Sequence[Tensor], metadata: Optional[Dict[str, str]] = None) -> None:
    with open(path, "wb") as f:
        f.write(encode(tensors, metadata))


def read_dir(directory: str) -> Iterator[Tensor]:
    """Every tensor of the .safetensors files of directory as they are on disk now, the files in name order
    and each file's tensors in its header's order (the inverse of write, metadata skipped)."""
    for fname in sorted(os.listdir(directory)):
        if not fname.endswith(".safetensors"):
            continue
        with open(os.path.join(directory, fname), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            data = f.read()
        for name, meta in header.items():
            if name != "__metadata__":
                lo, hi = meta["data_offsets"]
                yield (name, meta["dtype"], tuple(meta["shape"]), data[lo:hi])


def random_tensor(rng: np.random.Generator, name: str, dtype: str, shape: Sequence[int]) -> Tensor:
    n = int(np.prod(shape)) if len(shape) else 1
    nbytes = n * _ITEMSIZE[dtype]
    if dtype == "F32":
        data = rng.standard_normal(n).astype("<f4").tobytes()
    elif dtype == "F16":
        data = rng.standard_normal(n).astype("<f2").tobytes()
    elif dtype == "BF16":
        data = (rng.standard_normal(n).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    else:
        data = rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    assert len(data) == nbytes
    return (name, dtype, tuple(shape), data)


def make_checkpoint(directory: str, n_tensors: int = 300, n_shards: int = 3, seed: int = 1,
                    with_index: bool = True) -> Dict[str, Tensor]:
    """A sharded checkpoint of n_tensors BF16/F16/F32 tensors (mixed shapes, a
    scalar and an empty tensor included) with model.safetensors.index.json.
    Returns name → tensor."""
    rng = np.random.default_rng(seed)
    dtypes = ["BF16", "F16", "F32"]
    all_tensors: List[Tensor] = []
    for i in range(n_tensors):
        dtype = dtypes[i % 3]
        if i == 0:
            shape: Tuple[int, ...] = ()
        elif i == 1:
            shape = (0, 4)
        else:
            shape = tuple(int(d) for d in rng.integers(1, 48, size=1 + i % 3))
        all_tensors.append(random_tensor(rng, f"model.layers.{i // 10}.w{i % 10}.{dtype.lower()}", dtype, shape))
    os.makedirs(directory, exist_ok=True)
    weight_map: Dict[str, str] = {}
    for s in range(n_shards):
        shard = [t for j, t in enumerate(all_tensors) if j % n_shards == s]
        fname = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        write(os.path.join(directory, fname), shard, metadata={"format": "pt"})
        for t in shard:
            weight_map[t[0]] = fname
    if with_index:
        total = sum(len(t[3]) for t in all_tensors)
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return {t[0]: t for t in all_tensors}
