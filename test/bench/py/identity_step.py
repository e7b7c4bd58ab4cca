"""wcache-bench helper: a fresh Python process does an engine's identity
step for a checkpoint that the daemon of a device loaded: wcache.status (the
daemon's record of every file) and wcache.content.identities_match (one stat
per file). Then, apart, the header digest (wcache.checkpoint_digest) that a
match makes unnecessary, for comparison.

Usage: python3 identity_step.py CHECKPOINT_DIR DEVICE_UUID
Prints one JSON object: work_ns (status + identities_match, after the
imports), its steps (status, match) and header_digest_ns, tensors and bytes
(the daemon's), versions. Exits non-zero when the files are not the
daemon's.
"""

import glob
import json
import os
import sys
import time

import wcache


def main():
    directory, uuid = sys.argv[1:3]
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    start = time.perf_counter_ns()
    status = wcache.status(device_uuid=uuid)
    got = time.perf_counter_ns()
    matched = wcache.content.identities_match(wcache.content.files_from_proto(status.files), files)
    end = time.perf_counter_ns()
    if not matched:
        sys.exit(f"identity step: the files of {directory} are not the files the daemon loaded")
    wcache.checkpoint_digest(directory)
    digested = time.perf_counter_ns()
    print(json.dumps({
        "work_ns": end - start, "tensors": status.tensors, "bytes": status.bytes,
        "steps": {"status": got - start, "match": end - got, "header_digest": digested - end},
        "versions": {"python": sys.version.split()[0]},
    }))


if __name__ == "__main__":
    main()
