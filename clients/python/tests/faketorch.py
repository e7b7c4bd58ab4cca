"""A stand-in for the slice of PyTorch wcache._ipc touches on a GPU, to test the
call order and the zero-copy wrapping without a GPU (and without torch).

Like torch >= 2.5, ``UntypedStorage._new_shared_cuda`` fails unless
``torch.cuda.init()`` ran first, and refuses under the cudaMallocAsync
allocator. ``as_tensor`` consumes ``__cuda_array_interface__`` without copying
and its storage holds the source object, as torch's does.
"""

from __future__ import annotations

import types
from contextlib import contextmanager

_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "uint8": 1, "int8": 1}


class FakeStorage:
    def __init__(self, ptr, nbytes, device, owner=None):
        self._ptr, self.nbytes, self.device, self.owner = ptr, nbytes, device, owner

    def data_ptr(self):
        return self._ptr

    def size(self):
        return self.nbytes


class FakeTensor:
    def __init__(self, dtype, device, storage=None, offset=0, shape=(0,), torch=None):
        self.dtype, self.device, self.storage, self.offset, self.shape = dtype, device, storage, offset, tuple(shape)
        self.torch = torch

    def element_size(self):
        return _SIZES[self.dtype]

    def set_(self, storage, offset, shape, strides):
        return FakeTensor(self.dtype, self.device, storage, offset, shape, self.torch)

    # What materialize's bulk views use (wcache._hostviews): offsets in elements of the dtype.
    def view(self, dtype):
        ratio = _SIZES[dtype] / self.element_size()
        return FakeTensor(dtype, self.device, self.storage, int(self.offset / ratio),
                          (int(self.shape[0] / ratio),), self.torch)

    def as_strided(self, shape, strides, offset):
        t = FakeTensor(self.dtype, self.device, self.storage, offset, shape, self.torch)
        t.strides = tuple(strides)
        return t

    def unbind(self, dim):
        assert dim == 0
        return tuple(FakeTensor(self.dtype, self.device, self.storage, self.offset + i * self.strides[0], self.shape[1:],
                                self.torch) for i in range(self.shape[0]))

    def copy_(self, src):
        """Records ("copy", destination address, source address, bytes) in the torch's calls."""
        assert self.shape == src.shape and self.dtype == src.dtype == "uint8"
        self.torch.calls.append(("copy", self.data_ptr(), src.data_ptr(), self.shape[0]))
        return self

    def data_ptr(self):
        return self.storage.data_ptr() + self.offset * self.element_size()

    def untyped_storage(self):
        return self.storage


class FakeTorch(types.SimpleNamespace):
    def __init__(self, allocator="native"):
        super().__init__()
        for name in _SIZES:
            setattr(self, name, name)
        self.version = types.SimpleNamespace(hip=None, cuda="13.0")
        self.calls = []
        torch = self

        class _Storage:
            @staticmethod
            def _new_shared_cuda(device, handle, size, offset, refcount, ref_offset, event, event_sync):
                torch.calls.append("_new_shared_cuda")
                if "init" not in torch.calls:
                    raise RuntimeError("per-device state not initialised (torch >= 2.5 without lazy init)")
                if allocator == "cudaMallocAsync":
                    raise RuntimeError("cudaMallocAsync does not yet support shareIpcHandle")
                return FakeStorage(0x7000_0000_0000 + device, size, f"cuda:{device}")

        @contextmanager
        def device(index):
            torch.calls.append(f"device({index})")
            yield

        self.UntypedStorage = _Storage
        self.cuda = types.SimpleNamespace(
            init=lambda: torch.calls.append("init"),
            is_available=lambda: True,
            get_allocator_backend=lambda: allocator,
            device=device,
            synchronize=lambda: torch.calls.append("synchronize"),
        )

    def empty(self, shape, dtype=None, device="cpu"):
        return FakeTensor(dtype, device, shape=shape, torch=self)

    def as_tensor(self, obj, device=None):
        self.calls.append("as_tensor")
        cai = obj.__cuda_array_interface__
        assert cai["typestr"] == "|u1" and cai["version"] == 3 and cai["strides"] is None
        (n,) = cai["shape"]
        return FakeTensor("uint8", device, FakeStorage(cai["data"][0], n, device, owner=obj), 0, (n,))
