"""The canonical device UUID strings daemon paths are keyed by, from the forms
PyTorch, HIP and the drivers report (see wcache._device for the forms). A leaf
of the package: wcache._device and wcache._hip both build on it.
"""

from __future__ import annotations

import re
from typing import Optional, Union

from ._errors import InvalidUUIDError
from ._paths import validate_device_uuid

PLATFORM_CUDA = "cuda"
PLATFORM_ROCM = "rocm"

_HEX_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_ROCM_CHARS = re.compile(r"^[0-9A-Za-z]{16}$")

RawUUID = Union[str, bytes, bytearray, object]


def _uuid_bytes(raw: RawUUID) -> Optional[bytes]:
    """16 bytes from a PyTorch uuid object, 16 raw bytes or a hex string;
    None when raw is a string that is not a bare hex UUID."""
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) != 16:
            raise InvalidUUIDError(repr(bytes(raw)), f"{len(raw)} bytes, want 16")
        return bytes(raw)
    if not isinstance(raw, str):
        as_bytes = getattr(raw, "bytes", None)  # torch's _CUuuid
        if isinstance(as_bytes, (bytes, bytearray)):
            return _uuid_bytes(as_bytes)
        raw = str(raw)
    if _HEX_UUID.match(raw):
        return bytes.fromhex(raw.replace("-", ""))
    return None


def _format_nvidia(b: bytes) -> str:
    h = b.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def canonical_device_uuid(raw: RawUUID, platform: str = PLATFORM_CUDA, mig: bool = False) -> str:
    """Return the canonical UUID string of a device.

    raw is one of: a canonical string (``GPU-…`` or ``MIG-…``, returned as is
    after validation); PyTorch's uuid object or its str (8-4-4-4-12 hex, no
    prefix); the 16 raw bytes. platform is "cuda" or "rocm": it says how the 16
    bytes are to be read (the bytes alone cannot tell). mig selects the
    ``MIG-`` prefix on CUDA.

    Raises InvalidUUIDError for anything else, for an all-zero NVIDIA UUID and
    for a ROCm device whose HIP UUID is not 16 letters or digits (ROCm reports
    "XX" for devices without a unique id, which would let GPUs share a path).
    """
    if platform not in (PLATFORM_CUDA, PLATFORM_ROCM):
        raise ValueError(f"platform must be {PLATFORM_CUDA!r} or {PLATFORM_ROCM!r}, not {platform!r}")
    if isinstance(raw, str) and (raw.startswith("GPU-") or raw.startswith("MIG-")):
        return validate_device_uuid(raw)
    b = _uuid_bytes(raw)
    if b is None:
        raise InvalidUUIDError(str(raw), "neither a canonical GPU-/MIG- UUID nor 8-4-4-4-12 hex")
    if platform == PLATFORM_ROCM:
        chars = b.rstrip(b"\x00").decode("ascii", errors="replace")
        if not _ROCM_CHARS.match(chars):
            raise InvalidUUIDError(
                _format_nvidia(b),
                f"the HIP UUID bytes spell {chars!r}, not 16 letters or digits: the device reports no unique "
                "id (ROCm shows 'GPU-XX'), so it cannot key a daemon path")
        return validate_device_uuid("GPU-" + chars)
    if b == bytes(16):
        raise InvalidUUIDError(_format_nvidia(b), "all-zero UUID: the driver reported no UUID")
    return validate_device_uuid(("MIG-" if mig else "GPU-") + _format_nvidia(b))
