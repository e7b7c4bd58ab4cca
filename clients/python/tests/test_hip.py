"""ROCm: the HIP ctypes binding (UUIDs as HIP applies visibility, hip-ipc
open) against the fake libamdhip64 the Go ROCm backend's tests use
(plugins/rocm/testdata/fakehip), built here with gcc. The fake is as strict
as ROCm where the client relies on it: a handle cannot be opened in the
process that exported it, opens are reference counted, flags must be
hipIpcMemLazyEnablePeerAccess."""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from harness import REPO
from wcache import WcacheError, pb
from wcache._device import device_uuid
from wcache._hip import HipRuntime
from wcache._ipc import DeviceArray
from wcache._tensors import materialize

FAKEHIP = os.path.join(REPO, "plugins", "rocm", "testdata", "fakehip")
DEVICES = "1901ead3a2ecd4a6@c1,2b6c1e0f7d3a9c55@c2"


@pytest.fixture(scope="module")
def fake_hip_build(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fakehip") / "libamdhip64.so")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-I", FAKEHIP,
                    "-I", os.path.join(REPO, "plugins", "internal", "testkit", "fakelib", "include"),
                    "-o", out, os.path.join(FAKEHIP, "fakehip.c"), "-lpthread"], check=True)
    return out


@pytest.fixture
def fake_hip(fake_hip_build, tmp_path, monkeypatch):
    """A private copy of the fake (a separate instance that reads this
    test's environment at initialisation) with two devices."""
    monkeypatch.setenv("FAKEHIP_DEVICES", DEVICES)
    for v in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(v, raising=False)
    path = str(tmp_path / "libamdhip64.so")
    shutil.copy(fake_hip_build, path)
    return path


def test_uuids_as_hip_applies_visibility(fake_hip, monkeypatch):
    assert [HipRuntime(fake_hip).device_uuid(i) for i in range(2)] == ["GPU-1901ead3a2ecd4a6", "GPU-2b6c1e0f7d3a9c55"]


def test_visibility_variables(fake_hip_build, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKEHIP_DEVICES", DEVICES)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "GPU-2b6c1e0f7d3a9c55,0")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    path = str(tmp_path / "libamdhip64.so")
    shutil.copy(fake_hip_build, path)
    hip = HipRuntime(path)
    assert hip.device_count() == 1
    assert hip.device_uuid(0) == "GPU-1901ead3a2ecd4a6"
    assert hip.ordinal_for_uuid("GPU-1901ead3a2ecd4a6") == 0
    with pytest.raises(WcacheError, match="does not see GPU GPU-2b6c1e0f7d3a9c55"):
        hip.ordinal_for_uuid("GPU-2b6c1e0f7d3a9c55")


def test_missing_runtime_is_a_clear_error(tmp_path):
    with pytest.raises(WcacheError, match="need the HIP runtime"):
        HipRuntime(str(tmp_path / "absent" / "libamdhip64.so"))


def test_device_uuid_falls_back_to_hip_when_torch_has_no_usable_uuid(fake_hip, monkeypatch):
    """A ROCm torch whose device properties lack a readable uuid: the UUID
    comes from hipDeviceGetUuid; one with torch's ASCII-hex form needs no HIP."""
    torch = types.SimpleNamespace(version=types.SimpleNamespace(hip="6.3.42131"))
    props = {}
    torch.cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2,
                                       get_device_properties=lambda i: props[i])
    monkeypatch.setitem(sys.modules, "torch", torch)
    import wcache._hip  # noqa: PLC0415

    monkeypatch.setattr(wcache._hip, "HIP_LIBRARIES", (fake_hip,))
    props[1] = types.SimpleNamespace()  # no uuid attribute (older ROCm builds)
    assert device_uuid(1, backend="rocm") == "GPU-2b6c1e0f7d3a9c55"
    props[1] = types.SimpleNamespace(uuid="not-a-uuid")
    assert device_uuid(1, backend="rocm") == "GPU-2b6c1e0f7d3a9c55"
    # torch's own spelling: hex of the ASCII bytes of "1901ead3a2ecd4a6".
    props[0] = types.SimpleNamespace(uuid=b"1901ead3a2ecd4a6".hex()[:8] + "-" + b"1901ead3a2ecd4a6".hex()[8:12] + "-" +
                                     b"1901ead3a2ecd4a6".hex()[12:16] + "-" + b"1901ead3a2ecd4a6".hex()[16:20] + "-" +
                                     b"1901ead3a2ecd4a6".hex()[20:])
    monkeypatch.setattr(wcache._hip, "HIP_LIBRARIES", (os.path.join(os.path.dirname(fake_hip), "absent.so"),))
    assert device_uuid(0, backend="rocm") == "GPU-1901ead3a2ecd4a6"


