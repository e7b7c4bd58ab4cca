"""The physical identity of the GPU a process loads on.

Daemon paths are keyed by the vendor's canonical UUID string, the one
nvidia-smi, rocminfo and CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES use:

* NVIDIA: ``GPU-`` + 8-4-4-4-12 lowercase hex of the 16 UUID bytes
  (``MIG-`` + the same for a MIG instance).
* AMD: ``GPU-`` + the 16 characters of the HIP UUID (a 16-hex-digit KFD
  unique_id whose ASCII characters are the 16 "bytes").

PyTorch (and therefore SGLang's ``get_device_uuid``) prints
``torch.cuda.get_device_properties(i).uuid`` as 8-4-4-4-12 hex of the 16 bytes
with no prefix, on both vendors; on ROCm those bytes are the ASCII characters,
so ``65303434-3830-3136-3839-323537666234`` is the device rocminfo calls
``GPU-e044801689257fb4``. canonical_device_uuid converts either form.
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import List, Optional

from ._errors import WcacheError
from ._paths import Getenv, _getter, validate_device_uuid
from ._uuid import PLATFORM_CUDA, PLATFORM_ROCM, _format_nvidia, _uuid_bytes, canonical_device_uuid

# The variable that selects the backend for the wcache CLI; with "mock" the
# device functions answer for the mock backend's devices instead of a GPU.
BACKEND_ENV = "WCACHE_BACKEND"
BACKEND_MOCK = "mock"
MOCK_DEVICES_ENV = "WCACHE_MOCK_DEVICES"
MOCK_DEFAULT_DEVICES = 2  # plugins/mock/mockbackend.DefaultDeviceCount
# The device_capability the mock backend reports for every device.
MOCK_CAPABILITY = "mock"


def torch_platform(torch_module=None) -> str:
    """"rocm" when the given (or imported) torch is a ROCm build, else "cuda"."""
    if torch_module is None:
        import torch as torch_module  # noqa: PLC0415 - optional dependency
    return PLATFORM_ROCM if getattr(torch_module.version, "hip", None) else PLATFORM_CUDA


def _nvml_is_mig(uuid_body: str) -> Optional[bool]:
    """Ask NVML whether "MIG-<body>" or "GPU-<body>" names a device.

    True/False when NVML answers, None when NVML is unavailable or knows
    neither. NVML's handle-by-UUID lookup accepts MIG UUIDs (nvml.h).
    """
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    init = getattr(lib, "nvmlInit_v2", None)
    lookup = getattr(lib, "nvmlDeviceGetHandleByUUID", None)
    shutdown = getattr(lib, "nvmlShutdown", None)
    if init is None or lookup is None or shutdown is None or init() != 0:
        return None
    try:
        lookup.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        handle = ctypes.c_void_p()
        if lookup(("MIG-" + uuid_body).encode(), ctypes.byref(handle)) == 0:
            return True
        if lookup(("GPU-" + uuid_body).encode(), ctypes.byref(handle)) == 0:
            return False
        return None
    finally:
        shutdown()


def _mock_backend(backend: Optional[str], getenv: Getenv) -> bool:
    return (backend if backend is not None else _getter(getenv)(BACKEND_ENV).strip()) == BACKEND_MOCK


def mock_device_uuids(getenv: Getenv = None) -> List[str]:
    """The UUIDs of the mock backend's devices by ordinal, as the mock derives
    them from WCACHE_MOCK_DEVICES: a count N (default 2) gives "GPU-" + the
    first 16 bytes of sha256("wcache-mock-<i>") in the 8-4-4-4-12 form; a
    comma-separated list gives those UUIDs."""
    raw = _getter(getenv)(MOCK_DEVICES_ENV).strip()
    if raw and not raw.isdigit():
        return [validate_device_uuid(u.strip()) for u in raw.split(",")]
    count = int(raw) if raw else MOCK_DEFAULT_DEVICES
    return ["GPU-" + _format_nvidia(hashlib.sha256(f"wcache-mock-{i}".encode()).digest()[:16]) for i in range(count)]


def _mock_uuid(index: int, getenv: Getenv) -> str:
    uuids = mock_device_uuids(getenv)
    if not 0 <= index < len(uuids):
        raise WcacheError(f"device index {index} out of range: the mock backend has {len(uuids)} devices "
                          f"({MOCK_DEVICES_ENV})")
    return uuids[index]


def device_uuid(index: int, mig: Optional[bool] = None, backend: Optional[str] = None,
                getenv: Getenv = None) -> str:
    """Canonical UUID of the GPU this process sees as ``cuda:index``.

    With backend "mock" (default: $WCACHE_BACKEND, read through getenv) it is
    the UUID of mock device ``index`` instead (mock_device_uuids), so that the
    same engine code runs against a mock daemon on a machine without a GPU.

    index is the process-visible ordinal (CUDA_VISIBLE_DEVICES,
    HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES already applied by the
    runtime); the answer is the physical identity. Uses
    ``torch.cuda.get_device_properties(index).uuid``; on ROCm, when that is
    missing or not in a form canonical_device_uuid reads, hipDeviceGetUuid
    through ctypes (wcache._hip). On CUDA, mig=None asks
    NVML whether the device is a MIG instance (no NVML: assumed not);
    pass True/False to decide yourself.

    Raises WcacheError when torch is not installed, has no GPU support, or
    the index is out of range; InvalidUUIDError when the device has no
    usable UUID.
    """
    if _mock_backend(backend, getenv):
        return _mock_uuid(index, getenv)
    try:
        import torch  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise WcacheError("device_uuid needs PyTorch; pass device_uuid= or socket= explicitly") from exc
    if not torch.cuda.is_available():
        raise WcacheError("device_uuid: PyTorch sees no GPU (torch.cuda.is_available() is False)")
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise WcacheError(f"device_uuid: device index {index} out of range (this process sees {count} GPUs)")
    props = torch.cuda.get_device_properties(index)
    raw = getattr(props, "uuid", None)
    platform = torch_platform(torch)
    if platform == PLATFORM_ROCM:
        from ._hip import rocm_device_uuid  # noqa: PLC0415 - ctypes on HIP only when torch's form fails

        return rocm_device_uuid(raw, index)
    if platform == PLATFORM_CUDA and mig is None:
        b = _uuid_bytes(raw)
        mig = bool(b is not None and _nvml_is_mig(_format_nvidia(b)))
    return canonical_device_uuid(raw, platform=platform, mig=bool(mig))


def device_capability(index: int, backend: Optional[str] = None, getenv: Getenv = None) -> str:
    """The CacheConfig device_capability of ``cuda:index``, as the daemon's
    backend reports it: "<major>.<minor>" on CUDA (e.g. "9.0" for sm_90, as
    the CUDA backend formats NVML's compute capability), the gfx target on
    ROCm (e.g. "gfx942", from gcnArchName without its feature suffixes).
    With backend "mock" (default: $WCACHE_BACKEND) it is "mock", what the
    mock backend reports for every device; no GPU or torch is needed.

    Raises WcacheError when torch is missing or sees no GPU (and the backend
    is not the mock), or when a mock index is out of range.
    """
    if _mock_backend(backend, getenv):
        _mock_uuid(index, getenv)
        return MOCK_CAPABILITY
    try:
        import torch  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise WcacheError("device_capability needs PyTorch") from exc
    if not torch.cuda.is_available():
        raise WcacheError("device_capability: PyTorch sees no GPU (torch.cuda.is_available() is False)")
    props = torch.cuda.get_device_properties(index)
    if torch_platform(torch) == PLATFORM_ROCM:
        return str(getattr(props, "gcnArchName", "")).split(":", 1)[0]
    return f"{props.major}.{props.minor}"


def device_index_for_uuid(uuid: str) -> int:
    """The process-visible ordinal of the GPU whose canonical UUID is uuid.

    Raises WcacheError when this process does not see that GPU (e.g. it is
    hidden by CUDA_VISIBLE_DEVICES): opening its IPC handles would fail or
    map them through a peer device.
    """
    import torch  # noqa: PLC0415 - optional dependency

    seen = []
    for i in range(torch.cuda.device_count()):
        candidate = device_uuid(i, mig=uuid.startswith("MIG-"))
        if candidate == uuid:
            return i
        seen.append(candidate)
    raise WcacheError(f"this process does not see GPU {uuid} (it sees: {', '.join(seen) or 'none'})")
