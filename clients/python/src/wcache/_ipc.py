"""cuda-ipc / hip-ipc handles: open a daemon's device allocation in this process.

A cuda-ipc Handle's data is the raw 64-byte ``cudaIpcMemHandle_t`` of an
allocation base (hip-ipc: ``hipIpcMemHandle_t``); tensors are byte offsets into
it. Each handle is opened once per Attachment (opening costs about a
millisecond and much more for large allocations, so attach cost must not grow
with the tensor count), and every tensor is a view into it.

Two ways to open:

* With PyTorch: ``torch.UntypedStorage._new_shared_cuda`` (the private entry
  point torch.multiprocessing uses), which accepts a raw 64-byte handle and
  caches the open per handle in PyTorch's caching allocator. Works with CUDA
  and ROCm builds (hipified). Tensors are ``set_`` onto that storage. The
  storage's deleter tries to decrement a torch IPC refcount file; wcache passes
  a name that does not exist, and torch ignores the failure by design.
  ``torch.cuda.init()`` runs first: since torch 2.5 ``_new_shared_cuda``
  dereferences per-device state that only CUDA lazy initialisation fills, so
  a process that touched no CUDA tensor yet would crash there.
* With PyTorch under ``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``, where
  ``_new_shared_cuda`` refuses (the async allocator has no IPC cache): the
  handle is opened through the driver with ctypes (below) in the primary
  context PyTorch uses, and wrapped zero-copy as a torch uint8 tensor through
  ``__cuda_array_interface__``; the tensors are views of it. The torch storage
  holds the opened mapping, which is closed when the last tensor is gone.
* Without PyTorch (CUDA only): the driver API through ctypes on
  ``libcuda.so.1`` (cuIpcOpenMemHandle_v2 with lazy peer access in the GPU's
  primary context). Tensors come back as DeviceArray views — a pointer, a byte
  count and ``__cuda_array_interface__`` for cupy, numba and friends.

Lifetime: the memory stays valid while the daemon's lease is held. Drop every
tensor before releasing the lease; after release the daemon may free it.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING, Optional

from . import dtypes
from .dtypes import contiguous_strides
from ._errors import ProtocolError, WcacheError
from ._manifest import HandleSpec, TensorSpec

if TYPE_CHECKING:
    from ._hip import HipRuntime

# A torch IPC refcount shm name that does not exist: the storage deleter's
# best-effort decrement then fails quietly instead of touching a real file.
_NO_REFCOUNT = ("/wcache-no-refcount-" + os.urandom(8).hex()).encode()


def view_in_storage(torch, storage, spec: TensorSpec):
    """A tensor over bytes [spec.offset, spec.offset+spec.length) of an UntypedStorage.

    The dtype and shape of spec are applied when this torch supports the dtype
    (with a published layout: its strides and storage offset, so that tensors
    of one storage are views of the same memory); otherwise the tensor is the
    raw bytes (1-D uint8). Raises ProtocolError when the offset is not a
    multiple of the element size (the memory cannot be viewed as that dtype in
    place).
    """
    tdtype = dtypes.torch_dtype(spec.dtype, torch)
    if tdtype is None:
        tdtype, shape, strides, extra = torch.uint8, (spec.length,), None, 0
    else:
        shape, strides, extra = spec.shape, spec.strides, spec.storage_offset
    elsize = torch.empty((), dtype=tdtype).element_size()
    if spec.offset % elsize:
        raise ProtocolError(f"tensor {spec.name!r}: offset {spec.offset} is not a multiple of the "
                            f"{elsize}-byte element size of {spec.dtype}")
    t = torch.empty((0,), dtype=tdtype, device=storage.device)
    return t.set_(storage, spec.offset // elsize + extra, shape,
                  strides if strides is not None else contiguous_strides(shape))


def torch_uses_cuda_malloc_async(torch) -> bool:
    """Whether this PyTorch allocates with cudaMallocAsync (then it cannot open IPC handles)."""
    backend = getattr(torch.cuda, "get_allocator_backend", None)
    if backend is not None:
        try:
            return backend() == "cudaMallocAsync"
        except RuntimeError:
            pass
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return any(part.strip().replace(" ", "") == "backend:cudaMallocAsync" for part in conf.split(","))


class TorchIpcRegion:
    """An IPC handle opened through PyTorch: ``storage`` spans the whole allocation."""

    def __init__(self, index: int, handle: HandleSpec, device_index: int, torch):
        self.index = index
        self.size = handle.size
        self.device_index = device_index
        # torch >= 2.5: _new_shared_cuda needs the lazily initialised per-device state.
        torch.cuda.init()
        try:
            self.storage = torch.UntypedStorage._new_shared_cuda(
                device_index, handle.data, handle.size, 0, _NO_REFCOUNT, 0, bytes(64), False)
        except RuntimeError as exc:
            raise WcacheError(f"handle {index} ({handle.kind}): open IPC handle on cuda:{device_index}: {exc}") from exc
        self.address = self.storage.data_ptr()

    def tensor(self, torch, spec: TensorSpec):
        return view_in_storage(torch, self.storage, spec)


class _RegionBytes:
    """The whole of a DriverIpcRegion as one ``__cuda_array_interface__`` byte
    array; the tensor torch builds from it holds this object, and so the mapping."""

    def __init__(self, region: "DriverIpcRegion"):
        self.region = region
        self.__cuda_array_interface__ = {"shape": (region.size,), "typestr": "|u1",
                                         "data": (region.pointer, False), "strides": None, "version": 3}


class TorchDriverIpcRegion:
    """An IPC handle opened through the driver (ctypes) and wrapped zero-copy as
    torch memory: for engines whose PyTorch uses cudaMallocAsync.

    ``storage`` is the torch UntypedStorage over the mapping; it keeps the
    DriverIpcRegion (and so the mapping) alive until the last tensor is gone.
    """

    def __init__(self, index: int, handle: HandleSpec, device_index: int, torch, driver, region_type=None):
        self.index = index
        self.size = handle.size
        self.device_index = device_index
        torch.cuda.init()  # the primary context the driver path opens in is torch's
        self._driver = driver
        # region_type: DriverIpcRegion (cuda-ipc, CudaDriver) or HipIpcRegion (hip-ipc, wcache._hip.HipRuntime).
        region = (region_type or DriverIpcRegion)(index, handle, device_index, driver)
        with torch.cuda.device(device_index):
            whole = torch.as_tensor(_RegionBytes(region), device=f"cuda:{device_index}")
        if whole.data_ptr() != region.pointer:
            raise WcacheError(f"handle {index} ({handle.kind}): torch copied the mapping instead of wrapping it")
        self.storage = whole.untyped_storage()
        self.address = region.pointer

    def tensor(self, torch, spec: TensorSpec):
        return view_in_storage(torch, self.storage, spec)


class DeviceArray:
    """A tensor in device memory, without PyTorch: a pointer and a byte count.

    ``dtype`` and ``shape`` are the manifest's (safetensors dtype string).
    ``__cuda_array_interface__`` (version 3) describes it to cupy, numba and
    others when numpy knows the dtype, and as raw bytes otherwise. It keeps the
    opened handle alive.
    """

    def __init__(self, region: "DriverIpcRegion", spec: TensorSpec):
        self._region = region
        self.name = spec.name
        self.dtype = spec.dtype
        self.shape = spec.shape
        self.nbytes = spec.length
        self.pointer = region.pointer + spec.offset
        self.device_index = region.device_index

    @property
    def __cuda_array_interface__(self):
        try:
            import numpy  # noqa: PLC0415
            np_dtype = dtypes.numpy_dtype(self.dtype, numpy)
        except ImportError:
            np_dtype = None
        if np_dtype is None:
            typestr, shape = "|u1", (self.nbytes,)
        else:
            typestr, shape = np_dtype.str, self.shape
        return {"shape": tuple(shape), "typestr": typestr, "data": (self.pointer, False),
                "strides": None, "version": 3}

    def __repr__(self) -> str:
        return (f"DeviceArray(name={self.name!r}, dtype={self.dtype}, shape={list(self.shape)}, "
                f"pointer={self.pointer:#x}, nbytes={self.nbytes}, device={self.device_index})")


class _CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class _CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1

# CUresults after which the process's CUDA context is unusable (cuda.h).
STICKY_CURESULTS = {214: "CUDA_ERROR_ECC_UNCORRECTABLE", 220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
                    700: "CUDA_ERROR_ILLEGAL_ADDRESS", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
                    714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
                    716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
                    718: "CUDA_ERROR_INVALID_PC", 719: "CUDA_ERROR_LAUNCH_FAILED", 999: "CUDA_ERROR_UNKNOWN"}


class CudaDriver:
    """The few CUDA driver entry points the torch-less path needs, via ctypes.

    library is the file to dlopen (default "libcuda.so.1"). Every failing call
    raises WcacheError naming the function and the CUresult.
    """

    def __init__(self, library: str = "libcuda.so.1"):
        try:
            self._lib = ctypes.CDLL(library)
        except OSError as exc:
            raise WcacheError(f"cuda-ipc handles without PyTorch need the CUDA driver: {exc}") from exc
        self._fn = {}
        self._bind("cuInit", ctypes.c_uint)
        self._bind("cuDeviceGetCount", ctypes.POINTER(ctypes.c_int))
        self._bind("cuDeviceGet", ctypes.POINTER(ctypes.c_int), ctypes.c_int)
        self._bind(("cuDeviceGetUuid_v2", "cuDeviceGetUuid"), ctypes.POINTER(_CUuuid), ctypes.c_int)
        self._bind("cuDevicePrimaryCtxRetain", ctypes.POINTER(ctypes.c_void_p), ctypes.c_int)
        self._bind(("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"), ctypes.c_int)
        self._bind(("cuCtxPushCurrent_v2", "cuCtxPushCurrent"), ctypes.c_void_p)
        self._bind(("cuCtxPopCurrent_v2", "cuCtxPopCurrent"), ctypes.POINTER(ctypes.c_void_p))
        self._bind(("cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"),
                   ctypes.POINTER(ctypes.c_uint64), _CUipcMemHandle, ctypes.c_uint)
        self._bind("cuIpcCloseMemHandle", ctypes.c_uint64)
        self.call("cuInit", 0)

    def _bind(self, names, *argtypes) -> None:
        names = (names,) if isinstance(names, str) else names
        for name in names:
            fn = getattr(self._lib, name, None)
            if fn is not None:
                fn.argtypes = list(argtypes)
                fn.restype = ctypes.c_int
                self._fn[names[0]] = (name, fn)
                return
        raise WcacheError(f"CUDA driver lacks {' and '.join(names)}")

    def call(self, name: str, *args) -> None:
        symbol, fn = self._fn[name]
        rc = fn(*args)
        if rc in STICKY_CURESULTS:
            raise WcacheError(f"{symbol} failed with CUresult {rc} ({STICKY_CURESULTS[rc]}): a sticky error, "
                              "CUDA is unusable in this process until it exits")
        if rc != 0:
            raise WcacheError(f"{symbol} failed with CUresult {rc}")

    def device_uuid_hex(self, ordinal: int) -> str:
        """8-4-4-4-12 hex of the UUID of the device this process sees as ordinal."""
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        u = _CUuuid()
        self.call("cuDeviceGetUuid_v2", ctypes.byref(u), dev.value)
        h = bytes(u.bytes).hex()
        return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    def ordinal_for_uuid(self, uuid: str) -> int:
        """Ordinal of the device whose canonical UUID (GPU-/MIG- + hex) is uuid."""
        body = uuid.split("-", 1)[1] if uuid.startswith(("GPU-", "MIG-")) else uuid
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        seen = []
        for i in range(n.value):
            h = self.device_uuid_hex(i)
            if h == body.lower():
                return i
            seen.append(h)
        raise WcacheError(f"this process does not see GPU {uuid} (it sees: {', '.join(seen) or 'none'})")


class DeviceRegion:
    """What every handle opened without PyTorch has: its index, size,
    device and driver, ``pointer`` (the mapping's base, 0 once closed) and
    ``address``; DeviceArrays of its tensors; close() on garbage collection.
    Subclasses open the handle and define close()."""

    def __init__(self, index: int, handle: HandleSpec, device_index: int, driver):
        self.index = index
        self.size = handle.size
        self.device_index = device_index
        self._driver = driver
        self.pointer = 0
        self.address = 0

    def close(self) -> None:
        raise NotImplementedError

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def tensor(self, spec: TensorSpec) -> DeviceArray:
        return DeviceArray(self, spec)


class DriverIpcRegion(DeviceRegion):
    """A cuda-ipc handle opened with the driver API in the primary context of
    ordinal device_index; closed (and the context released) when garbage-collected."""

    def __init__(self, index: int, handle: HandleSpec, device_index: int, driver: CudaDriver):
        self._retain(index, handle, device_index, driver)
        raw = _CUipcMemHandle.from_buffer_copy(handle.data)
        ptr = ctypes.c_uint64()
        self._in_context("cuda-ipc", "open", lambda: driver.call(
            "cuIpcOpenMemHandle_v2", ctypes.byref(ptr), raw, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        self.pointer = ptr.value
        self.address = ptr.value

    def _retain(self, index: int, handle: HandleSpec, device_index: int, driver: CudaDriver) -> None:
        """Set the region's fields and retain the primary context of
        device_index (released by close())."""
        DeviceRegion.__init__(self, index, handle, device_index, driver)
        self._ctx = ctypes.c_void_p()
        self._dev = ctypes.c_int()
        self._retained = False
        driver.call("cuDeviceGet", ctypes.byref(self._dev), device_index)
        driver.call("cuDevicePrimaryCtxRetain", ctypes.byref(self._ctx), self._dev.value)
        self._retained = True

    def _in_context(self, kind: str, verb: str, fn) -> None:
        """Run fn with the retained context current; a WcacheError releases
        the context and is raised again as "handle N (kind): verb on device
        D: ..."."""
        try:
            with self._current():
                fn()
        except WcacheError as exc:
            self._release_ctx()
            raise WcacheError(f"handle {self.index} ({kind}): {verb} on device {self.device_index}: {exc}") from exc

    def _current(self):
        driver, ctx = self._driver, self._ctx

        class _Scope:
            def __enter__(self_inner):
                driver.call("cuCtxPushCurrent_v2", ctx)

            def __exit__(self_inner, *exc):
                old = ctypes.c_void_p()
                driver.call("cuCtxPopCurrent_v2", ctypes.byref(old))
                return False

        return _Scope()

    def _release_ctx(self) -> None:
        if self._retained:
            self._retained = False
            self._driver.call("cuDevicePrimaryCtxRelease_v2", self._dev.value)

    def close(self) -> None:
        """Close the IPC mapping. Every DeviceArray of it becomes invalid."""
        if self.pointer:
            ptr, self.pointer = self.pointer, 0
            with self._current():
                self._driver.call("cuIpcCloseMemHandle", ptr)
        self._release_ctx()


class HipIpcRegion(DeviceRegion):
    """A hip-ipc handle opened with hipIpcOpenMemHandle on ordinal
    device_index; closed when garbage-collected (or by close())."""

    def __init__(self, index: int, handle: HandleSpec, device_index: int, driver: HipRuntime):
        if len(handle.data) != 64:
            raise WcacheError(f"handle {index} (hip-ipc): {len(handle.data)} bytes, want 64")
        super().__init__(index, handle, device_index, driver)
        try:
            self.pointer = driver.ipc_open(handle.data, device_index)
        except WcacheError as exc:
            raise WcacheError(f"handle {index} (hip-ipc): open on device {device_index}: {exc}") from exc
        self.address = self.pointer

    def close(self) -> None:
        """Close the mapping. Every DeviceArray of it becomes invalid."""
        if self.pointer:
            ptr, self.pointer = self.pointer, 0
            self._driver.ipc_close(ptr, self.device_index)


def torch_device_index(torch, uuid: str, device_index: Optional[int]) -> int:
    """The torch ordinal to open a handle of device uuid on: device_index when
    given, else the visible GPU whose canonical UUID is uuid."""
    if device_index is not None:
        return device_index
    from ._device import device_index_for_uuid  # noqa: PLC0415

    return device_index_for_uuid(uuid)
