"""Canonical device UUIDs from PyTorch's forms (CUDA and ROCm), without a GPU."""

from __future__ import annotations

import types
import uuid as uuidlib

import pytest

from wcache import InvalidUUIDError, canonical_device_uuid
from wcache.device import torch_platform


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
