#!/usr/bin/env python3
"""Measure the plain pinned host-to-device copy peak on one GPU.

    h2d_peak.py [--gpu-id 0] [--bytes 1073741824] [--chunk 67108864] [--repeat 5]

One pinned host buffer, one device buffer, one copy at a time timed with CUDA
events, after two warm-up copies; with PyTorch also the same bytes as --chunk
sized copies queued back to back on one stream ("pinned_chunks"), the shape
of a staged fill. Uses PyTorch, else CuPy. Prints JSON:
best and mean GB/s (1e9 bytes per second) for pinned and pageable sources.
"""

import argparse
import json
import sys
import time


def with_torch(gpu, n, repeat, chunk=64 << 20):
    import torch  # noqa: PLC0415
    dev = torch.device("cuda", gpu)
    dst = torch.empty(n, dtype=torch.uint8, device=dev)
    out = {"library": f"torch {torch.__version__}", "device": torch.cuda.get_device_name(dev)}
    for kind, src in (("pinned", torch.empty(n, dtype=torch.uint8).pin_memory()),
                      ("pageable", torch.empty(n, dtype=torch.uint8))):
        src.fill_(7)
        stream = torch.cuda.Stream(device=dev)
        times = []
        with torch.cuda.stream(stream):
            for i in range(repeat + 2):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(stream)
                dst.copy_(src, non_blocking=True)
                end.record(stream)
                end.synchronize()
                if i >= 2:
                    times.append(start.elapsed_time(end) / 1e3)
        out[kind] = {"best_gb_per_s": n / min(times) / 1e9, "mean_gb_per_s": n * len(times) / sum(times) / 1e9}
        if kind == "pinned" and chunk:
            times = []
            with torch.cuda.stream(stream):
                for i in range(repeat + 1):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record(stream)
                    for off in range(0, n, chunk):
                        dst[off:off + chunk].copy_(src[off:off + chunk], non_blocking=True)
                    end.record(stream)
                    end.synchronize()
                    if i >= 1:
                        times.append(start.elapsed_time(end) / 1e3)
            out["pinned_chunks"] = {"chunk_bytes": chunk, "best_gb_per_s": n / min(times) / 1e9,
                                    "mean_gb_per_s": n * len(times) / sum(times) / 1e9}
        del src
    return out


def with_cupy(gpu, n, repeat, chunk=0):
    import cupy  # noqa: PLC0415
    import numpy  # noqa: PLC0415
    with cupy.cuda.Device(gpu):
        dst = cupy.empty(n, dtype=cupy.uint8)
        mem = cupy.cuda.alloc_pinned_memory(n)
        pinned = numpy.frombuffer(mem, dtype=numpy.uint8, count=n)
        out = {"library": f"cupy {cupy.__version__}"}
        for kind, src in (("pinned", pinned), ("pageable", numpy.ones(n, dtype=numpy.uint8))):
            stream = cupy.cuda.Stream(non_blocking=True)
            times = []
            for i in range(repeat + 2):
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                dst.set(src, stream=stream)
                end.record(stream)
                end.synchronize()
                if i >= 2:
                    times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
            out[kind] = {"best_gb_per_s": n / min(times) / 1e9, "mean_gb_per_s": n * len(times) / sum(times) / 1e9}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu-id", type=int, default=0)
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--chunk", type=int, default=64 << 20)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    t0 = time.monotonic()
    errors = []
    for fn in (with_torch, with_cupy):
        try:
            out = fn(args.gpu_id, args.bytes, args.repeat, args.chunk)
            out.update(ok=True, bytes=args.bytes, seconds=time.monotonic() - t0)
            json.dump(out, sys.stdout)
            print()
            return 0
        except Exception as exc:  # noqa: BLE001 - report and try the next library
            errors.append(f"{fn.__name__}: {type(exc).__name__}: {exc}")
    json.dump({"ok": False, "errors": errors}, sys.stdout)
    print()
    return 1


if __name__ == "__main__":
    sys.exit(main())
