"""cuda-vmm-fd handles: CUDA VMM memory received as a file descriptor, mapped
through the driver API by ctypes.

The daemon's CUDA backend (``--backend-opt handle=cuda-vmm-fd``) allocates
with cuMemCreate and exports each allocation with
cuMemExportToShareableHandle as a POSIX file descriptor, which attach()
receives on the daemon's descriptor channel. This module maps one:
cuMemImportFromShareableHandle, cuMemAddressReserve and cuMemMap of the
handle's size rounded up to the granularity, then cuMemSetAccess read-only
(attached clients never write the shared weights; see docs/protocol.md). The
physical handle is released right after mapping: the mapping holds the
memory, and closing the region unmaps it and frees the address range. No
shared PID namespace with the daemon is needed.
"""

from __future__ import annotations

import ctypes

from ._errors import WcacheError
from ._ipc import CudaDriver, DriverIpcRegion
from ._manifest import HandleSpec

CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
CU_MEM_ACCESS_FLAGS_PROT_READ = 1


class _CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _CUmemAllocationProp(ctypes.Structure):
    """CUmemAllocationProp of the CUDA 12 headers (32 bytes on LP64)."""

    _fields_ = [("type", ctypes.c_uint), ("requestedHandleTypes", ctypes.c_uint), ("location", _CUmemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", ctypes.c_ubyte * 8)]


class _CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", _CUmemLocation), ("flags", ctypes.c_uint)]


assert ctypes.sizeof(_CUmemAllocationProp) == 32 and ctypes.sizeof(_CUmemAccessDesc) == 12


def bind_vmm(driver: CudaDriver) -> None:
    """Bind the VMM entry points on driver (once); WcacheError naming the
    first one the driver lacks (CUDA before 10.2)."""
    if "cuMemMap" in driver._fn:
        return
    u64, size_t = ctypes.c_uint64, ctypes.c_size_t
    driver._bind("cuMemGetAllocationGranularity", ctypes.POINTER(size_t), ctypes.POINTER(_CUmemAllocationProp),
                 ctypes.c_int)
    driver._bind("cuMemImportFromShareableHandle", ctypes.POINTER(u64), ctypes.c_void_p, ctypes.c_int)
    driver._bind("cuMemAddressReserve", ctypes.POINTER(u64), size_t, size_t, u64, ctypes.c_ulonglong)
    driver._bind("cuMemSetAccess", u64, size_t, ctypes.POINTER(_CUmemAccessDesc), size_t)
    driver._bind("cuMemUnmap", u64, size_t)
    driver._bind("cuMemAddressFree", u64, size_t)
    driver._bind("cuMemRelease", u64)
    driver._bind("cuMemMap", u64, size_t, size_t, u64, ctypes.c_ulonglong)


class VmmRegion(DriverIpcRegion):
    """A cuda-vmm-fd handle mapped read-only in the primary context of
    ordinal device_index from descriptor fd (which stays the caller's: the
    mapping does not need it). ``pointer`` is the mapping's base; tensors are
    DeviceArrays (or torch views, see TorchDriverIpcRegion) at their offsets.
    Unmapped, and the context released, by close() or garbage collection."""

    def __init__(self, index: int, handle: HandleSpec, device_index: int, driver: CudaDriver, fd: int):
        bind_vmm(driver)
        self._mapped = 0
        self._retain(index, handle, device_index, driver)
        self._in_context("cuda-vmm-fd", "map", lambda: self._map(fd))
        self.address = self.pointer

    def _map(self, fd: int) -> None:
        drv, dev = self._driver, self._dev.value
        prop = _CUmemAllocationProp(type=CU_MEM_ALLOCATION_TYPE_PINNED,
                                    requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                    location=_CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, dev))
        gran = ctypes.c_size_t()
        drv.call("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(prop),
                 CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        if gran.value == 0:
            raise WcacheError("cuMemGetAllocationGranularity returned 0")
        size = -(-self.size // gran.value) * gran.value
        h = ctypes.c_uint64()
        drv.call("cuMemImportFromShareableHandle", ctypes.byref(h), ctypes.c_void_p(fd),
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        va = ctypes.c_uint64()
        try:
            drv.call("cuMemAddressReserve", ctypes.byref(va), size, 0, 0, 0)
            try:
                drv.call("cuMemMap", va.value, size, 0, h.value, 0)
                try:
                    access = _CUmemAccessDesc(_CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, dev),
                                              CU_MEM_ACCESS_FLAGS_PROT_READ)
                    drv.call("cuMemSetAccess", va.value, size, ctypes.byref(access), 1)
                except WcacheError:
                    drv.call("cuMemUnmap", va.value, size)
                    raise
            except WcacheError:
                drv.call("cuMemAddressFree", va.value, size)
                raise
        finally:
            drv.call("cuMemRelease", h.value)  # the mapping holds the memory
        self.pointer, self._mapped = va.value, size

    def close(self) -> None:
        """Unmap the memory and free its address range. Every DeviceArray of
        it becomes invalid."""
        if self.pointer:
            ptr, size, self.pointer = self.pointer, self._mapped, 0
            with self._current():
                self._driver.call("cuMemUnmap", ptr, size)
                self._driver.call("cuMemAddressFree", ptr, size)
        self._release_ctx()
