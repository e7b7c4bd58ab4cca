"""cuda-ipc handles without PyTorch: the ctypes binding of libcuda, against a fake
driver built here with gcc (the same approach as the Go CUDA backend's CI)."""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import os
import signal
import subprocess

import numpy as np
import pytest

import st_writer
from wcache import ProtocolError, WcacheError, pb
from wcache._ipc import CudaDriver, DeviceArray, view_in_storage
from wcache._manifest import TensorSpec
from wcache._tensors import materialize

HERE = os.path.dirname(os.path.abspath(__file__))
UUID1 = "GPU-11111111-1111-1111-1111-111111111111"


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fakecuda") / "libcuda.so.1")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", out, os.path.join(HERE, "fakecuda", "fake_libcuda.c")],
                   check=True)
    return out


def ipc_manifest(directory, tensors, device_uuid=UUID1):
    """Two 'allocations' (files) whose 64-byte handles carry their paths."""
    handles, entries = [], []
    for h in range(2):
        path = os.path.join(directory, f"alloc{h}")
        blob = bytearray()
        for i, (name, dtype, shape, data) in enumerate(tensors):
            if i % 2 != h:
                continue
            blob.extend(bytes(-len(blob) % 256))
            entries.append(pb.Tensor(name=name, dtype=dtype, shape=list(shape), handle_index=h,
                                     offset=len(blob), length=len(data)))
            blob.extend(data)
        with open(path, "wb") as f:
            f.write(bytes(blob))
        raw = path.encode().ljust(64, b"\0")
        assert len(raw) == 64
        handles.append(pb.Handle(kind="cuda-ipc", data=raw, size=len(blob)))
    return pb.Manifest(device_uuid=device_uuid, handles=handles, tensors=entries)


def test_device_arrays_point_at_the_opened_allocation(short_tmp, fake_libcuda):
    rng = np.random.default_rng(3)
    tensors = [st_writer.random_tensor(rng, f"t{i}", ("F32", "BF16", "I64")[i % 3], (4, 3)) for i in range(12)]
    manifest = ipc_manifest(short_tmp, tensors)
    lib = ctypes.CDLL(fake_libcuda)
    opens0, closes0 = lib.fake_opens(), lib.fake_closes()

    mat = materialize(manifest, library="numpy", cuda_library=fake_libcuda)
    assert lib.fake_opens() - opens0 == 2, "each handle must be opened exactly once"
    assert [r.device_index for r in mat.regions] == [1, 1], "the GPU must be found by UUID"
    for name, dtype, shape, data in tensors:
        arr = mat.tensors[name]
        assert isinstance(arr, DeviceArray)
        assert ctypes.string_at(arr.pointer, arr.nbytes) == data
        cai = arr.__cuda_array_interface__
        assert cai["data"] == (arr.pointer, False) and cai["version"] == 3
        if dtype == "BF16":
            assert cai["typestr"] == "|u1" and cai["shape"] == (len(data),)
        else:
            assert cai["shape"] == shape and np.dtype(cai["typestr"]) == {"F32": np.float32, "I64": np.int64}[dtype]

    del arr, mat
    gc.collect()
    assert lib.fake_closes() - closes0 == 2, "handles must be closed when the last view is gone"
    assert lib.fake_retains() == 0, "primary contexts must be released"


def test_explicit_device_index_and_unknown_gpu(short_tmp, fake_libcuda):
    rng = np.random.default_rng(4)
    tensors = [st_writer.random_tensor(rng, "a", "F32", (2,)), st_writer.random_tensor(rng, "b", "F32", (2,))]
    mat = materialize(ipc_manifest(short_tmp, tensors), library="numpy", device_index=0, cuda_library=fake_libcuda)
    assert mat.regions[0].device_index == 0
    with pytest.raises(WcacheError, match="does not see GPU GPU-22"):
        materialize(ipc_manifest(short_tmp, tensors, device_uuid="GPU-22222222-2222-2222-2222-222222222222"),
                    library="numpy", cuda_library=fake_libcuda)


