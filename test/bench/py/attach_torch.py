"""wcache-bench helper: a fresh Python process attaches to the daemon of a
device with the wcache Python client and gets zero-copy torch tensors.

Usage: python3 attach_torch.py CHECKPOINT_DIR DEVICE_UUID DEVICE_CAPABILITY [PROFILE_OUT [ROUNDS]]
Prints one JSON object: work_ns (from the start of the work, after the
imports an engine has done anyway, until every tensor is a torch tensor),
its steps (digest, attach, map), tensors, bytes, versions. The config is
built the way an engine does: checkpoint_digest(dir) over the headers.

With PROFILE_OUT, the work is repeated ROUNDS times (default 20, each
released) under cProfile and the top functions, by cumulative and by own
time, are written to PROFILE_OUT; the printed figures are then those of the
last round, profiler overhead included.
"""

import cProfile
import io
import json
import pstats
import sys
import time

import torch

import wcache


def attach_once(directory, uuid, capability):
    start = time.perf_counter_ns()
    config = wcache.CacheConfig(model=directory, checkpoint_digest=wcache.checkpoint_digest(directory),
                                device_capability=capability)
    digested = time.perf_counter_ns()
    attachment = wcache.attach(config, device_uuid=uuid, library="torch", client_name="wcache-bench helper")
    attached = time.perf_counter_ns()
    tensors = attachment.tensors()
    end = time.perf_counter_ns()
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    count = len(tensors)
    del tensors
    attachment.release()
    return {
        "work_ns": end - start, "tensors": count, "bytes": total,
        "steps": {"digest": digested - start, "attach": attached - digested, "map": end - attached},
    }


def profile(directory, uuid, capability, out, rounds):
    profiler = cProfile.Profile()
    result = None
    for _ in range(rounds):
        profiler.enable()
        result = attach_once(directory, uuid, capability)
        profiler.disable()
    text = io.StringIO()
    text.write(f"# {rounds} rounds of checkpoint_digest + attach + tensors(), cProfile, by cumulative time\n")
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("cumulative").print_stats(15)
    text.write("# by own time\n")
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime").print_stats(12)
    with open(out, "w") as f:
        f.write(text.getvalue())
    return result


def main():
    directory, uuid, capability = sys.argv[1:4]
    if len(sys.argv) > 4:
        rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 20
        result = profile(directory, uuid, capability, sys.argv[4], rounds)
    else:
        result = attach_once(directory, uuid, capability)
    result["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