EXPORTER = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.hipSetDevice(int(sys.argv[2]))
    out = []
    for blob in sys.argv[3:]:
        data = bytes.fromhex(blob)
        p = ctypes.c_void_p()
        assert lib.hipMalloc(ctypes.byref(p), ctypes.c_size_t(len(data) + 4096)) == 0
        host = ctypes.c_void_p()
        assert lib.hipHostMalloc(ctypes.byref(host), ctypes.c_size_t(len(data)), 0) == 0
        ctypes.memmove(host, data, len(data))
        assert lib.hipMemcpyHtoDAsync(ctypes.c_void_p(p.value + 4096), host, ctypes.c_size_t(len(data)), None) == 0
        h = (ctypes.c_char * 64)()
        assert lib.hipIpcGetMemHandle(h, p) == 0
        out.append(bytes(h).hex())
    print(" ".join(out), flush=True)
    sys.stdin.readline()
""")


@pytest.fixture
def exporter(fake_hip):
    """Another process that allocates one buffer per blob on device 1,
    copies the blob in at offset 4096 and prints the hip-ipc handles; it
    keeps the memory until the test ends."""
    procs = []

    def start(*blobs):
        p = subprocess.Popen([sys.executable, "-c", EXPORTER, fake_hip, "1", *[b.hex() for b in blobs]],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        return [bytes.fromhex(h) for h in p.stdout.readline().split()]

    yield start
    for p in procs:
        p.stdin.close()
        p.wait(timeout=10)


def hip_manifest(handles, blobs):
    tensors = [pb.Tensor(name=f"t{i}", dtype="U8", shape=[len(b)], handle_index=i, offset=4096, length=len(b))
               for i, b in enumerate(blobs)]
    return pb.Manifest(device_uuid="GPU-2b6c1e0f7d3a9c55",
                       handles=[pb.Handle(kind="hip-ipc", data=h, size=len(b) + 4096) for h, b in zip(handles, blobs)],
                       tensors=tensors)


def read_device(lib, pointer, n):
    buf = ctypes.create_string_buffer(n)
    assert lib.hipMemcpyDtoH(buf, ctypes.c_void_p(pointer), ctypes.c_size_t(n)) == 0
    return buf.raw


def test_hip_ipc_open_zero_copy_and_closed_when_gone(fake_hip, exporter):
    rng = np.random.default_rng(7)
    blobs = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (1000, 30_001)]
    handles = exporter(*blobs)
    lib = ctypes.CDLL(fake_hip)
    opens0, closes0 = lib.fakehip_opens(), lib.fakehip_closes()
    mat = materialize(hip_manifest(handles, blobs), library="numpy", hip_library=fake_hip)
    assert lib.fakehip_opens() - opens0 == 2, "each handle must be opened exactly once"
    assert [r.device_index for r in mat.regions] == [1, 1], "the GPU must be found by UUID"
    for i, b in enumerate(blobs):
        arr = mat.tensors[f"t{i}"]
        assert isinstance(arr, DeviceArray)
        assert arr.pointer == mat.regions[i].pointer + 4096
        assert read_device(lib, arr.pointer, arr.nbytes) == b, "the view must alias the exporter's memory"
    del arr, mat
    gc.collect()
    assert lib.fakehip_closes() - closes0 == 2, "handles must be closed when the last view is gone"


def test_hip_ipc_open_in_the_exporting_process_fails(fake_hip):
    lib = ctypes.CDLL(fake_hip)
    hip = HipRuntime(fake_hip)
    p = ctypes.c_void_p()
    assert lib.hipMalloc(ctypes.byref(p), ctypes.c_size_t(8192)) == 0
    h = (ctypes.c_char * 64)()
    assert lib.hipIpcGetMemHandle(h, p) == 0
    manifest = hip_manifest([bytes(h)], [b"x" * 10])
    manifest.device_uuid = hip.device_uuid(0)
    with pytest.raises(WcacheError, match="hipErrorInvalidContext"):
        materialize(manifest, library="numpy", hip_library=fake_hip)
    with pytest.raises(WcacheError, match="hipErrorInvalidValue"):
        materialize(hip_manifest([b"\x07" * 64], [b"x"]), library="numpy", hip_library=fake_hip, device_index=0)


def test_torch_async_allocator_opens_through_hip_zero_copy(fake_hip, exporter):
    """Under PyTorch's async allocator _new_shared_cuda refuses: the handle is
    opened by HIP through ctypes and wrapped as torch memory without a copy."""
    from faketorch import FakeTorch  # noqa: PLC0415
    from wcache._ipc import TorchDriverIpcRegion  # noqa: PLC0415
    from wcache._tensors import _open_hip  # noqa: PLC0415

    blobs = [b"\x01\x02\x03" * 100]
    handles = exporter(*blobs)
    torch = FakeTorch(allocator="cudaMallocAsync")
    torch.version.hip = "6.3.42131"
    manifest = hip_manifest(handles, blobs)
    region = _open_hip(0, type("H", (), {"kind": "hip-ipc", "data": handles[0], "size": manifest.handles[0].size})(),
                       manifest.device_uuid, torch, 1, fake_hip, None)
    assert isinstance(region, TorchDriverIpcRegion)
    assert region.storage.data_ptr() == region.address != 0
    assert "as_tensor" in torch.calls and "_new_shared_cuda" not in torch.calls
    torch.version.hip = None
    with pytest.raises(WcacheError, match="CUDA build"):
        _open_hip(0, manifest.handles[0], manifest.device_uuid, torch, 1, fake_hip, None)
