"""Validated view of an Attach manifest: which bytes of which handle hold each tensor."""

from __future__ import annotations

from typing import List, NamedTuple, Tuple

from . import dtypes
from .errors import ProtocolError

HANDLE_POSIX_SHM = "posix-shm"
# Descriptor kinds: received on the daemon's descriptor channel (wcache.fdchannel).
HANDLE_MEMFD = "memfd"
HANDLE_CUDA_VMM_FD = "cuda-vmm-fd"
DESCRIPTOR_KINDS = (HANDLE_MEMFD, HANDLE_CUDA_VMM_FD)
HANDLE_CUDA_IPC = "cuda-ipc"
HANDLE_HIP_IPC = "hip-ipc"

IPC_HANDLE_SIZE = 64  # cudaIpcMemHandle_t / hipIpcMemHandle_t


class TensorSpec(NamedTuple):
    """Where one tensor lives: bytes [offset, offset+length) of handle handle_index."""

    name: str
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: Tuple[int, ...]
    handle_index: int
    offset: int
    length: int


class HandleSpec(NamedTuple):
    """One exported allocation: kind ("posix-shm", "cuda-ipc", "hip-ipc"), opaque data, size in bytes."""

    kind: str
    data: bytes
    size: int


def parse_manifest(manifest) -> Tuple[List[HandleSpec], List[TensorSpec]]:
    """Check a Manifest message and return its handles and tensors.

    Raises ProtocolError when a tensor names a missing handle, lies outside
    its handle, has a length that disagrees with its dtype and shape, or
    appears twice. Unknown dtypes are accepted (they are returned as raw bytes).
    """
    handles = [HandleSpec(h.kind, bytes(h.data), int(h.size)) for h in manifest.handles]
    specs: List[TensorSpec] = []
    seen = set()
    for t in manifest.tensors:
        spec = TensorSpec(t.name, t.dtype, tuple(int(d) for d in t.shape), int(t.handle_index),
                          int(t.offset), int(t.length))
        if spec.name in seen:
            raise ProtocolError(f"manifest lists tensor {spec.name!r} twice")
        seen.add(spec.name)
        if spec.handle_index >= len(handles):
            raise ProtocolError(f"tensor {spec.name!r}: handle index {spec.handle_index} out of range "
                                f"({len(handles)} handles)")
        size = handles[spec.handle_index].size
        if spec.offset + spec.length > size:
            raise ProtocolError(f"tensor {spec.name!r}: bytes [{spec.offset}, {spec.offset + spec.length}) "
                                f"lie outside handle {spec.handle_index} of {size} bytes")
        want = dtypes.byte_length(spec.dtype, spec.shape)
        if want is not None and want != spec.length:
            raise ProtocolError(f"tensor {spec.name!r}: {spec.dtype}{list(spec.shape)} is {want} bytes, "
                                f"the manifest says {spec.length}")
        specs.append(spec)
    for i, h in enumerate(handles):
        if h.kind in (HANDLE_CUDA_IPC, HANDLE_HIP_IPC) and len(h.data) != IPC_HANDLE_SIZE:
            raise ProtocolError(f"handle {i} ({h.kind}): {len(h.data)} bytes of handle data, want {IPC_HANDLE_SIZE}")
    return handles, specs
