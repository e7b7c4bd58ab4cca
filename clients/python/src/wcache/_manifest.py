"""Validated view of an Attach manifest: which bytes of which handle hold each tensor."""

from __future__ import annotations

import functools
import itertools
import math
import operator
from typing import Dict, List, NamedTuple, Optional, Tuple

from . import dtypes
from ._errors import ProtocolError

HANDLE_POSIX_SHM = "posix-shm"
# Descriptor kinds: received on the daemon's descriptor channel (wcache._fdchannel).
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


def _new_spec(fields: tuple) -> TensorSpec:
    """TensorSpec from all nine fields, without the Python-level __new__ of
    the NamedTuple (a manifest builds 100k of them)."""
    return tuple.__new__(TensorSpec, fields)


class HandleSpec(NamedTuple):
    """One exported allocation: kind ("posix-shm", "cuda-ipc", "hip-ipc"), opaque data, size in bytes."""

    kind: str
    data: bytes
    size: int


class TensorColumns(NamedTuple):
    """The tensors of a manifest by column, in manifest order: what
    materialize reads in bulk (wcache._hostviews). dtypes are the distinct
    dtype strings and dtype_index each tensor's index into them; plain[i]
    says tensor i has no layout (None: none has one). listed: the
    TensorSpecs when parsing built them (Manifest.tensors, or a table
    checked one by one), else None (``specs`` builds them)."""

    names: List[str]
    dtypes: List[str]
    dtype_index: List[int]
    shapes: List[Tuple[int, ...]]
    handle_index: List[int]
    offsets: List[int]
    lengths: List[int]
    plain: Optional[List[bool]]
    listed: Optional[List["TensorSpec"]]

    def specs(self) -> List["TensorSpec"]:
        """The TensorSpecs, in manifest order."""
        if self.listed is not None:
            return self.listed
        new = functools.partial(tuple.__new__, TensorSpec)
        return list(map(new, zip(self.names, map(self.dtypes.__getitem__, self.dtype_index), self.shapes,
                                 self.handle_index, self.offsets, self.lengths, itertools.repeat(""),
                                 itertools.repeat(None), itertools.repeat(0))))

    def spec(self, i: int) -> "TensorSpec":
        """The TensorSpec of tensor i."""
        if self.listed is not None:
            return self.listed[i]
        return _new_spec((self.names[i], self.dtypes[self.dtype_index[i]], self.shapes[i], self.handle_index[i],
                          self.offsets[i], self.lengths[i], "", None, 0))


def parse_manifest(manifest) -> Tuple[List[HandleSpec], List[TensorSpec]]:
    """Check a Manifest message and return its handles and tensors.

    Raises ProtocolError when a tensor names a missing handle, lies outside
    its handle, has a length that disagrees with its dtype and shape, or
    appears twice. Unknown dtypes are accepted (they are returned as raw bytes).
    """
    handles, columns = parse_columns(manifest)
    return handles, columns.specs()


def parse_columns(manifest) -> Tuple[List[HandleSpec], TensorColumns]:
    """parse_manifest's handles and checks, the tensors by column (a
    tensor table's TensorSpecs are built only when asked for)."""
    handles = [HandleSpec(h.kind, bytes(h.data), int(h.size)) for h in manifest.handles]
    sizes = [h.size for h in handles]
    specs: List[TensorSpec] = []
    seen = set()
    # One lookup per distinct dtype, not per tensor (100k-tensor manifests).
    bits_of: Dict[str, Optional[int]] = {}
    if manifest.HasField("tensor_table"):
        if len(manifest.tensors):
            raise ProtocolError("manifest carries both tensors and a tensor table")
        columns, checked = _table_columns(manifest.tensor_table, sizes)
        if checked:
            return handles, columns
        listed = columns.specs()
    else:
        listed, columns = map(_tensor_spec, manifest.tensors), None
    for spec in listed:
        name, dtype, shape, handle_index, offset, length, storage, strides, storage_offset = spec
        if name in seen:
            raise ProtocolError(f"manifest lists tensor {name!r} twice")
        seen.add(name)
        if handle_index >= len(sizes):
            raise ProtocolError(f"tensor {name!r}: handle index {handle_index} out of range "
                                f"({len(handles)} handles)")
        size = sizes[handle_index]
        if offset + length > size:
            raise ProtocolError(f"tensor {name!r}: bytes [{offset}, {offset + length}) "
                                f"lie outside handle {handle_index} of {size} bytes")
        if storage or strides is not None or storage_offset != 0:  # spec.has_layout
            _check_layout(spec)
        else:
            bits = bits_of.get(dtype, -1)
            if bits == -1:
                bits = bits_of[dtype] = dtypes.element_bits(dtype)
            if bits is not None:
                total = math.prod(shape) * bits
                if total % 8 == 0 and total // 8 != length:
                    raise ProtocolError(f"tensor {name!r}: {dtype}{list(shape)} is {total // 8} bytes, "
                                        f"the manifest says {length}")
        specs.append(spec)
    for i, h in enumerate(handles):
        if h.kind in (HANDLE_CUDA_IPC, HANDLE_HIP_IPC) and len(h.data) != IPC_HANDLE_SIZE:
            raise ProtocolError(f"handle {i} ({h.kind}): {len(h.data)} bytes of handle data, want {IPC_HANDLE_SIZE}")
    return handles, columns._replace(listed=specs) if columns is not None else _spec_columns(specs)


