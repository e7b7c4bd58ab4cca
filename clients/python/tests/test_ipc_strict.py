"""The cuda-ipc open paths against a fake driver as strict as the real one, and
the PyTorch call order (torch.cuda.init before _new_shared_cuda; the driver path
under cudaMallocAsync) against a stand-in for torch."""

from __future__ import annotations

import ctypes
import gc
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import st_writer
from faketorch import FakeTorch
from test_ipc_driver import ipc_manifest
from wcache import WcacheError
from wcache._ipc import CudaDriver, TorchDriverIpcRegion, TorchIpcRegion, _CUipcMemHandle
from wcache._tensors import materialize

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def strict_libcuda(tmp_path):
    """A private build of the fake driver: a sticky fault in one test stays there."""
    out = str(tmp_path / "libcuda.so.1")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", out, os.path.join(HERE, "fakecuda", "fake_libcuda.c")],
                   check=True)
    return out


def tensors(seed=5, n=4):
    rng = np.random.default_rng(seed)
    return [st_writer.random_tensor(rng, f"t{i}", "F32", (3, 2)) for i in range(n)]


def with_exporter(manifest, pid):
    for h in manifest.handles:
        h.data = h.data[:60] + struct.pack("<i", pid)
    return manifest


def test_open_in_the_exporting_process_fails(short_tmp, strict_libcuda):
    m = with_exporter(ipc_manifest(short_tmp, tensors()), os.getpid())
    with pytest.raises(WcacheError, match="cuIpcOpenMemHandle_v2 failed with CUresult 201"):
        materialize(m, library="numpy", device_index=1, cuda_library=strict_libcuda)


def test_handle_of_an_exited_exporter_cannot_be_opened(short_tmp, strict_libcuda):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    m = with_exporter(ipc_manifest(short_tmp, tensors()), child.pid)
    with pytest.raises(WcacheError, match="CUresult 1"):
        materialize(m, library="numpy", device_index=1, cuda_library=strict_libcuda)


def test_repeated_opens_are_reference_counted(short_tmp, strict_libcuda):
    lib = ctypes.CDLL(strict_libcuda)
    m = ipc_manifest(short_tmp, tensors())
    m.handles[1].CopyFrom(m.handles[0])  # both handles name one allocation
    for t in m.tensors:
        t.handle_index = 0
    first = materialize(m, library="numpy", device_index=1, cuda_library=strict_libcuda)
    assert lib.fake_opens() == 1 and lib.fake_mapped() == 1
    assert first.regions[0].pointer == first.regions[1].pointer
    first.regions[0].close()
    # The second open's reference keeps the mapping.
    arr = first.tensors["t0"]
    assert lib.fake_mapped() == 1 and ctypes.string_at(arr.pointer, 4) == bytes(tensors()[0][3][:4])
    del first, arr
    gc.collect()
    assert lib.fake_mapped() == 0 and lib.fake_closes() == 2 and lib.fake_retains() == 0


def test_last_primary_release_destroys_the_context(short_tmp, strict_libcuda):
    """The fake is as strict as the driver: the last release of a primary
    context destroys it with its mappings, and calls in it fail (709), so a
    client that released too early is caught."""
    lib = ctypes.CDLL(strict_libcuda)
    m = ipc_manifest(short_tmp, tensors())
    ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
    handle = _CUipcMemHandle.from_buffer_copy(bytes(m.handles[0].data))  # passed by value
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _CUipcMemHandle, ctypes.c_uint]
    assert lib.cuInit(0) == 0 and lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 1) == 0
    assert lib.cuCtxPushCurrent_v2(ctx) == 0
    assert lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, 1) == 0 and lib.fake_mapped() == 1
    assert lib.cuDevicePrimaryCtxRelease_v2(1) == 0
    assert lib.fake_retains() == 0 and lib.fake_mapped() == 0, "the mapping outlived its context"
    assert lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, 1) == 709  # CUDA_ERROR_CONTEXT_IS_DESTROYED


def test_sticky_errors_are_named(short_tmp, strict_libcuda):
    driver = CudaDriver(strict_libcuda)
    ctypes.CDLL(strict_libcuda).fake_fault(700)
    with pytest.raises(WcacheError, match="CUDA_ERROR_ILLEGAL_ADDRESS.*sticky"):
        driver.ordinal_for_uuid("GPU-11111111-1111-1111-1111-111111111111")
    with pytest.raises(WcacheError, match="sticky"):
        driver.ordinal_for_uuid("GPU-11111111-1111-1111-1111-111111111111")


