"""posix-shm and memfd handles: map a daemon's host memory copy-on-write, zero-copy.

A posix-shm Handle's data is the absolute path of a shared-memory file (the
mock backend's "device memory"); its size is the number of bytes to map. A
memfd handle's memory comes as a descriptor (wcache._fdchannel).

The memory is mapped once per handle **copy-on-write** (``MAP_PRIVATE``,
``PROT_READ | PROT_WRITE``): every tensor is a view into that mapping, no
byte is copied, and every process attached to the daemon shares the same
physical pages until one writes. A write through a tensor (an engine's
in-place fix-up, ``w.mul_(2)``) copies the page it touches into this
process's own memory: it never reaches the daemon or another engine, and it
never faults. The daemon's memfds are sealed against writes (docs/protocol.md,
"What a memfd allows"); a kernel older than 6.7 refuses writable private
mappings of them, and the mapping is then read-only and shared (a write
faults), with a warning in the "wcache" log.

torch tensors are built with ``torch.frombuffer`` over the mmap object.
numpy arrays (``numpy.frombuffer``) are writable the same way.

The mapping is never closed explicitly: tensors keep the mmap object alive
(torch holds a reference to it, numpy a buffer export), and it is unmapped when
the last of them is garbage-collected. The daemon unlinking the file (on stop)
does not invalidate an existing mapping.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import stat
from typing import Optional

from ._errors import ProtocolError, WcacheError
from ._manifest import HandleSpec

log = logging.getLogger("wcache")

_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)


def _map_view(fd: int, size: int) -> mmap.mmap:
    """size bytes of fd mapped copy-on-write (read-only shared where the
    kernel refuses that: a write-sealed memfd before Linux 6.7)."""
    try:
        return mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE | _MAP_NORESERVE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EACCES):
            raise
        log.warning("wcache: this kernel refuses a copy-on-write mapping of the weights (%s): mapped read-only, "
                    "a write to an attached tensor faults; attach with copy=True to modify weights", exc.strerror)
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)


def _map_handle(fd: int, size: int, writable: bool, what: str) -> mmap.mmap:
    """size bytes of a handle's fd mapped for a publisher (writable: shared
    and writable) or an attacher (_map_view); an OSError becomes a
    WcacheError saying what failed (what) and why."""
    try:
        if writable:
            return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        return _map_view(fd, size)
    except OSError as exc:
        raise WcacheError(f"{what}: {exc.strerror}") from exc


class ShmRegion:
    """One posix-shm or memfd handle mapped into this process (copy-on-write).

    ``buffer`` is the mmap object (None for a zero-size handle), ``path`` the
    file, ``size`` the mapped length and ``address`` the address of its first
    byte (0 when empty).
    """

    def __init__(self, path: str, size: int, buffer: Optional[mmap.mmap]):
        self.path = path
        self.size = size
        self.buffer = buffer
        self._address: Optional[int] = None

    @property
    def address(self) -> int:
        """Virtual address of the mapping's first byte in this process."""
        if self._address is None:
            self._address = _buffer_address(self.buffer) if self.buffer is not None else 0
        return self._address

    def contains(self, pointer: int, nbytes: int = 1) -> bool:
        """Whether [pointer, pointer+nbytes) lies inside this mapping."""
        return self.size > 0 and self.address <= pointer and pointer + nbytes <= self.address + self.size

    def __repr__(self) -> str:
        return f"ShmRegion(path={self.path!r}, size={self.size}, address={self.address:#x})"


def _buffer_address(buf) -> int:
    """Address of a read-only buffer's first byte (ctypes cannot take from_buffer of one)."""
    import ctypes

    class _PyBuffer(ctypes.Structure):
        _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                    ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                    ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                    ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]

    view = _PyBuffer()
    get_buffer = ctypes.pythonapi.PyObject_GetBuffer
    get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    get_buffer.restype = ctypes.c_int
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.POINTER(_PyBuffer)]
    release.restype = None
    if get_buffer(buf, ctypes.byref(view), 0) != 0:  # PyBUF_SIMPLE
        raise WcacheError("cannot read the address of the shared-memory mapping")
    try:
        return int(view.buf or 0)
    finally:
        release(ctypes.byref(view))


def map_memfd(index: int, handle: HandleSpec, fd: int, writable: bool = False) -> ShmRegion:
    """Map memfd handle number index from its descriptor fd, copy-on-write
    (or, for a publisher holding a writable descriptor, shared and writable).

    The descriptor (received on the descriptor channel) is not
    closed here: the Attachment owns it. The mapping stays valid after it is
    closed, after the daemon and its plugin are gone: the memory lives until
    the last descriptor and mapping of it go. Raises ProtocolError when the
    descriptor is not a regular file of at least handle.size bytes,
    WcacheError when it cannot be mapped.
    """
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size < handle.size:
        raise ProtocolError(f"handle {index} (memfd): descriptor of mode {st.st_mode:o} and {st.st_size} bytes, "
                            f"the handle says {handle.size}")
    # The name /proc/self/maps shows for the mapping ("/memfd:NAME"), for
    # diagnostics; a memfd has no path anyone can open.
    try:
        name = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
    except OSError:
        name = f"memfd:{index}"
    if handle.size == 0:
        return ShmRegion(name, 0, None)
    return ShmRegion(name, handle.size, _map_handle(fd, handle.size, writable, f"handle {index} (memfd): mmap"))


def open_handle_file(index: int, handle: HandleSpec, writable: bool = False):
    """Open the file of posix-shm handle number index: (path, fd).

    Raises ProtocolError when the handle's path is not absolute UTF-8 or the
    file is not a regular file of at least handle.size bytes, and WcacheError
    (with the OSError as cause) when it cannot be opened. The caller closes fd.
    """
    try:
        path = handle.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"handle {index} (posix-shm): path is not UTF-8") from exc
    if not path.startswith("/") or "\x00" in path:
        raise ProtocolError(f"handle {index} (posix-shm): {path!r} is not an absolute path")
    mode = os.O_RDWR if writable else os.O_RDONLY
    try:
        fd = os.open(path, mode | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        how = " for writing" if writable else ""
        raise WcacheError(f"handle {index} (posix-shm): open {path}{how}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ProtocolError(f"handle {index} (posix-shm): {path} is not a regular file")
        if st.st_size < handle.size:
            raise ProtocolError(f"handle {index} (posix-shm): {path} has {st.st_size} bytes, "
                                f"the handle says {handle.size}")
    except BaseException:
        os.close(fd)
        raise
    return path, fd


def map_shm(index: int, handle: HandleSpec, writable: bool = False) -> ShmRegion:
    """Map posix-shm handle number index, copy-on-write (or, for a
    publisher, shared and writable).

    Raises ProtocolError when the handle's path is not absolute UTF-8 or the
    file is not a regular file of at least handle.size bytes, and WcacheError
    (with the OSError as cause) when it cannot be opened or mapped.
    """
    path, fd = open_handle_file(index, handle, writable)
    try:
        if handle.size == 0:
            return ShmRegion(path, 0, None)
        return ShmRegion(path, handle.size, _map_handle(fd, handle.size, writable,
                                                        f"handle {index} (posix-shm): mmap {path}"))
    finally:
        os.close(fd)