def test_failures_name_the_driver_call(short_tmp, fake_libcuda):
    rng = np.random.default_rng(4)
    tensors = [st_writer.random_tensor(rng, "a", "F32", (2,)), st_writer.random_tensor(rng, "b", "F32", (2,))]
    m = ipc_manifest(short_tmp, tensors)
    m.handles[0].data = b"/nonexistent".ljust(64, b"\0")
    with pytest.raises(WcacheError, match="cuIpcOpenMemHandle_v2 failed with CUresult 1"):
        materialize(m, library="numpy", cuda_library=fake_libcuda)
    with pytest.raises(WcacheError, match="need the CUDA driver"):
        CudaDriver(os.path.join(short_tmp, "no-libcuda.so"))
    m.handles[0].kind = "hip-ipc"
    with pytest.raises(WcacheError, match="hip-ipc handles without PyTorch need the HIP runtime"):
        materialize(m, library="numpy", cuda_library=fake_libcuda)


def test_view_in_storage_applies_offset_dtype_and_shape():
    """The tensor assembly used for CUDA storages, exercised on a CPU storage."""
    import torch

    data = np.arange(32, dtype="<f4")
    base = torch.from_numpy(data.copy())
    storage = base.untyped_storage() if hasattr(base, "untyped_storage") else base.storage().untyped()
    t = view_in_storage(torch, storage, TensorSpec("x", "F32", (2, 3), 0, 8, 24))
    assert t.tolist() == [[2, 3, 4], [5, 6, 7]]
    assert t.data_ptr() == storage.data_ptr() + 8
    b = view_in_storage(torch, storage, TensorSpec("y", "BF16", (4,), 0, 16, 8))
    assert b.dtype == torch.bfloat16 and b.data_ptr() == storage.data_ptr() + 16
    raw = view_in_storage(torch, storage, TensorSpec("z", "F4", (4,), 0, 4, 2))
    assert raw.dtype == torch.uint8 and tuple(raw.shape) == (2,)
    with pytest.raises(ProtocolError, match="not a multiple of the 4-byte element size"):
        view_in_storage(torch, storage, TensorSpec("w", "F32", (1,), 0, 6, 4))


GRAN = 2 << 20


