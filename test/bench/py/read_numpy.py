"""wcache-bench helper: a fresh Python process reads every tensor of a
safetensors checkpoint into numpy arrays, the way a loader does.

Usage: python3 read_numpy.py CHECKPOINT_DIR
Prints one JSON object: work_ns (from the start of the work, after the
imports, until every tensor is an array), its steps (headers, read),
tensors, bytes, versions.
BF16 has no numpy dtype: such tensors are uint16 arrays of the same bytes.
"""

import glob
import json
import os
import struct
import sys
import time

import numpy as np

DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
    "F16": np.float16, "BF16": np.uint16, "U32": np.uint32, "I32": np.int32, "F32": np.float32,
    "U64": np.uint64, "I64": np.int64, "F64": np.float64,
}


def shard_files(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, "rb") as f:
            weight_map = json.load(f)["weight_map"]
        return [os.path.join(directory, name) for name in sorted(set(weight_map.values()))]
    return sorted(glob.glob(os.path.join(directory, "*.safetensors")))


def read_exact(f, view):
    while len(view):
        n = f.readinto(view)
        if not n:
            raise EOFError(f"{f.name}: file shorter than its header says")
        view = view[n:]


def main():
    directory = sys.argv[1]
    start = time.perf_counter_ns()
    tensors = {}
    total = 0
    headers_ns = 0
    for path in shard_files(directory):
        with open(path, "rb", buffering=0) as f:
            h0 = time.perf_counter_ns()
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            header.pop("__metadata__", None)
            headers_ns += time.perf_counter_ns() - h0
            base = 8 + n
            for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
                begin, end = info["data_offsets"]
                arr = np.empty(end - begin, dtype=np.uint8)
                f.seek(base + begin)
                read_exact(f, memoryview(arr))
                tensors[name] = arr.view(DTYPES[info["dtype"]]).reshape(info["shape"])
                total += end - begin
    work = time.perf_counter_ns() - start
    print(json.dumps({
        "work_ns": work, "tensors": len(tensors), "bytes": total,
        "steps": {"headers": headers_ns, "read": work - headers_ns},
        "versions": {"python": sys.version.split()[0], "numpy": np.__version__},
    }))


if __name__ == "__main__":
    main()
