"""Canonical spellings of dtype and quantization, as core/cacheconfig has them.

The daemon compares ``dtype`` and ``quantization`` after this normalisation
(docs/cacheconfig.md, "dtype and quantization"): "bfloat16", "BF16" and
"torch.bfloat16" are all "bf16"; "" is "auto" (dtype) or "none"
(quantization). The tables equal the Go ones; both sides check the shared
vectors in core/cacheconfig/testdata/vectors.json, which cover every alias.
"""

from __future__ import annotations

DTYPE_AUTO = "auto"
QUANTIZATION_NONE = "none"

# Every accepted spelling (ASCII-lowercased, without a "torch." prefix) → canonical.
DTYPE_ALIASES = {
    "": DTYPE_AUTO, "auto": DTYPE_AUTO,
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "f16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "f32": "fp32", "float32": "fp32", "float": "fp32",
    "fp64": "fp64", "f64": "fp64", "float64": "fp64", "double": "fp64",
    "fp8_e4m3": "fp8_e4m3", "f8_e4m3": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "f8_e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
}

QUANTIZATION_ALIASES = {
    "": QUANTIZATION_NONE, "none": QUANTIZATION_NONE,
    "bnb": "bitsandbytes",
    "compressed_tensors": "compressed-tensors",
}

_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _ascii_lower(s: str) -> str:
    """Lowercase A-Z only (Unicode case mappings differ between languages)."""
    return s.translate(_ASCII_LOWER)


def normalize_dtype(dtype) -> str:
    """The canonical spelling of a dtype: ASCII-lowercased, a "torch." prefix
    dropped, aliases mapped ("bfloat16" → "bf16", "half" → "fp16", "" →
    "auto"); unknown spellings come back lowercased. A torch.dtype works too
    (``torch.bfloat16`` → "bf16")."""
    s = _ascii_lower(str(dtype))
    if s.startswith("torch."):
        s = s[len("torch."):]
    return DTYPE_ALIASES.get(s, s)


def normalize_quantization(quantization: str) -> str:
    """The canonical spelling of a quantization method: ASCII-lowercased, ""
    as "none", "bnb" as "bitsandbytes", "compressed_tensors" as
    "compressed-tensors"; other names are only lowercased."""
    s = _ascii_lower(quantization)
    return QUANTIZATION_ALIASES.get(s, s)
