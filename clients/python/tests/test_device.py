"""Canonical device UUIDs from PyTorch's forms (CUDA and ROCm), without a GPU."""

from __future__ import annotations

import types
import uuid as uuidlib

import pytest

import wcache
from wcache import InvalidUUIDError, canonical_device_uuid
from wcache._device import torch_platform


class FakeTorchUUID:
    """Stands in for torch._C._CUuuid: str() is 8-4-4-4-12 hex, .bytes the 16 bytes."""

    def __init__(self, b: bytes):
        self.bytes = b

    def __str__(self) -> str:
        return str(uuidlib.UUID(bytes=self.bytes))


def test_cuda_forms():
    want = "GPU-edfee158-11c1-52b8-0517-92f30e7fac88"
    raw = bytes.fromhex("edfee15811c152b8051792f30e7fac88")
    assert canonical_device_uuid("edfee158-11c1-52b8-0517-92f30e7fac88") == want
    assert canonical_device_uuid("EDFEE158-11C1-52B8-0517-92F30E7FAC88") == want
    assert canonical_device_uuid("edfee15811c152b8051792f30e7fac88") == want
    assert canonical_device_uuid(raw) == want
    assert canonical_device_uuid(FakeTorchUUID(raw)) == want
    assert canonical_device_uuid(want) == want  # already canonical
    assert canonical_device_uuid(raw, mig=True) == "MIG-edfee158-11c1-52b8-0517-92f30e7fac88"
    assert canonical_device_uuid("MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f") == "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"


def test_rocm_forms():
    # MI300X as PyTorch prints it (pytorch/ao#2853) = ASCII "e044801689257fb4"; rocminfo: GPU-e044801689257fb4.
    assert canonical_device_uuid("65303434-3830-3136-3839-323537666234", platform="rocm") == "GPU-e044801689257fb4"
    assert canonical_device_uuid(b"8af705259683161c", platform="rocm") == "GPU-8af705259683161c"
    assert canonical_device_uuid(FakeTorchUUID(b"8af705259683161c"), platform="rocm") == "GPU-8af705259683161c"
    assert canonical_device_uuid("GPU-8af705259683161c", platform="rocm") == "GPU-8af705259683161c"


def test_devices_without_a_unique_id_are_refused():
    with pytest.raises(InvalidUUIDError, match="no unique id"):
        canonical_device_uuid(b"XX" + bytes(14), platform="rocm")
    with pytest.raises(InvalidUUIDError, match="no unique id"):
        canonical_device_uuid(bytes.fromhex("edfee15811c152b8051792f30e7fac88"), platform="rocm")
    with pytest.raises(InvalidUUIDError, match="all-zero"):
        canonical_device_uuid(bytes(16))


@pytest.mark.parametrize("raw", ["", "GPU-../x", "edfee158-11c1", "not-a-uuid", b"short"])
def test_garbage_is_refused(raw):
    with pytest.raises(InvalidUUIDError):
        canonical_device_uuid(raw)


def test_platform_argument_is_checked():
    with pytest.raises(ValueError, match="platform"):
        canonical_device_uuid("edfee158-11c1-52b8-0517-92f30e7fac88", platform="xpu")


def test_torch_platform_reads_the_build():
    rocm = types.SimpleNamespace(version=types.SimpleNamespace(hip="6.2.41133"))
    cuda = types.SimpleNamespace(version=types.SimpleNamespace(hip=None))
    assert torch_platform(rocm) == "rocm"
    assert torch_platform(cuda) == "cuda"


@pytest.fixture
def fake_gpus(monkeypatch):
    """Makes torch report two GPUs with the given properties (no GPU needed)."""
    import torch

    def install(props, hip=None):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
        monkeypatch.setattr(torch.version, "hip", hip, raising=False)

    return install


def test_device_uuid_and_capability_through_torch(fake_gpus, monkeypatch):
    import wcache._device as device

    a = bytes.fromhex("edfee15811c152b8051792f30e7fac88")
    b = bytes.fromhex("ffc794988ff3c2dc3b0dfafd804516ae")
    fake_gpus([types.SimpleNamespace(uuid=FakeTorchUUID(a), major=9, minor=0),
               types.SimpleNamespace(uuid=FakeTorchUUID(b), major=8, minor=6)])
    monkeypatch.setattr(device, "_nvml_is_mig", lambda body: None)  # no NVML: a whole GPU
    assert device.device_uuid(1) == "GPU-ffc79498-8ff3-c2dc-3b0d-fafd804516ae"
    assert device.device_index_for_uuid("GPU-ffc79498-8ff3-c2dc-3b0d-fafd804516ae") == 1
    assert device.device_capability(0) == "9.0" and device.device_capability(1) == "8.6"
    monkeypatch.setattr(device, "_nvml_is_mig", lambda body: body.startswith("edfee158"))
    assert device.device_uuid(0) == "MIG-edfee158-11c1-52b8-0517-92f30e7fac88"
    assert device.device_uuid(0, mig=False) == "GPU-edfee158-11c1-52b8-0517-92f30e7fac88"
    with pytest.raises(wcache.WcacheError, match="out of range"):
        device.device_uuid(2)
    with pytest.raises(wcache.WcacheError, match="does not see GPU GPU-0000"):
        device.device_index_for_uuid("GPU-00000000-0000-0000-0000-000000000001")


def test_device_uuid_on_rocm(fake_gpus):
    import wcache._device as device

    fake_gpus([types.SimpleNamespace(uuid=FakeTorchUUID(b"e044801689257fb4"), gcnArchName="gfx942:sramecc+:xnack-")],
              hip="6.2.41133")
    assert device.device_uuid(0) == "GPU-e044801689257fb4"
    assert device.device_capability(0) == "gfx942"


def test_without_a_gpu_the_helpers_say_so(monkeypatch):
    import torch

    import wcache._device as device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(wcache.WcacheError, match="sees no GPU"):
        device.device_uuid(0)
    with pytest.raises(wcache.WcacheError, match="sees no GPU"):
        device.device_capability(0)
    with pytest.raises(wcache.WcacheError, match="sees no GPU"):
        wcache.attach(wcache.CacheConfig(model="/m"))  # no socket, no UUID, no index: torch's current device
