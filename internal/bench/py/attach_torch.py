"""wcache-bench helper: a fresh Python process attaches to the daemon of a
device with the wcache Python client and gets zero-copy torch tensors.

Usage: python3 attach_torch.py CHECKPOINT_DIR DEVICE_UUID DEVICE_CAPABILITY
Prints one JSON object: work_ns (from the start of the work, after the
imports an engine has done anyway, until every tensor is a torch tensor),
its steps (digest, attach, map), tensors, bytes, versions. The config is
built the way an engine does: checkpoint_digest(dir) over the headers.
"""

import json
import sys
import time

import torch

import wcache


def main():
    directory, uuid, capability = sys.argv[1:4]
    start = time.perf_counter_ns()
    config = wcache.CacheConfig(model=directory, checkpoint_digest=wcache.checkpoint_digest(directory),
                                device_capability=capability)
    digested = time.perf_counter_ns()
    attachment = wcache.attach(config, device_uuid=uuid, library="torch", client_name="wcache-bench helper")
    attached = time.perf_counter_ns()
    tensors = attachment.tensors()
    end = time.perf_counter_ns()
    work = end - start
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    count = len(tensors)
    del tensors
    attachment.release()
    print(json.dumps({
        "work_ns": work, "tensors": count, "bytes": total,
        "steps": {"digest": digested - start, "attach": attached - digested, "map": end - attached},
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__},
    }))


if __name__ == "__main__":
    main()
