"""Populate attached host memory ahead of the reader.

A fresh mapping of the daemon's memory has no page-table entries: the first
read of every page takes a page fault. The kernel maps up to 16 neighbouring
pages per fault ("fault-around") where it can, but pages of a daemon that has
served for a while (memory aging, DAMON, reclaim passes over shared memory)
fault a page or two at a time (589,000 faults for 4 GiB), and each
fault costs a trap into the kernel and back.
``madvise(MADV_POPULATE_READ)`` (Linux 5.14) maps every page of a range in one
call, read-only and shared: nothing is copied (a later write through a
copy-on-write mapping still copies only the page written), no page is
allocated, and the pages a reader touches afterwards are already mapped.

Modes (``WCACHE_POPULATE``; default ``off``, chosen by measurement: see
docs/python-client.md, "Populating host memory"):

- ``sync``: populate every host region before ``tensors()`` returns: the
  choice of a caller that reads every weight (an engine's first forward
  pass). On this project's 2-core VM (make bench ``hostread``, 1 GiB),
  attach + tensors() + a read of every page took 0.90× the time without
  populate (load 14–16; 0.71× at load 4–5), and a caller that reads one
  tensor 6–8× as long.
- ``async``: one daemon thread per ``tensors()`` call populates the host
  regions while the caller goes on (ctypes drops the GIL for the call), from
  the last ``CHUNK_BYTES`` of the last region backwards: a reader that walks
  the weights in order meets the thread halfway instead of faulting the same
  pages beside it. An attach is not slowed; a caller that reads only part of
  the weights reads them at once, and the rest is populated on another core.
  The thread holds a reference to each mapping until its calls return. On
  the 2-core VM a full read took 1.3–1.8× as long as without: the thread's
  work competed with the reader's; a machine with idle cores may differ
  (not measured).
- ``off`` (default): leave every page to its first read.

A kernel without ``MADV_POPULATE_READ`` (EINVAL) or a failing call is not an
error: the pages are then faulted in by the reader, as without populate.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from typing import Iterable, List, Mapping, Optional, Sequence

log = logging.getLogger("wcache")

MADV_POPULATE_READ = 22
# One madvise call of an async run covers at most this many bytes.
CHUNK_BYTES = 64 << 20

POPULATE_ASYNC = "async"
POPULATE_SYNC = "sync"
POPULATE_OFF = "off"
MODES = (POPULATE_ASYNC, POPULATE_SYNC, POPULATE_OFF)
ENV = "WCACHE_POPULATE"


def mode_from_env(env: Optional[Mapping[str, str]] = None) -> str:
    """The populate mode $WCACHE_POPULATE names (default off); ValueError for another value."""
    raw = (os.environ if env is None else env).get(ENV, "")
    mode = raw.strip().lower() or POPULATE_OFF
    if mode not in MODES:
        raise ValueError(f"{ENV}={raw!r}: want one of {', '.join(MODES)}")
    return mode


def _libc_madvise():
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def populate_range(address: int, size: int) -> int:
    """madvise(address, size, MADV_POPULATE_READ); 0 or the errno it failed with (EINVAL: the kernel lacks it)."""
    if size <= 0:
        return 0
    madvise = _libc_madvise()
    if madvise(address, size, MADV_POPULATE_READ) != 0:
        return ctypes.get_errno()
    return 0


class Populator:
    """Populates host regions (objects with ``buffer``, ``address`` and ``size``, e.g.
    wcache.shm.ShmRegion) per mode; ``thread`` is the background thread of an async run
    (None otherwise), ``errors`` the errno of each region whose populate failed."""

    def __init__(self, regions: Iterable[object], mode: str = POPULATE_OFF):
        if mode not in MODES:
            raise ValueError(f"populate mode {mode!r}: want one of {', '.join(MODES)}")
        self.mode = mode
        # Each region keeps its mapping (buffer) alive while it is queued.
        self._regions: List[object] = [r for r in regions if getattr(r, "buffer", None) is not None
                                       and getattr(r, "size", 0) > 0]
        self.errors: List[int] = []
        self.thread: Optional[threading.Thread] = None

    def start(self) -> "Populator":
        """Run per the mode: populate now (sync), on a daemon thread (async), or nothing (off)."""
        if self.mode == POPULATE_OFF or not self._regions:
            self._regions = []
            return self
        if self.mode == POPULATE_SYNC:
            self._run()
            return self
        self.thread = threading.Thread(target=self._run, name="wcache-populate", daemon=True)
        self.thread.start()
        return self

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait for an async run; True when nothing is left to populate."""
        if self.thread is not None:
            self.thread.join(timeout)
            return not self.thread.is_alive()
        return True

    def _run(self) -> None:
        regions: Sequence[object] = self._regions
        backwards = self.mode == POPULATE_ASYNC
        try:
            for r in (reversed(regions) if backwards else regions):
                chunks = [(off, min(CHUNK_BYTES, r.size - off)) for off in range(0, r.size, CHUNK_BYTES)]
                for off, n in (reversed(chunks) if backwards else chunks):
                    err = populate_range(r.address + off, n)
                    if err:
                        self.errors.append(err)
                        log.debug("wcache: populating %s failed: %s (its pages fault in on first read)", r,
                                  os.strerror(err))
                        break
        finally:
            self._regions = []
