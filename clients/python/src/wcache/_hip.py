"""hip-ipc on ROCm through the HIP runtime (libamdhip64) with ctypes.

Used where PyTorch cannot do it itself:

* the device's canonical UUID when torch's ``uuid`` is missing or not in a
  form canonical_device_uuid reads (hipDeviceGetUuid gives the 16 ASCII
  characters of the KFD unique_id; the canonical string is ``GPU-`` + them);
* opening hip-ipc handles without PyTorch (DeviceArray views) or under
  PyTorch's async allocator, where ``_new_shared_cuda`` refuses (then
  wrapped zero-copy as torch memory, as for CUDA).

HIP applies ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and
CUDA_VISIBLE_DEVICES when it initialises, so an ordinal here is the one
PyTorch uses in the same process. hipIpcOpenMemHandle is called with
hipIpcMemLazyEnablePeerAccess (1), the only flag ROCm accepts, on the
handle's device made current with hipSetDevice (the previous current device
is restored). A handle cannot be opened in the process that exported it
(hipErrorInvalidContext).
"""

from __future__ import annotations

import ctypes
from typing import Optional, Sequence

from ._errors import InvalidUUIDError, WcacheError
from ._uuid import PLATFORM_ROCM, canonical_device_uuid

# Tried in order: the sonames of ROCm 7, 6 and 5, then /opt/rocm/lib (as the
# Go backend does, plugins/rocm/hip).
HIP_LIBRARIES = ("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so",
                 "/opt/rocm/lib/libamdhip64.so.7", "/opt/rocm/lib/libamdhip64.so.6",
                 "/opt/rocm/lib/libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so")

HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1

# hipError_t codes after which the process cannot use the GPU again.
FATAL_HIP_ERRORS = {214: "hipErrorECCNotCorrectable", 700: "hipErrorIllegalAddress", 702: "hipErrorLaunchTimeOut",
                    710: "hipErrorAssert", 719: "hipErrorLaunchFailure"}


class _HipUUID(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_char * 16)]


class _HipIpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class HipRuntime:
    """The few HIP entry points the client needs. library: a path to dlopen,
    or None to try HIP_LIBRARIES. Every failing call raises WcacheError naming
    the function and the hipError_t."""

    def __init__(self, library: Optional[str] = None):
        candidates: Sequence[str] = (library,) if library else HIP_LIBRARIES
        errors = []
        self._lib = None
        for name in candidates:
            try:
                self._lib = ctypes.CDLL(name)
                self.path = name
                break
            except OSError as exc:
                errors.append(str(exc))
        if self._lib is None:
            raise WcacheError("hip-ipc handles without PyTorch need the HIP runtime: " + "; ".join(errors))
        c_int_p = ctypes.POINTER(ctypes.c_int)
        self._fn = {}
        for name, argtypes in (
                ("hipInit", [ctypes.c_uint]),
                ("hipGetDeviceCount", [c_int_p]),
                ("hipDeviceGet", [c_int_p, ctypes.c_int]),
                ("hipDeviceGetUuid", [ctypes.POINTER(_HipUUID), ctypes.c_int]),
                ("hipGetDevice", [c_int_p]),
                ("hipSetDevice", [ctypes.c_int]),
                ("hipIpcOpenMemHandle", [ctypes.POINTER(ctypes.c_void_p), _HipIpcMemHandle, ctypes.c_uint]),
                ("hipIpcCloseMemHandle", [ctypes.c_void_p])):
            fn = getattr(self._lib, name, None)
            if fn is None:
                raise WcacheError(f"HIP runtime {self.path} lacks {name}")
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            self._fn[name] = fn
        self._error_name = getattr(self._lib, "hipGetErrorName", None)
        if self._error_name is not None:
            self._error_name.argtypes, self._error_name.restype = [ctypes.c_int], ctypes.c_char_p
        self.call("hipInit", 0)

    def call(self, name: str, *args) -> None:
        rc = self._fn[name](*args)
        if rc == 0:
            return
        text = self._error_name(rc).decode() if self._error_name is not None else ""
        what = f"{name} failed with hipError_t {rc}" + (f" ({text})" if text else "")
        if rc in FATAL_HIP_ERRORS:
            raise WcacheError(f"{what}: a fatal error, the GPU is unusable in this process until it exits")
        raise WcacheError(what)

    def device_count(self) -> int:
        n = ctypes.c_int()
        self.call("hipGetDeviceCount", ctypes.byref(n))
        return n.value

    def device_uuid(self, ordinal: int) -> str:
        """Canonical UUID ("GPU-" + 16 characters) of the device this process
        sees as ordinal; InvalidUUIDError for a device without a unique id."""
        dev = ctypes.c_int()
        self.call("hipDeviceGet", ctypes.byref(dev), ordinal)
        u = _HipUUID()
        self.call("hipDeviceGetUuid", ctypes.byref(u), dev.value)
        return canonical_device_uuid(bytes(u.bytes).ljust(16, b"\0"), platform=PLATFORM_ROCM)

    def ordinal_for_uuid(self, uuid: str) -> int:
        """Ordinal of the device whose canonical UUID is uuid."""
        seen = []
        for i in range(self.device_count()):
            u = self.device_uuid(i)
            if u.lower() == uuid.lower():
                return i
            seen.append(u)
        raise WcacheError(f"this process does not see GPU {uuid} (it sees: {', '.join(seen) or 'none'})")

    def _on_device(self, ordinal: int, fn):
        prev = ctypes.c_int()
        self.call("hipGetDevice", ctypes.byref(prev))
        self.call("hipSetDevice", ordinal)
        try:
            return fn()
        finally:
            self.call("hipSetDevice", prev.value)

    def ipc_open(self, data: bytes, ordinal: int) -> int:
        """hipIpcOpenMemHandle of a 64-byte handle on ordinal; the pointer."""
        raw = _HipIpcMemHandle.from_buffer_copy(data)
        ptr = ctypes.c_void_p()
        self._on_device(ordinal, lambda: self.call("hipIpcOpenMemHandle", ctypes.byref(ptr), raw,
                                                   HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return ptr.value or 0

    def ipc_close(self, pointer: int, ordinal: int) -> None:
        self._on_device(ordinal, lambda: self.call("hipIpcCloseMemHandle", ctypes.c_void_p(pointer)))


def rocm_device_uuid(raw, index: int, library: Optional[str] = None) -> str:
    """The canonical UUID of ROCm device index from torch's uuid (raw; None
    when this torch has none), asking HIP through ctypes when raw is not in
    a form canonical_device_uuid reads."""
    first: Optional[Exception] = None
    if raw is not None:
        try:
            return canonical_device_uuid(raw, platform=PLATFORM_ROCM)
        except InvalidUUIDError as exc:
            first = exc
    try:
        return HipRuntime(library).device_uuid(index)
    except WcacheError as exc:
        if first is not None:
            raise first from exc
        raise
