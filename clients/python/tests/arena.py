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
    # content_policies: these fakes are about the wire and the lease, not
    # content; they answer a client that names no files (test_content.py
    # and test_proof.py cover the content check).
    manifest = pb.Manifest(device_uuid=device_uuid, backend="fake", handles=handles, tensors=entries,
                           lease_id=7, generation=3, protocol_version=1,
                           content_policies=["identity", "hash", "headers"],
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


def loaded_from(manifest, directory: str) -> None:
    """Give manifest the content records of the checkpoint in directory with
    their identities, as a daemon that loaded those files records them (a
    client naming them proves them by one stat each)."""
    import os  # noqa: PLC0415

    from wcache import checkpoint, content  # noqa: PLC0415

    records = [content.FileContent(os.path.basename(p), content.PREFIX + "0" * 64, p, content.Identity.of(os.stat(p)))
               for p in checkpoint.model_files(directory)]
    manifest.files.extend(content.files_to_proto(records))