def test_torch_is_initialised_before_new_shared_cuda(short_tmp, strict_libcuda, monkeypatch):
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    mat = materialize(ipc_manifest(short_tmp, tensors()), library="torch", device_index=1,
                      cuda_library=strict_libcuda)
    assert all(isinstance(r, TorchIpcRegion) for r in mat.regions)
    assert torch.calls.index("init") < torch.calls.index("_new_shared_cuda")
    assert mat.tensors["t0"].shape == (3, 2)


def test_cuda_malloc_async_opens_through_the_driver_zero_copy(short_tmp, strict_libcuda, monkeypatch):
    lib = ctypes.CDLL(strict_libcuda)
    torch = FakeTorch(allocator="cudaMallocAsync")
    monkeypatch.setitem(sys.modules, "torch", torch)
    ts = tensors()
    mat = materialize(ipc_manifest(short_tmp, ts), library="torch", device_index=1, cuda_library=strict_libcuda)
    assert "_new_shared_cuda" not in torch.calls and torch.calls.count("as_tensor") == 2
    assert torch.calls.index("init") < torch.calls.index("as_tensor")
    assert all(isinstance(r, TorchDriverIpcRegion) for r in mat.regions)
    assert lib.fake_opens() == 2 and lib.fake_mapped() == 2
    for name, _, _, data in ts:
        t = mat.tensors[name]
        assert t.shape == (3, 2) and t.dtype == "float32"
        # Zero-copy: the tensor's address is inside the driver's mapping and holds the bytes.
        assert ctypes.string_at(t.data_ptr(), len(data)) == data
    # The mappings live as long as any tensor does, not as long as the Materialized.
    keep = mat.tensors["t1"]
    del mat, t
    gc.collect()
    assert lib.fake_mapped() == 1 and ctypes.string_at(keep.data_ptr(), 24) == ts[1][3]
    del keep
    gc.collect()
    assert lib.fake_mapped() == 0 and lib.fake_retains() == 0


def test_cuda_malloc_async_detected_from_the_environment(monkeypatch):
    from wcache._ipc import torch_uses_cuda_malloc_async

    torch = FakeTorch()
    del torch.cuda.get_allocator_backend
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False, backend:cudaMallocAsync")
    assert torch_uses_cuda_malloc_async(torch)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:native")
    assert not torch_uses_cuda_malloc_async(torch)




def test_publish_copies_each_storage_device_to_device_into_ipc_handles():
    """The GPU publish path (cuda-ipc plan handles): each handle opened once
    through torch, each storage copied once, device to device, to its place,
    and the device synchronised before the commit."""
    from faketorch import FakeStorage  # noqa: PLC0415
    from wcache import pb  # noqa: PLC0415
    from wcache._publish import _fill, _Storage  # noqa: PLC0415

    torch = FakeTorch()
    torch.cuda.init()
    plan = pb.PublishPlan(device_uuid="GPU-x", handles=[pb.Handle(kind="cuda-ipc", data=bytes(64), size=4096)],
                          tensors=[pb.Tensor(name="a", handle_index=0, offset=0, length=512),
                                   pb.Tensor(name="q", handle_index=0, offset=1024, length=2048),
                                   pb.Tensor(name="k", handle_index=0, offset=1024, length=2048)])
    a, fused = FakeStorage(0x1000, 512, "cuda:1"), FakeStorage(0x9000, 2048, "cuda:1")
    progress = []
    sums = _fill(torch, plan, [_Storage("s0", a, 0, 512, [0]), _Storage("s1", fused, 0, 2048, [1, 2])], 3, 1, False,
                 "/nonexistent.sock", lambda *p: progress.append(p))  # no memfd handle: the descriptor channel is not asked
    base = 0x7000_0000_0000 + 1  # FakeTorch's _new_shared_cuda address of device 1
    copies = [c for c in torch.calls if isinstance(c, tuple)]
    assert copies == [("copy", base, 0x1000, 512), ("copy", base + 1024, 0x9000, 2048)]
    assert torch.calls.count("_new_shared_cuda") == 1 and torch.calls[-1] == "synchronize"
    assert sums == [] and progress == [(512, 2560), (2560, 2560)]
    # A plan that places two views of one storage apart is refused before any open or copy.
    plan.tensors[2].offset = 3072 - 1024
    torch.calls.clear()
    with pytest.raises(WcacheError, match="share a storage"):
        _fill(torch, plan, [_Storage("s0", a, 0, 512, [0]), _Storage("s1", fused, 0, 2048, [1, 2])], 3, 1, False,
              "/nonexistent.sock", lambda *p: None)
    assert not [c for c in torch.calls if isinstance(c, tuple)] and "_new_shared_cuda" not in torch.calls
