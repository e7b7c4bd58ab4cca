"""Turn an Attach manifest into tensors that alias the daemon's memory.

``materialize`` opens every handle once and returns a view per tensor:

================  ===========================  ==================================
handle kind       with PyTorch                 without PyTorch
================  ===========================  ==================================
posix-shm         CPU torch.Tensor (copy-on-  numpy.ndarray (copy-on-write)
                  write mapping: wcache._shm)
memfd             as posix-shm, mapped from    as posix-shm
                  its descriptor
cuda-ipc          CUDA torch.Tensor            wcache._ipc.DeviceArray (ctypes on
                                               libcuda.so.1)
hip-ipc           ROCm torch.Tensor            wcache._ipc.DeviceArray (ctypes on
                                               libamdhip64, wcache._hip)
cuda-vmm-fd       CUDA torch.Tensor (mapped    wcache._ipc.DeviceArray (mapped
                  by wcache._vmm, wrapped via   read-only by wcache._vmm from its
                  __cuda_array_interface__)    descriptor, ctypes on libcuda.so.1)
x-VENDOR-NAME     whatever the vendor's mapper returns (wcache._mappers: register it in a
                  HandleMappers and pass that to materialize / attach)
================  ===========================  ==================================

Nothing is copied (unless ``copy=True``: ``private_copy``). Writes to
host-memory tensors stay this process's (copy-on-write); writes to device
tensors (cuda-ipc, hip-ipc) reach the daemon's memory and every other client,
and cuda-vmm-fd is mapped read-only on the device. dtype and shape come from the manifest (and, for a
published tensor, its strides and storage offset: tensors published as views
of one storage come back as views of one storage); a dtype the
library cannot represent (e.g. F4, or BF16 in numpy) is returned as its raw
bytes, a 1-D uint8 tensor or array of ``length`` bytes. Empty tensors have no
backing bytes and are fresh empty tensors.
"""

from __future__ import annotations

import contextlib
import gc
import operator
import warnings
from collections import deque
from itertools import compress, repeat
from typing import Callable, Dict, List, Optional, Union

from . import _hostviews as hostviews, dtypes
from ._errors import ProtocolError, WcacheError
from ._ipc import (CudaDriver, DriverIpcRegion, HipIpcRegion, TorchDriverIpcRegion, TorchIpcRegion, torch_device_index,
                  torch_uses_cuda_malloc_async, view_in_storage)
from ._hip import HipRuntime
from ._manifest import (HANDLE_CUDA_IPC, HANDLE_CUDA_VMM_FD, HANDLE_HIP_IPC, HANDLE_MEMFD, HANDLE_POSIX_SHM,
                       HandleSpec, TensorSpec, parse_columns)
from ._mappers import HandleMappers, MapContext, UnknownHandleKindError
from ._populate import Populator, mode_from_env
from ._shm import ShmRegion, map_memfd, map_shm

LIBRARY_AUTO = "auto"
LIBRARY_TORCH = "torch"
LIBRARY_NUMPY = "numpy"


class Materialized:
    """The tensors of one manifest and the regions (opened handles) they alias.

    ``tensors`` maps name → tensor in manifest order; ``specs`` maps name →
    TensorSpec; ``regions[i]`` is the opened handle i (ShmRegion,
    TorchIpcRegion or DriverIpcRegion); ``populator`` populates the host
    regions' pages (wcache._populate: $WCACHE_POPULATE, off by default).
    """

    def __init__(self, tensors: Dict[str, object], specs: Union[Dict[str, TensorSpec], Callable[[], Dict]],
                 regions: List[object], populator: Optional[Populator] = None):
        self.tensors = tensors
        self._specs = specs
        self.regions = regions
        self.populator = populator

    @property
    def specs(self) -> Dict[str, TensorSpec]:
        """name → TensorSpec, built on first use (materialize passes a
        function: a 100k-tensor manifest's specs cost tens of ms that the
        tensors do not need)."""
        if callable(self._specs):
            self._specs = self._specs()
        return self._specs


def _import_torch():
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None
    return torch


def _torch_shm_storage(torch, region: ShmRegion):
    """An UntypedStorage over a whole mapping (torch warns when it is not writable: a read-only fallback)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        base = torch.frombuffer(region.buffer, dtype=torch.uint8)
    if hasattr(base, "untyped_storage"):
        return base.untyped_storage()
    return base.storage().untyped()  # torch < 2.0


def _torch_shm_range(torch, region: ShmRegion, offset: int, length: int):
    """An UntypedStorage over bytes [offset, offset+length) of a
    mapping: a published storage, so that its views keep their storage offsets."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        part = torch.frombuffer(region.buffer, dtype=torch.uint8, count=length, offset=offset)
    if hasattr(part, "untyped_storage"):
        return part.untyped_storage()
    return part.storage().untyped()  # torch < 2.0


