#!/usr/bin/env python3
"""Write a one-tensor safetensors checkpoint of --bytes as a sparse file (the
data is a hole: on tmpfs it reads as zeros without using memory), for the
GPU check's single large arena. Prints a JSON summary.

    sparse_checkpoint.py --dir DIR --bytes 100GiB
"""

import argparse
import json
import os
import sys

from gen_checkpoint import parse_size


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--bytes", type=parse_size, default=100 << 30)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    header = json.dumps({"big.weight": {"dtype": "U8", "shape": [args.bytes], "data_offsets": [0, args.bytes]}}).encode()
    header += b" " * (-(8 + len(header)) % 4096)
    path = os.path.join(args.dir, "model.safetensors")
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + args.bytes)
    json.dump({"files": [path], "tensors": 1, "bytes": args.bytes, "sparse": True}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
