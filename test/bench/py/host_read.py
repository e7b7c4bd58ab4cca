"""wcache-bench helper: how long until every tensor of an attached checkpoint is readable, against
reading a freshly made mapping of the same size (issue 37, item 3).

Usage: python3 host_read.py MODE CHECKPOINT_DIR DEVICE_UUID DEVICE_CAPABILITY [aged]

MODE "fresh": a new memfd of the checkpoint's size is filled (untimed) and mapped copy-on-write as the
client maps a handle; work is reading one byte of every 4 KiB page of it (the floor).
MODE "off", "async", "sync": WCACHE_POPULATE=MODE; work is wcache.attach + tensors() (step "map"),
then reading one byte of every 4 KiB page of every tensor (step "walk"); "partial" (not in work) is
attach + tensors() + reading the first tensor only, a caller that needs part of the weights.
"aged": before the timed attach, an untimed attach pages the checkpoint's pages out of its mappings
(MADV_PAGEOUT over each host region), as a long-lived daemon's memory aging does; without swap they
stay resident, and whether their first read then costs what the issue measured varies: the aged
rows are a model, not a proof.
Prints one JSON object (work_ns, tensors, bytes, steps).
"""

import ctypes
import mmap
import os
import sys
import time

MODE = sys.argv[1]
if MODE != "fresh":
    os.environ["WCACHE_POPULATE"] = MODE

import json  # noqa: E402

import torch  # noqa: E402

import wcache  # noqa: E402

MADV_PAGEOUT = 21
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def walk_tensor(t):
    flat = t.reshape(-1).view(torch.uint8)
    return int(flat[::4096].sum()) + int(flat[-1])


def age(config, uuid):
    """Page the checkpoint's pages out of every mapping (see the module docstring)."""
    a = wcache.attach(config, device_uuid=uuid, library="torch", client_name="wcache-bench host_read aged")
    a.tensors()
    for r in a.regions:
        if getattr(r, "buffer", None) is None:
            continue
        libc.madvise(r.address, r.size, MADV_PAGEOUT)
    a.release()


def fresh(size):
    fd = os.memfd_create("wcache-bench-fresh", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    chunk = bytes(range(256)) * (64 << 12)  # 64 MiB
    for off in range(0, size, len(chunk)):
        os.pwrite(fd, chunk[:min(len(chunk), size - off)], off)
    mm = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    t = torch.frombuffer(mm, dtype=torch.uint8)
    start = time.perf_counter_ns()
    s = walk_tensor(t)
    end = time.perf_counter_ns()
    return {"work_ns": end - start, "tensors": 1, "bytes": size, "checksum": s & 0xFFFFFFFF,
            "steps": {"walk": end - start}}


def main():
    directory, uuid, capability = sys.argv[2:5]
    aged = len(sys.argv) > 5 and sys.argv[5] == "aged"
    config = wcache.CacheConfig(model=directory, checkpoint_digest=wcache.checkpoint_digest(directory),
                                device_capability=capability)
    if MODE == "fresh":
        a = wcache.attach(config, device_uuid=uuid, library="torch", client_name="wcache-bench host_read")
        size = sum(t.numel() * t.element_size() for t in a.tensors().values())
        a.release()
        print(json.dumps(fresh(size)))
        return
    # A caller that reads one tensor: attach + tensors() + the first tensor's pages.
    start = time.perf_counter_ns()
    a = wcache.attach(config, device_uuid=uuid, library="torch", client_name="wcache-bench host_read")
    tensors = a.tensors()
    walk_tensor(next(iter(tensors.values())))
    partial = time.perf_counter_ns() - start
    del tensors
    a.release()
    if aged:
        age(config, uuid)
    start = time.perf_counter_ns()
    a = wcache.attach(config, device_uuid=uuid, library="torch", client_name="wcache-bench host_read")
    tensors = a.tensors()
    mapped = time.perf_counter_ns()
    s = 0
    total = 0
    for t in tensors.values():
        s += walk_tensor(t)
        total += t.numel() * t.element_size()
    end = time.perf_counter_ns()
    count = len(tensors)
    del tensors
    a.release()
    print(json.dumps({"work_ns": end - start, "tensors": count, "bytes": total, "checksum": s & 0xFFFFFFFF,
                      "steps": {"map": mapped - start, "walk": end - mapped, "partial": partial}}))


if __name__ == "__main__":
    main()