def _torch_shm_tensor(torch, region: ShmRegion, storage, spec: TensorSpec):
    tdtype = dtypes.torch_dtype(spec.dtype, torch)
    elsize = torch.empty((), dtype=tdtype).element_size() if tdtype is not None else 1
    if spec.offset % elsize == 0 or spec.has_layout:
        return view_in_storage(torch, storage, spec)
    # Misaligned for its dtype: a storage of its own, still over the same mapping.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        t = torch.frombuffer(region.buffer, dtype=tdtype, count=spec.length // elsize, offset=spec.offset)
    return t.view(spec.shape)


def _numpy_shm_array(numpy, region: ShmRegion, spec: TensorSpec):
    np_dtype = dtypes.numpy_dtype(spec.dtype, numpy)
    if np_dtype is None:
        return numpy.frombuffer(region.buffer, dtype=numpy.uint8, count=spec.length, offset=spec.offset)
    count = spec.length // np_dtype.itemsize
    flat = numpy.frombuffer(region.buffer, dtype=np_dtype, count=count, offset=spec.offset)
    if not spec.has_layout:
        return flat.reshape(spec.shape)
    strides = spec.strides if spec.strides is not None else dtypes.contiguous_strides(spec.shape)
    view = numpy.lib.stride_tricks.as_strided(flat[spec.storage_offset:], shape=spec.shape,
                                              strides=[s * np_dtype.itemsize for s in strides],
                                              writeable=flat.flags.writeable)
    return view


def _empty(torch, numpy, spec: TensorSpec, device):
    if torch is not None:
        tdtype = dtypes.torch_dtype(spec.dtype, torch)
        if tdtype is None:
            return torch.empty((0,), dtype=torch.uint8, device=device)
        return torch.empty(spec.shape, dtype=tdtype, device=device)
    np_dtype = dtypes.numpy_dtype(spec.dtype, numpy)
    arr = numpy.empty((0,) if np_dtype is None else spec.shape, dtype=numpy.uint8 if np_dtype is None else np_dtype)
    arr.flags.writeable = False
    return arr


class _HostViews(dict):
    """(handle index, dtype) → (base tensor, element size):
    the base is the whole storage of a handle torch holds — host memory
    (ShmRegion) or device memory opened through torch (TorchIpcRegion,
    TorchDriverIpcRegion: cuda-ipc, hip-ipc, cuda-vmm-fd) — viewed as
    dtype, on the storage's device, so that a tensor at byte offset o is
    base.as_strided(shape, strides, o // element size) — the same storage,
    data pointer and storage offset as empty().set_(storage, …), built by
    one call. () when the handle has no torch storage or torch has no such
    dtype (the caller takes the general path)."""

    def __init__(self, torch, storages: List[object], regions: List[object]):
        super().__init__()
        self._torch = torch
        kinds = (ShmRegion, TorchIpcRegion, TorchDriverIpcRegion)
        self._storages = [s if isinstance(r, kinds) else None for s, r in zip(storages, regions)]

    def base(self, handle_index: int, dtype: str) -> tuple:
        torch = self._torch
        storage = self._storages[handle_index]
        tdtype = dtypes.torch_dtype(dtype, torch) if storage is not None else None
        if tdtype is None:
            self[(handle_index, dtype)] = ()
            return ()
        elsize = torch.empty((), dtype=tdtype).element_size()
        nbytes = storage.nbytes() if callable(getattr(storage, "nbytes", None)) else storage.size()
        flat = torch.empty((0,), dtype=torch.uint8, device=getattr(storage, "device", "cpu")).set_(
            storage, 0, (nbytes - nbytes % elsize,), (1,))
        try:
            base = flat.view(tdtype) if tdtype != torch.uint8 else flat
        except (RuntimeError, TypeError):  # a dtype this torch cannot view bytes as: the general path
            self[(handle_index, dtype)] = ()
            return ()
        found = self[(handle_index, dtype)] = (base, elsize)
        return found


