"""safetensors dtype strings and their torch / numpy equivalents.

Every safetensors dtype has a bit width (used to check a manifest entry's
length against its shape). A dtype maps to a torch dtype when the installed
torch has one (float8 types need torch >= 2.1, uint16/32/64 torch >= 2.3,
float8_e8m0fnu torch >= 2.7) and to a numpy dtype when numpy has one (no
bfloat16 or float8). Where no equivalent exists the tensor is returned as its
raw bytes: a 1-D uint8 tensor (or array) of ``length`` bytes.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

# safetensors dtype → bits per element (safetensors/src/tensor.rs Dtype).
BITS: Dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

# safetensors dtype → name of the torch dtype attribute (the mapping the
# safetensors Python package uses).
_TORCH_NAMES: Dict[str, str] = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8",
    "I16": "int16", "U16": "uint16", "F16": "float16", "BF16": "bfloat16",
    "I32": "int32", "U32": "uint32", "F32": "float32",
    "F64": "float64", "I64": "int64", "U64": "uint64", "C64": "complex64",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}

_NUMPY_NAMES: Dict[str, str] = {
    "BOOL": "bool_", "U8": "uint8", "I8": "int8",
    "I16": "int16", "U16": "uint16", "F16": "float16",
    "I32": "int32", "U32": "uint32", "F32": "float32",
    "F64": "float64", "I64": "int64", "U64": "uint64", "C64": "complex64",
}


# Prefix of a published dtype that has no safetensors spelling: "torch.<name>".
TORCH_PREFIX = "torch."

# The torch dtypes a publish may name as "torch.<name>" (those safetensors
# lacks), by bits per element as torch stores them (sub-byte and packed types
# take a byte per element) — the vocabulary of core/tensorview in the Go tree;
# tests/test_vectors.py checks the two against core/tensorview/testdata.
# Any other "torch.<name>" is raw bytes.
_TORCH_NAMES_BY_BITS: Dict[int, Tuple[str, ...]] = {
    8: ("qint8", "quint8", "quint4x2", "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8",
        "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7",
        "int1", "int2", "int3", "int4", "int5", "int6", "int7", "float4_e2m1fn_x2"),
    16: ("bits16",),
    32: ("complex32", "qint32"),
    128: ("complex128",),
}
TORCH_BITS: Dict[str, int] = {name: bits for bits, names in _TORCH_NAMES_BY_BITS.items() for name in names}


def element_bits(dtype: str) -> Optional[int]:
    """Bits of one element of a dtype of the vocabulary (a safetensors dtype
    or "torch.<name>" of TORCH_BITS), None for any other string."""
    if dtype.startswith(TORCH_PREFIX):
        return TORCH_BITS.get(dtype[len(TORCH_PREFIX):])
    return BITS.get(dtype)


def byte_length(dtype: str, shape: Sequence[int]) -> Optional[int]:
    """Bytes a tensor of dtype and shape occupies, or None for an unknown
    dtype or a bit count that does not end on a byte boundary."""
    bits = element_bits(dtype)
    if bits is None:
        return None
    n = 1
    for d in shape:
        n *= int(d)
    total = n * bits
    if total % 8:
        return None
    return total // 8


def torch_dtype(dtype: str, torch_module):
    """The torch dtype for a safetensors dtype (or a published "torch.<name>"
    of TORCH_BITS whose element size this torch agrees with), or None when
    this torch has none: the tensor is then raw bytes."""
    if dtype.startswith(TORCH_PREFIX):
        name = dtype[len(TORCH_PREFIX):]
        found = getattr(torch_module, name, None) if name in TORCH_BITS else None
        if not isinstance(found, torch_module.dtype):
            return None
        try:
            size = torch_module.empty((), dtype=found).element_size()
        except (RuntimeError, TypeError):
            return None
        return found if size * 8 == TORCH_BITS[name] else None
    name = _TORCH_NAMES.get(dtype)
    return getattr(torch_module, name, None) if name else None


def safetensors_dtype(tdtype, torch_module) -> str:
    """The dtype string a torch dtype is published as: its safetensors
    spelling, or "torch.<name>" for one safetensors lacks (quantized and
    bit-packed types, e.g. "torch.quint8", "torch.uint4")."""
    for st, name in _TORCH_NAMES.items():
        if getattr(torch_module, name, None) == tdtype:
            return st
    return TORCH_PREFIX + str(tdtype).rsplit(".", 1)[-1]


def numpy_dtype(dtype: str, numpy_module):
    """The numpy dtype for a safetensors dtype, or None when numpy has none."""
    name = _NUMPY_NAMES.get(dtype)
    return numpy_module.dtype(getattr(numpy_module, name)) if name else None


def contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """Row-major element strides of shape."""
    strides = []
    acc = 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))
