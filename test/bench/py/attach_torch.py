"""wcache-bench helper: a fresh Python process attaches to the daemon of a
device with the wcache Python client and gets zero-copy torch tensors.

Usage: python3 attach_torch.py [--header-digest] CHECKPOINT_DIR DEVICE_UUID DEVICE_CAPABILITY [PROFILE_OUT [ROUNDS]]
Prints one JSON object: work_ns (from the start of the work, after the
imports an engine has done anyway, until every tensor is a torch tensor),
its steps (config, attach, map), tensors, bytes, versions. The config is
built as the README's snippet does: wcache.served_checkpoint_digest
(the daemon's digest for its own files: one status call, one stat per file).
--header-digest: afterwards, outside work, the step "digest" times
checkpoint_digest(dir) over the headers, which that replaces.

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


def attach_once(directory, uuid, capability, header_digest=False):
    start = time.perf_counter_ns()
    config = wcache.CacheConfig(model=directory, device_capability=capability,
                                checkpoint_digest=wcache.served_checkpoint_digest(directory, device_uuid=uuid))
    digested = time.perf_counter_ns()
    attachment = wcache.attach(config, device_uuid=uuid, library="torch", client_name="wcache-bench helper")
    attached = time.perf_counter_ns()
    tensors = attachment.tensors()
    end = time.perf_counter_ns()
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    count = len(tensors)
    del tensors
    attachment.release()
    steps = {"config": digested - start, "attach": attached - digested, "map": end - attached}
    if header_digest:
        begin = time.perf_counter_ns()
        wcache.checkpoint_digest(directory)
        steps["digest"] = time.perf_counter_ns() - begin
    return {"work_ns": end - start, "tensors": count, "bytes": total, "steps": steps}


def profile(directory, uuid, capability, out, rounds):
    profiler = cProfile.Profile()
    result = None
    for _ in range(rounds):
        profiler.enable()
        result = attach_once(directory, uuid, capability)
        profiler.disable()
    text = io.StringIO()
    text.write(f"# {rounds} rounds of served_checkpoint_digest + attach + tensors(), cProfile, by cumulative time\n")
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("cumulative").print_stats(15)
    text.write("# by own time\n")
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime").print_stats(12)
    with open(out, "w") as f:
        f.write(text.getvalue())
    return result


def main():
    args = sys.argv[1:]
    header_digest = "--header-digest" in args
    if header_digest:
        args.remove("--header-digest")
    directory, uuid, capability = args[:3]
    if len(args) > 3:
        rounds = int(args[4]) if len(args) > 4 else 20
        result = profile(directory, uuid, capability, args[3], rounds)
    else:
        result = attach_once(directory, uuid, capability, header_digest)
    result["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