def materialize(manifest, library: str = LIBRARY_AUTO, device_index: Optional[int] = None,
                cuda_library: str = "libcuda.so.1", hip_library: Optional[str] = None,
                mappers: Optional[HandleMappers] = None,
                descriptors: Optional[Dict[int, int]] = None) -> Materialized:
    """Open every handle of manifest once and build a zero-copy view per tensor.

    library: "torch", "numpy" (posix-shm only; cuda-ipc gives DeviceArray) or
    "auto" (torch when importable, else numpy). device_index: the ordinal,
    as this process sees it, of the manifest's GPU for IPC handles; None
    looks it up by UUID. cuda_library: the driver dlopened for cuda-ipc
    without torch; hip_library: the HIP runtime for hip-ipc without torch
    (None: the ROCm sonames, then /opt/rocm/lib). mappers: the mappers of
    vendor handle kinds (wcache._mappers.HandleMappers); None: none.
    descriptors: handle index → descriptor of the descriptor handles (memfd,
    cuda-vmm-fd; received by attach on the descriptor channel). cuda-vmm-fd
    is mapped through the driver (cuda_library) by wcache._vmm.

    Raises ProtocolError for a malformed manifest, UnknownHandleKindError (a
    ProtocolError naming the kind and how to register a mapper) for a kind
    that is neither built in nor registered, WcacheError when a handle
    cannot be opened.
    """
    with _no_gc():
        return _materialize(manifest, library, device_index, cuda_library, hip_library, mappers, descriptors)