def vmm_manifest(tensors, device_uuid=UUID1):
    """One cuda-vmm-fd handle: a memfd (the fake driver's VMM export) holding
    the tensors, its size a multiple of the 2 MiB granularity; returns the
    manifest and the descriptor."""
    blob = bytearray()
    entries = []
    for name, dtype, shape, data in tensors:
        blob.extend(bytes(-len(blob) % 256))
        entries.append(pb.Tensor(name=name, dtype=dtype, shape=list(shape), handle_index=0,
                                 offset=len(blob), length=len(data)))
        blob.extend(data)
    size = len(blob)
    fd = os.memfd_create("wcache-test-vmm", os.MFD_CLOEXEC)
    os.ftruncate(fd, -(-size // GRAN) * GRAN)
    os.pwrite(fd, bytes(blob), 0)
    handles = [pb.Handle(kind="cuda-vmm-fd", size=size)]
    return pb.Manifest(device_uuid=device_uuid, handles=handles, tensors=entries), fd


def _write_in_child(address: int) -> int:
    """Fork a child that writes one byte at address and exits 0: its exit
    status, or minus the signal that killed it."""
    pid = os.fork()
    if pid == 0:
        try:
            faulthandler.disable()  # pytest's: the expected fault needs no traceback
            ctypes.memset(address, 0x5A, 1)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def test_cuda_vmm_fd_maps_the_descriptor_read_only(fake_libcuda):
    rng = np.random.default_rng(5)
    tensors = [st_writer.random_tensor(rng, f"v{i}", ("F32", "I64")[i % 2], (5, 7)) for i in range(6)]
    manifest, fd = vmm_manifest(tensors)
    lib = ctypes.CDLL(fake_libcuda)
    try:
        with pytest.raises(ProtocolError, match="cuda-vmm-fd.*no descriptor"):
            materialize(manifest, library="numpy", cuda_library=fake_libcuda)
        mat = materialize(manifest, library="numpy", cuda_library=fake_libcuda, descriptors={0: fd})
    finally:
        os.close(fd)  # the mapping does not need the descriptor
    assert lib.fake_vmm_mapped() == 1 and lib.fake_vmm_handles() == 0, "mapped once, the handle released"
    assert mat.regions[0].device_index == 1, "the GPU must be found by UUID"
    for name, dtype, shape, data in tensors:
        arr = mat.tensors[name]
        assert isinstance(arr, DeviceArray)
        assert ctypes.string_at(arr.pointer, arr.nbytes) == data
        assert arr.__cuda_array_interface__["data"] == (arr.pointer, False)
    # Imports cannot write: the mapping was granted read access only, and a
    # write through it faults. Checked in a forked child (it inherits the
    # mapping) so that the fault kills only it; the same write to memory of
    # its own succeeds, so the probe itself works.
    assert lib.fake_vmm_access_grants(1) == 1 and lib.fake_vmm_access_grants(3) == 0, "mapped read-only"
    own = ctypes.create_string_buffer(16)
    assert _write_in_child(ctypes.addressof(own)) == 0, "the probe cannot write at all"
    assert _write_in_child(mat.tensors["v0"].pointer) == -signal.SIGSEGV, "a write through the import did not fault"
    del arr, mat
    gc.collect()
    assert lib.fake_vmm_mapped() == 0, "the mapping must go with the last view"
    assert lib.fake_retains() == 0, "primary contexts must be released"


def test_cuda_vmm_fd_failures_name_the_driver_call(fake_libcuda, short_tmp):
    rng = np.random.default_rng(6)
    manifest, fd = vmm_manifest([st_writer.random_tensor(rng, "a", "F32", (4,))])
    try:
        manifest.handles[0].size = 3 * GRAN  # more than the descriptor holds
        with pytest.raises(WcacheError, match="cuda-vmm-fd.*cuMemMap failed with CUresult 1"):
            materialize(manifest, library="numpy", cuda_library=fake_libcuda, descriptors={0: fd})
    finally:
        os.close(fd)
    r, w = os.pipe()
    try:
        with pytest.raises(WcacheError, match="cuMemImportFromShareableHandle failed with CUresult 1"):
            materialize(manifest, library="numpy", cuda_library=fake_libcuda, descriptors={0: r})
    finally:
        os.close(r)
        os.close(w)
    assert ctypes.CDLL(fake_libcuda).fake_vmm_mapped() == 0


def test_cuda_vmm_fd_torch_tensors_are_zero_copy_and_keep_the_mapping(fake_libcuda, monkeypatch):
    """With (a stand-in for) CUDA PyTorch, cuda-vmm-fd goes through the driver
    whatever the allocator, wrapped by __cuda_array_interface__ (no copy, no
    _new_shared_cuda); the mapping lives as long as any tensor of it."""
    import sys

    from faketorch import FakeTorch
    from wcache._ipc import TorchDriverIpcRegion

    lib = ctypes.CDLL(fake_libcuda)
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    rng = np.random.default_rng(8)
    ts = [st_writer.random_tensor(rng, f"t{i}", "F32", (3, 2)) for i in range(2)]
    manifest, fd = vmm_manifest(ts)
    try:
        mat = materialize(manifest, library="torch", device_index=1, cuda_library=fake_libcuda, descriptors={0: fd})
    finally:
        os.close(fd)
    assert "_new_shared_cuda" not in torch.calls and torch.calls.index("init") < torch.calls.index("as_tensor")
    assert isinstance(mat.regions[0], TorchDriverIpcRegion) and lib.fake_vmm_mapped() == 1
    for name, _, _, data in ts:
        assert ctypes.string_at(mat.tensors[name].data_ptr(), len(data)) == data
    keep = mat.tensors["t1"]
    del mat
    gc.collect()
    assert lib.fake_vmm_mapped() == 1 and ctypes.string_at(keep.data_ptr(), 24) == ts[1][3]
    del keep
    gc.collect()
    assert lib.fake_vmm_mapped() == 0 and lib.fake_retains() == 0
