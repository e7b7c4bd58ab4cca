"""wcache._populate: the host regions' pages are mapped ahead of the reader (sync, async) or left
to their first read (off), without a byte copied; $WCACHE_POPULATE picks the mode."""

from __future__ import annotations

import os

import pytest

from wcache import _populate as populate, _shm as shm

SIZE = 8 << 20


def rss_of(address: int) -> int:
    """Rss in bytes of this process's mapping starting at address (/proc/self/smaps)."""
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as f:
        inside = False
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) == address
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping at {address:#x}")


@pytest.fixture
def region():
    fd = os.memfd_create("wcache-populate-test", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, SIZE)
        os.pwrite(fd, bytes(range(256)) * (SIZE // 256), 0)
        yield shm.ShmRegion("memfd:test", SIZE, shm._map_view(fd, SIZE))
    finally:
        os.close(fd)


def kernel_populates(address: int) -> bool:
    return populate.populate_range(address, 4096) == 0


@pytest.mark.parametrize("mode", [populate.POPULATE_SYNC, populate.POPULATE_ASYNC])
def test_every_page_mapped_without_a_read(region, mode):
    if not kernel_populates(region.address):
        pytest.skip("this kernel has no MADV_POPULATE_READ (Linux 5.14)")
    p = populate.Populator([region], mode).start()
    assert p.wait(timeout=60)
    assert p.errors == []
    assert (p.thread is not None) == (mode == populate.POPULATE_ASYNC)
    assert rss_of(region.address) == SIZE
    # Mapped read-only shared: the bytes are the memfd's, and a write still copies only its page.
    region.buffer[0:1] = b"\xff"
    assert region.buffer[1:4] == bytes([1, 2, 3])


def test_off_leaves_the_pages_to_the_reader(region):
    p = populate.Populator([region], populate.POPULATE_OFF).start()
    assert p.thread is None and p.wait()
    assert rss_of(region.address) == 0
    assert region.buffer[SIZE - 1] == 255
    assert 0 < rss_of(region.address) < SIZE


def test_mode_from_env():
    assert populate.mode_from_env({}) == populate.POPULATE_OFF
    assert populate.mode_from_env({"WCACHE_POPULATE": "async"}) == populate.POPULATE_ASYNC
    assert populate.mode_from_env({"WCACHE_POPULATE": " SYNC "}) == populate.POPULATE_SYNC
    assert populate.mode_from_env({"WCACHE_POPULATE": "off"}) == populate.POPULATE_OFF
    with pytest.raises(ValueError, match="WCACHE_POPULATE"):
        populate.mode_from_env({"WCACHE_POPULATE": "eager"})
    with pytest.raises(ValueError):
        populate.Populator([], "eager")


def test_a_failing_populate_is_recorded_not_raised():
    class Unmapped:  # an address nothing is mapped at: madvise fails with ENOMEM
        buffer, address, size = b"x", 4096, 4096

    p = populate.Populator([Unmapped()], populate.POPULATE_SYNC).start()
    assert len(p.errors) == 1 and p.errors[0] in (12, 22)  # ENOMEM, or EINVAL on a kernel without it