@contextlib.contextmanager
def _no_gc():
    """The cyclic garbage collector paused (restored after): a 100k-tensor
    manifest allocates some 400k tracked objects (specs, shapes, tensors),
    none of them cyclic, and the collections they trigger cost about a third
    of materialize's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            _promote_untraversed()
            gc.enable()


def _promote_untraversed() -> None:
    """Move every object the collector tracks into its oldest generation
    without traversing them (gc.freeze then gc.unfreeze: two list splices).
    Left in the youngest, the manifest's 100k tensors and shapes would be
    traversed by the first collection after materialize (~0.1 s at 100k
    tensors) and again on their way to the oldest; there they wait for the
    next full collection, as any long-lived object does. Not done when the
    program froze objects itself (gc.get_freeze_count()): unfreezing would
    hand them back to the collector."""
    if not hasattr(gc, "freeze") or gc.get_freeze_count():
        return
    gc.freeze()
    gc.unfreeze()


def _materialize(manifest, library: str, device_index: Optional[int], cuda_library: str,
                 hip_library: Optional[str], mappers: Optional[HandleMappers],
                 descriptors: Optional[Dict[int, int]]) -> Materialized:
    handles, columns = parse_columns(manifest)
    torch = numpy = None
    if library in (LIBRARY_AUTO, LIBRARY_TORCH):
        torch = _import_torch()
        if torch is None and library == LIBRARY_TORCH:
            raise WcacheError("library='torch' but PyTorch is not installed")
    elif library != LIBRARY_NUMPY:
        raise ValueError(f"library must be 'auto', 'torch' or 'numpy', not {library!r}")
    if torch is None:
        try:
            import numpy  # noqa: PLC0415
        except ImportError as exc:
            raise WcacheError("wcache tensors need PyTorch or numpy") from exc

    regions: List[object] = []
    storages: List[object] = []
    driver = None
    for i, h in enumerate(handles):
        region, storage = None, None
        if h.kind in (HANDLE_POSIX_SHM, HANDLE_MEMFD):
            if h.kind == HANDLE_MEMFD:
                if descriptors is None or i not in descriptors:
                    raise ProtocolError(f"handle {i} (memfd): no descriptor (attach receives it on the daemon's "
                                        "descriptor channel)")
                region = map_memfd(i, h, descriptors[i])
            else:
                region = map_shm(i, h)
            if torch is not None and region.buffer is not None:
                storage = _torch_shm_storage(torch, region)
        elif h.kind == HANDLE_CUDA_VMM_FD:
            if descriptors is None or i not in descriptors:
                raise ProtocolError(f"handle {i} (cuda-vmm-fd): no descriptor (attach receives it on the daemon's "
                                    "descriptor channel)")
            region = _open_vmm(i, h, descriptors[i], manifest.device_uuid, torch, device_index, cuda_library,
                               driver if isinstance(driver, CudaDriver) else None)
            driver = region._driver
        elif h.kind in (HANDLE_CUDA_IPC, HANDLE_HIP_IPC):
            if h.kind == HANDLE_HIP_IPC:
                region = _open_hip(i, h, manifest.device_uuid, torch, device_index, hip_library, driver)
            else:
                region = _open_ipc(i, h, manifest.device_uuid, torch, device_index, cuda_library,
                                   driver if isinstance(driver, CudaDriver) else None)
            if isinstance(region, (DriverIpcRegion, TorchDriverIpcRegion, HipIpcRegion)):
                driver = region._driver
        else:
            mapper = mappers.lookup(h.kind) if mappers is not None else None
            if mapper is None:
                raise UnknownHandleKindError(i, h.kind, mappers.kinds() if mappers is not None else [])
            region = mapper(i, h, MapContext(manifest.device_uuid, device_index, torch, numpy))
            if not callable(getattr(region, "tensor", None)):
                raise WcacheError(f"handle {i} ({h.kind}): the mapper returned {type(region).__name__}, "
                                  "which has no tensor(spec) method")
        if isinstance(region, (TorchIpcRegion, TorchDriverIpcRegion)):
            storage = region.storage  # device memory under torch: the same bulk views as host memory
        regions.append(region)
        storages.append(storage)
    # Map the host regions' pages ahead of the reader (wcache._populate:
    # $WCACHE_POPULATE, default off).
    populator = Populator([r for r in regions if isinstance(r, ShmRegion)], mode_from_env()).start()

    # Published storages: one torch storage per byte range, shared by its views.
    ranges: Dict[tuple, object] = {}
    # Host tensors under torch (no layout, a dtype torch has, an offset
    # aligned for it) are views of a base tensor per handle and dtype: the
    # handle's storage viewed as that dtype, built on first use, one
    # as_strided call each, made from C over the columns
    # (wcache._hostviews); one(spec) builds any other tensor.
    views = _HostViews(torch, storages, regions)
    strides_of: Dict[tuple, tuple] = {}

    def one(spec: TensorSpec):
        name, dtype, shape, handle_index, offset, length, storage, strides, storage_offset = spec
        if length and not storage and strides is None and not storage_offset:
            base = views.get((handle_index, dtype))
            if base is None:
                base = views.base(handle_index, dtype)
            if base and not offset % base[1]:
                contiguous = strides_of.get(shape)
                if contiguous is None:
                    contiguous = strides_of[shape] = dtypes.contiguous_strides(shape)
                return base[0].as_strided(shape, contiguous, offset // base[1])
        region = regions[handle_index]
        if isinstance(region, ShmRegion):
            if spec.length == 0:
                return _empty(torch, numpy, spec, "cpu")
            if torch is not None and spec.storage:
                key = (spec.handle_index, spec.offset, spec.length)
                if key not in ranges:
                    ranges[key] = _torch_shm_range(torch, region, spec.offset, spec.length)
                return view_in_storage(torch, ranges[key], spec._replace(offset=0))
            if torch is not None:
                return _torch_shm_tensor(torch, region, storages[spec.handle_index], spec)
            return _numpy_shm_array(numpy, region, spec)
        if isinstance(region, (TorchIpcRegion, TorchDriverIpcRegion)):
            return region.tensor(torch, spec)
        return region.tensor(spec)

    names = columns.names
    if torch is not None and any(st is not None for st in storages):
        kinds = columns.dtypes
        built = hostviews.as_strided_views(
            columns.shapes, columns.dtype_index, columns.handle_index, columns.offsets, columns.lengths,
            columns.plain, lambda h, d: views.get((h, kinds[d])) or views.base(h, kinds[d]))
        rest = list(compress(range(len(built)), map(operator.is_, built, repeat(None))))
        if rest:  # tensors the bulk path leaves: one by one
            deque(map(built.__setitem__, rest, map(one, map(columns.spec, rest))), maxlen=0)
    else:
        built = list(map(one, columns.specs()))
    out = dict(zip(names, built))
    return Materialized(out, lambda: dict(zip(names, columns.specs())), regions, populator)


def _open_ipc(index: int, handle: HandleSpec, uuid: str, torch, device_index: Optional[int],
              cuda_library: str, driver: Optional[CudaDriver]):
    if torch is not None:
        want_rocm = handle.kind == HANDLE_HIP_IPC
        is_rocm = bool(getattr(torch.version, "hip", None))
        if want_rocm != is_rocm:
            build = "ROCm" if is_rocm else "CUDA"
            raise WcacheError(f"handle {index} is {handle.kind} but this PyTorch is a {build} build")
        if not torch.cuda.is_available():
            raise WcacheError(f"handle {index} ({handle.kind}): PyTorch sees no GPU")
        ordinal = torch_device_index(torch, uuid, device_index)
        if handle.kind == HANDLE_CUDA_IPC and torch_uses_cuda_malloc_async(torch):
            return TorchDriverIpcRegion(index, handle, ordinal, torch, driver or CudaDriver(cuda_library))
        return TorchIpcRegion(index, handle, ordinal, torch)
    if driver is None:
        driver = CudaDriver(cuda_library)
    ordinal = device_index if device_index is not None else driver.ordinal_for_uuid(uuid)
    return DriverIpcRegion(index, handle, ordinal, driver)


def _open_vmm(index: int, handle: HandleSpec, fd: int, uuid: str, torch, device_index: Optional[int],
              cuda_library: str, driver: Optional[CudaDriver]):
    """A cuda-vmm-fd handle, mapped by the driver through ctypes (wcache._vmm):
    wrapped as torch memory (__cuda_array_interface__, zero-copy) with a CUDA
    PyTorch, DeviceArrays without one."""
    from ._vmm import VmmRegion  # noqa: PLC0415

    if torch is not None:
        if getattr(torch.version, "hip", None):
            raise WcacheError(f"handle {index} is {handle.kind} but this PyTorch is a ROCm build")
        if not torch.cuda.is_available():
            raise WcacheError(f"handle {index} ({handle.kind}): PyTorch sees no GPU")
        ordinal = torch_device_index(torch, uuid, device_index)
        return TorchDriverIpcRegion(index, handle, ordinal, torch, driver or CudaDriver(cuda_library),
                                    lambda i, h, d, drv: VmmRegion(i, h, d, drv, fd))
    if driver is None:
        driver = CudaDriver(cuda_library)
    ordinal = device_index if device_index is not None else driver.ordinal_for_uuid(uuid)
    return VmmRegion(index, handle, ordinal, driver, fd)


def _open_hip(index: int, handle: HandleSpec, uuid: str, torch, device_index: Optional[int],
              hip_library: Optional[str], driver):
    """A hip-ipc handle: through PyTorch (a ROCm build) when given, by HIP
    through ctypes under its async allocator or without PyTorch."""
    if torch is not None:
        if not getattr(torch.version, "hip", None):
            raise WcacheError(f"handle {index} is {handle.kind} but this PyTorch is a CUDA build")
        if not torch.cuda.is_available():
            raise WcacheError(f"handle {index} ({handle.kind}): PyTorch sees no GPU")
        ordinal = torch_device_index(torch, uuid, device_index)
        if torch_uses_cuda_malloc_async(torch):
            hip = driver if isinstance(driver, HipRuntime) else HipRuntime(hip_library)
            return TorchDriverIpcRegion(index, handle, ordinal, torch, hip, HipIpcRegion)
        return TorchIpcRegion(index, handle, ordinal, torch)
    hip = driver if isinstance(driver, HipRuntime) else HipRuntime(hip_library)
    ordinal = device_index if device_index is not None else hip.ordinal_for_uuid(uuid)
    return HipIpcRegion(index, handle, ordinal, hip)


def _untyped(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage().untyped()  # torch < 2.0


def private_copy(tensors: Dict[str, object]) -> Dict[str, object]:
    """A copy of tensors in this process's own memory, views kept.

    Every distinct storage is copied once (on its device: host memory stays
    on the host, device memory on the device), and each tensor becomes the
    same view (dtype, shape, strides, storage offset) of the copy, so that
    tensors that shared a storage share the copy. numpy arrays are copied.
    What attach(..., copy=True) returns: the engine may write to these
    tensors freely, device tensors included, and release the lease. Raises
    WcacheError for a tensor it cannot copy (a DeviceArray without torch, a
    vendor mapper's object).
    """
    torch = _import_torch()
    out: Dict[str, object] = {}
    copies: Dict[tuple, object] = {}
    for name, t in tensors.items():
        if torch is not None and isinstance(t, torch.Tensor):
            st = _untyped(t)
            key = (str(st.device), st.data_ptr(), st.nbytes())
            new = copies.get(key)
            if new is None:
                src = torch.empty((0,), dtype=torch.uint8, device=st.device).set_(st, 0, (st.nbytes(),), (1,))
                new = copies[key] = _untyped(src.clone())
            out[name] = torch.empty((0,), dtype=t.dtype, device=t.device).set_(
                new, t.storage_offset(), tuple(t.shape), tuple(t.stride()))
        elif type(t).__module__ == "numpy" and hasattr(t, "copy"):
            out[name] = t.copy()
        else:
            raise WcacheError(f"copy=True: tensor {name!r} is a {type(t).__name__}, which cannot be copied here "
                              "(attach with PyTorch, or copy it yourself)")
    return out