def _spec_columns(specs: List[TensorSpec]) -> TensorColumns:
    """The columns of specs (a manifest of Manifest.tensors entries)."""
    if not specs:
        return TensorColumns([], [], [], [], [], [], [], None, specs)
    names, dtype_names, shapes, handle_ix, offsets, lengths, storages, strides, storage_offsets = map(
        list, zip(*specs))
    kinds = list(dict.fromkeys(dtype_names))
    index = {d: i for i, d in enumerate(kinds)}
    plain = [not (st or sd is not None or so) for st, sd, so in zip(storages, strides, storage_offsets)]
    return TensorColumns(names, kinds, list(map(index.__getitem__, dtype_names)), shapes, handle_ix, offsets,
                         lengths, None if all(plain) else plain, specs)


def _tensor_spec(t) -> TensorSpec:
    """The TensorSpec of a Manifest.tensors entry."""
    if t.HasField("layout"):
        return TensorSpec(t.name, t.dtype, tuple(t.shape), t.handle_index, t.offset, t.length, t.layout.storage,
                          tuple(t.layout.strides) or None, t.layout.storage_offset)
    return _new_spec((t.name, t.dtype, tuple(t.shape), t.handle_index, t.offset, t.length, "", None, 0))


def _table_columns(table, sizes: List[int]) -> Tuple[TensorColumns, bool]:
    """The columns of a Manifest.tensor_table (AttachRequest.tensor_table),
    in manifest order, and whether they passed parse_manifest's checks in
    bulk (names unique, handles in range, bytes inside their handle, lengths
    that agree with dtype and shape for whole-byte dtypes); when not,
    parse_manifest checks them one by one (and names the first bad one).
    Columns are read once each, names expanded from their front coding.
    Raises ProtocolError when the columns do not fit together (as
    proto/wcache/daemon/v1 TensorTable.Each checks)."""
    shared, suffix_len = list(table.name_shared), list(table.name_suffix_len)
    dtype_ix, ndims = list(table.dtype), list(table.ndim)
    handle_ix, offsets, lengths = list(table.handle_index), list(table.offset), list(table.length)
    dims, names_of, suffixes = list(table.dims), list(table.dtypes), table.name_suffixes
    n = len(shared)
    if any(len(c) != n for c in (suffix_len, dtype_ix, ndims, handle_ix, offsets, lengths)):
        raise ProtocolError("malformed tensor table: columns of different lengths")
    if sum(suffix_len) != len(suffixes) or sum(ndims) != len(dims):
        raise ProtocolError(f"malformed tensor table: {len(suffixes)} suffix bytes and {len(dims)} dims, "
                            f"the columns say {sum(suffix_len)} and {sum(ndims)}")
    if n and max(dtype_ix) >= len(names_of):
        raise ProtocolError(f"malformed tensor table: dtype {max(dtype_ix)} of {len(names_of)}")
    # ASCII names (the usual case) are expanded as str, without a decode per name.
    text = suffixes.decode() if suffixes.isascii() else None
    names: List[str] = []
    prev = text[:0] if text is not None else b""
    part = text if text is not None else suffixes
    at = 0
    for keep, grow in zip(shared, suffix_len):
        end = at + grow
        prev = prev[:keep] + part[at:end]
        at = end
        names.append(prev)
    # A name that shares more than its predecessor has came out short:
    # checked once for all (map in C), named one by one only then.
    if n and (shared[0] or not all(map(operator.le, itertools.islice(shared, 1, None),
                                       map(operator.add, shared, suffix_len)))):
        for i, keep in enumerate(shared):
            if i and keep > len(names[i - 1]) or not i and keep:
                raise ProtocolError(f"malformed tensor table: tensor {i} shares {keep} bytes of a "
                                    f"{len(names[i - 1]) if i else 0}-byte name")
    if text is None:
        try:
            names = [b.decode() for b in names]
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"malformed tensor table: a name is not UTF-8 ({exc})") from None
    flat = iter(dims)
    shapes = [tuple(itertools.islice(flat, nd)) for nd in ndims]
    bits = [dtypes.element_bits(d) for d in names_of]
    checked = (n == 0 or (
        len(set(names)) == n and max(handle_ix) < len(sizes)
        and all(b is not None and b % 8 == 0 for b in (bits[i] for i in set(dtype_ix)))
        and _inside(handle_ix, offsets, lengths, sizes)
        and _lengths_agree(shapes, dtype_ix, [(b or 0) // 8 for b in bits], lengths)))
    return TensorColumns(names, list(names_of), dtype_ix, shapes, handle_ix, offsets, lengths, None, None), checked


def _inside(handle_ix: List[int], offsets: List[int], lengths: List[int], sizes: List[int]) -> bool:
    """Whether every tensor's bytes lie inside its handle (handle indexes in range)."""
    ends = map(operator.add, offsets, lengths)
    if min(handle_ix) == max(handle_ix):  # one handle: one bound
        return max(ends) <= sizes[handle_ix[0]]
    return all(map(operator.le, ends, map(sizes.__getitem__, handle_ix)))


def _lengths_agree(shapes: List[Tuple[int, ...]], dtype_ix: List[int], item_bytes: List[int],
                   lengths: List[int]) -> bool:
    """Whether every length is its shape's elements times its dtype's
    bytes (item_bytes by dtype index), element counts computed once per shape."""
    elements = {s: math.prod(s) for s in dict.fromkeys(shapes)}
    if min(dtype_ix) == max(dtype_ix):  # one dtype: one table of byte counts per shape
        per = item_bytes[dtype_ix[0]]
        return list(map({s: e * per for s, e in elements.items()}.__getitem__, shapes)) == lengths
    return list(map(operator.mul, map(elements.__getitem__, shapes), map(item_bytes.__getitem__, dtype_ix))) == lengths


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
