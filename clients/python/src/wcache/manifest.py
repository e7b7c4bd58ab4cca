"""Validated view of an Attach manifest: which bytes of which handle hold each tensor."""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

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
    """Where one tensor lives: bytes [offset, offset+length) of handle handle_index.

    A published tensor may view a storage of its own: ``storage`` names it
    (tensors with the same non-empty name share the bytes), ``strides`` are
    in elements (None: row-major contiguous) and ``storage_offset`` is the
    element offset of the tensor's first element within those bytes.
    """

    name: str
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: Tuple[int, ...]
    handle_index: int
    offset: int
    length: int
    storage: str = ""
    strides: Optional[Tuple[int, ...]] = None
    storage_offset: int = 0

    @property
    def has_layout(self) -> bool:
        """Whether the tensor is a strided view rather than its contiguous bytes."""
        return bool(self.storage) or self.strides is not None or self.storage_offset != 0


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
        storage, strides, storage_offset = "", None, 0
        if t.HasField("layout"):
            storage = t.layout.storage
            strides = tuple(int(s) for s in t.layout.strides) or None
            storage_offset = int(t.layout.storage_offset)
        spec = TensorSpec(t.name, t.dtype, tuple(int(d) for d in t.shape), int(t.handle_index),
                          int(t.offset), int(t.length), storage, strides, storage_offset)
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
        if spec.has_layout:
            _check_layout(spec)
        else:
            want = dtypes.byte_length(spec.dtype, spec.shape)
            if want is not None and want != spec.length:
                raise ProtocolError(f"tensor {spec.name!r}: {spec.dtype}{list(spec.shape)} is {want} bytes, "
                                    f"the manifest says {spec.length}")
        specs.append(spec)
    for i, h in enumerate(handles):
        if h.kind in (HANDLE_CUDA_IPC, HANDLE_HIP_IPC) and len(h.data) != IPC_HANDLE_SIZE:
            raise ProtocolError(f"handle {i} ({h.kind}): {len(h.data)} bytes of handle data, want {IPC_HANDLE_SIZE}")
    return handles, specs


def _check_layout(spec: TensorSpec) -> None:
    """A strided view must stay inside its storage's bytes (for dtypes with a
    whole number of bytes per element; others are returned as raw bytes)."""
    if spec.strides is not None and len(spec.strides) != len(spec.shape):
        raise ProtocolError(f"tensor {spec.name!r}: {len(spec.strides)} strides for {len(spec.shape)} dimensions")
    bits = dtypes.element_bits(spec.dtype)
    if bits is None or bits % 8 or any(d == 0 for d in spec.shape):
        return
    strides = spec.strides if spec.strides is not None else dtypes.contiguous_strides(spec.shape)
    if any(s < 0 for s in strides):
        raise ProtocolError(f"tensor {spec.name!r}: negative strides {list(strides)}")
    last = spec.storage_offset + sum((d - 1) * s for d, s in zip(spec.shape, strides))
    if (last + 1) * (bits // 8) > spec.length:
        raise ProtocolError(f"tensor {spec.name!r}: a view of shape {list(spec.shape)}, strides {list(strides)} "
                            f"and storage offset {spec.storage_offset} reaches past its {spec.length}-byte storage")
