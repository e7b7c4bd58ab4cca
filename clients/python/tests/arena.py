"""Packs tensors into shared-memory files and describes them with a Manifest,
the way the mock backend exports them (posix-shm handles), for client tests."""

from __future__ import annotations

import os
from typing import Dict, List, Sequence, Tuple

from wcache import pb
from st_writer import Tensor


def build(directory: str, tensors: Sequence[Tensor], n_handles: int = 2, align: int = 64,
          device_uuid: str = "GPU-fake-0", misalign: int = 0) -> Tuple[object, Dict[str, Tuple[str, int, int]]]:
    """Write tensors round-robin into n_handles files under directory; each
    tensor starts at a multiple of align (plus misalign bytes). Returns the
    Manifest and name → (file, offset, length)."""
    blobs: List[bytearray] = [bytearray() for _ in range(n_handles)]
    where: Dict[str, Tuple[str, int, int]] = {}
    entries = []
    for i, (name, dtype, shape, data) in enumerate(tensors):
        h = i % n_handles
        buf = blobs[h]
        buf.extend(b"\xee" * (-len(buf) % align + misalign))
        off = len(buf)
        buf.extend(data)
        entries.append(pb.Tensor(name=name, dtype=dtype, shape=list(shape), handle_index=h,
                                 offset=off, length=len(data)))
    handles = []
    for h, buf in enumerate(blobs):
        path = os.path.join(directory, f"arena-{h}")
        with open(path, "wb") as f:
            f.write(bytes(buf) + b"\xee" * 4096)
        handles.append(pb.Handle(kind="posix-shm", data=path.encode(), size=len(buf) + 4096))
    for e in entries:
        where[e.name] = (handles[e.handle_index].data.decode(), e.offset, e.length)
    manifest = pb.Manifest(device_uuid=device_uuid, backend="fake", handles=handles, tensors=entries,
                           lease_id=7, generation=3, protocol_version=1,
                           config=pb.CacheConfig(model="m", tp_size=1, pp_size=1, dp_size=1, ep_size=1,
                                                 dtype="auto", quantization="none", protocol_version=1))
    return manifest, where


def mapped_ranges(path: str) -> List[Tuple[int, int]]:
    """Address ranges of this process's mappings of path (from /proc/self/maps)."""
    real = os.path.realpath(path)
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip() in (real, real + " (deleted)"):
                lo, hi = parts[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    return out
