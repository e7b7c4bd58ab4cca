#!/usr/bin/env python3
"""Rebuild tensors from wcache cuda-ipc handles in this (separate) process and compare bytes.

Two sources of handles:

    ipc_check.py probe --probe BIN [--gpu-id N] [--via torch|driver] FILE.safetensors...
        starts wcache-cuda-probe (the CUDA backend in-process: it loads the
        files, prints its handle and where each file landed, and holds the
        memory until its stdin closes); needs no grpcio.

    ipc_check.py client --model DIR --socket-template T [--ready-template R] [--gpu-id N]
        attaches to a running `wcache serve --backend cuda` daemon with the wcache
        Python client (clients/python/src, needs grpcio and protobuf) and checks
        the PyTorch tensors it returns. Exit status 3 when the client cannot be
        imported.

--via torch opens the raw 64-byte handle with torch.UntypedStorage._new_shared_cuda
and views every tensor with its dtype and shape; --via driver uses ctypes on
libcuda.so.1 (cuIpcOpenMemHandle_v2) and no PyTorch (this is how the script is
tested on machines without a GPU, against the fake driver).

Prints one JSON object: ok, tensors and bytes compared, timings, errors. Exit
status 0 only when every byte matched.
"""

import argparse
import base64
import ctypes
import json
import os
import struct
import subprocess
import sys
import threading
import time

CHUNK = 256 << 20
NO_REFCOUNT = ("/wcache-gpu-check-no-refcount-" + os.urandom(8).hex()).encode()
TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I8": "int8",
                "U8": "uint8", "I16": "int16", "I32": "int32", "I64": "int64", "BOOL": "bool"}


def read_header(path):
    """(data_start, {name: (dtype, shape, begin, end)}) of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return 8 + n, {k: (v["dtype"], tuple(v["shape"]), v["data_offsets"][0], v["data_offsets"][1])
                   for k, v in header.items()}


def file_chunks(path, start, length):
    """(offset within the data, bytes) pieces of [start, start+length) of a file."""
    with open(path, "rb") as f:
        f.seek(start)
        done = 0
        while done < length:
            b = f.read(min(CHUNK, length - done))
            if not b:
                raise EOFError(f"{path}: file ends {length - done} bytes early")
            yield done, b
            done += len(b)


def bare_uuid(uuid):
    """The 8-4-4-4-12 form PyTorch prints: the canonical UUID without GPU-/MIG-."""
    return uuid[4:] if uuid[:4] in ("GPU-", "MIG-") else uuid


# --------------------------------------------------------------------------- torch

def torch_device_for(torch, uuid, fallback, result):
    want = bare_uuid(uuid).lower()
    seen = []
    for i in range(torch.cuda.device_count()):
        got = str(torch.cuda.get_device_properties(i).uuid).lower()
        seen.append(got)
        if got == want:
            return i
    result["errors"].append(f"no PyTorch device has UUID {uuid} (PyTorch sees {seen}); using cuda:{fallback}")
    return fallback


def torch_upload(torch, dev, path, start, length):
    """The bytes [start, start+length) of a file, on the device."""
    out = torch.empty(length, dtype=torch.uint8, device=dev)
    for off, b in file_chunks(path, start, length):
        out[off:off + len(b)].copy_(torch.frombuffer(bytearray(b), dtype=torch.uint8))
    return out


def check_views_torch(torch, result, name, t, want_dtype, shape, expected):
    """t must have the checkpoint's dtype and shape and expected's bytes."""
    tname = TORCH_DTYPES.get(want_dtype)
    if tname is not None and t.dtype != getattr(torch, tname):
        result["errors"].append(f"{name}: dtype {t.dtype}, checkpoint says {want_dtype}")
    if tuple(t.shape) != tuple(shape):
        result["errors"].append(f"{name}: shape {tuple(t.shape)}, checkpoint says {shape}")
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else t.new_empty(0, dtype=torch.uint8)
    if not torch.equal(raw, expected):
        result["errors"].append(f"{name}: bytes differ from the file")
        return
    result["tensors"] += 1
    result["bytes"] += expected.numel()


def typed_view(torch, whole, offset, dtype, shape, length):
    raw = whole[offset:offset + length]
    tname = TORCH_DTYPES.get(dtype)
    if tname is None or length == 0:
        return raw
    return raw.view(getattr(torch, tname)).view(shape)


def probe_via_torch(rep, result):
    import torch  # noqa: PLC0415
    dev = torch_device_for(torch, rep["device_uuid"], rep["gpu_id"], result)
    torch.cuda.set_device(dev)
    handle = base64.b64decode(rep["handle"])
    t0 = time.monotonic()
    storage = torch.UntypedStorage._new_shared_cuda(dev, handle, rep["size"], 0, NO_REFCOUNT, 0, bytes(64), False)
    whole = torch.empty(0, dtype=torch.uint8, device=f"cuda:{dev}")
    whole.set_(storage, 0, (rep["size"],))
    torch.cuda.synchronize(dev)
    result["open_ms"] = (time.monotonic() - t0) * 1e3
    for f in rep["files"]:
        data = torch_upload(torch, f"cuda:{dev}", f["path"], f["data_start"], f["length"])
        _, tensors = read_header(f["path"])
        for name, (dt, shape, b, e) in tensors.items():
            t = typed_view(torch, whole, f["dest_offset"] + b, dt, shape, e - b)
            check_views_torch(torch, result, name, t, dt, shape, data[b:e])
        del data
    del whole, storage
    torch.cuda.synchronize(dev)


# -------------------------------------------------------------------------- driver

class CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


class Driver:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), CUipcMemHandle, ctypes.c_uint]
        self.lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
        self.call("cuInit", 0)

    def call(self, name, *args):
        r = getattr(self.lib, name)(*args)
        if r != 0:
            s = ctypes.c_char_p()
            self.lib.cuGetErrorName(r, ctypes.byref(s))
            raise RuntimeError(f"{name}: {s.value.decode() if s.value else r}")

    def ordinal_for(self, uuid):
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        want = bare_uuid(uuid).replace("-", "").lower()
        for i in range(n.value):
            u = CUuuid()
            self.call("cuDeviceGetUuid_v2", ctypes.byref(u), i)
            if bytes(u.bytes).hex() == want:
                return i
        return None


def probe_via_driver(rep, result, library):
    drv = Driver(library)
    ordinal = drv.ordinal_for(rep["device_uuid"])
    if ordinal is None:
        result["errors"].append(f"no CUDA device with UUID {rep['device_uuid']}; using ordinal {rep['gpu_id']}")
        ordinal = rep["gpu_id"]
    dev = ctypes.c_int()
    drv.call("cuDeviceGet", ctypes.byref(dev), ordinal)
    ctx = ctypes.c_void_p()
    drv.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    drv.call("cuCtxSetCurrent", ctx)
    h = CUipcMemHandle()
    ctypes.memmove(ctypes.addressof(h), base64.b64decode(rep["handle"]), 64)
    ptr = ctypes.c_uint64()
    t0 = time.monotonic()
    drv.call("cuIpcOpenMemHandle_v2", ctypes.byref(ptr), h, 1)
    result["open_ms"] = (time.monotonic() - t0) * 1e3
    try:
        for f in rep["files"]:
            _, tensors = read_header(f["path"])
            data = bytearray(f["length"])
            buf = (ctypes.c_char * f["length"]).from_buffer(data) if f["length"] else None
            if buf is not None:
                drv.call("cuMemcpyDtoH_v2", buf, ptr.value + f["dest_offset"], f["length"])
            mv = memoryview(data)
            for off, b in file_chunks(f["path"], f["data_start"], f["length"]):
                if mv[off:off + len(b)] != b:
                    result["errors"].append(f"{f['path']}: bytes differ in [{off}, +{len(b)}) of the data")
            for name, (_, _, b, e) in tensors.items():
                result["tensors"] += 1
                result["bytes"] += e - b
            del mv, buf
    finally:
        drv.call("cuIpcCloseMemHandle", ptr.value)
        drv.call("cuDevicePrimaryCtxRelease_v2", dev)


def run_probe(args, result):
    cmd = [args.probe, f"--gpu-id={args.gpu_id}", *args.files]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    timer = threading.Timer(args.timeout, p.kill)
    timer.start()
    try:
        line = p.stdout.readline()
        if not line:
            p.wait()
            raise RuntimeError(f"{args.probe} exited with status {p.returncode} before printing its report")
        rep = json.loads(line)
        result["probe"] = {k: rep[k] for k in ("device_uuid", "size", "bytes", "load_seconds", "gb_per_second")}
        t0 = time.monotonic()
        if args.via == "torch":
            probe_via_torch(rep, result)
        else:
            probe_via_driver(rep, result, args.cuda_library)
        result["verify_s"] = time.monotonic() - t0
    finally:
        p.stdin.close()
        status = p.wait()
        timer.cancel()
        if status != 0:
            result["errors"].append(f"{args.probe} exited with status {status}")


# -------------------------------------------------------------------------- client

def run_client(args, result):
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "src")
    sys.path.insert(0, os.path.normpath(src))
    try:
        import torch  # noqa: PLC0415
        import wcache  # noqa: PLC0415
        from wcache.checkpoint import checkpoint_files  # noqa: PLC0415
    except ImportError as exc:
        result["unavailable"] = f"the wcache Python client cannot be imported: {exc}"
        return 3
    env = {"WCACHE_SOCKET_TEMPLATE": args.socket_template}
    if args.ready_template:
        env["WCACHE_READY_TEMPLATE"] = args.ready_template
    model = os.path.abspath(args.model)
    cfg = wcache.CacheConfig(model=model, checkpoint_digest=wcache.checkpoint_digest(model),
                             device_capability=wcache.device_capability(args.gpu_id))
    torch.cuda.set_device(args.gpu_id)
    t0 = time.monotonic()
    lease = wcache.attach(cfg, device_index=args.gpu_id, getenv=env, library="torch",
                          client_name=f"gpu-check (pid {os.getpid()})")
    t1 = time.monotonic()
    try:
        tensors = lease.tensors()
        torch.cuda.synchronize()
        t2 = time.monotonic()
        result["attach_ms"], result["open_ms"] = (t1 - t0) * 1e3, (t2 - t1) * 1e3
        files, _ = checkpoint_files(model)
        for path in files:
            start, header = read_header(path)
            length = max((e for _, _, _, e in header.values()), default=0)
            data = torch_upload(torch, f"cuda:{args.gpu_id}", path, start, length)
            for name, (dt, shape, b, e) in header.items():
                if name not in tensors:
                    result["errors"].append(f"{name}: missing from the daemon's manifest")
                    continue
                check_views_torch(torch, result, name, tensors[name], dt, shape, data[b:e])
            del data
        result["verify_s"] = time.monotonic() - t2
        del tensors
        torch.cuda.synchronize()
    finally:
        lease.release()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--probe", required=True, help="path of wcache-cuda-probe")
    p.add_argument("--gpu-id", type=int, default=0)
    p.add_argument("--via", choices=("torch", "driver"), default="torch")
    p.add_argument("--cuda-library", default=os.environ.get("WCACHE_CUDA_LIBRARY", "libcuda.so.1"))
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("files", nargs="+")
    c = sub.add_parser("client")
    c.add_argument("--model", required=True)
    c.add_argument("--socket-template", required=True)
    c.add_argument("--ready-template", default="")
    c.add_argument("--gpu-id", type=int, default=0)
    args = ap.parse_args()

    result = {"mode": args.mode, "via": getattr(args, "via", "torch"), "ok": False, "tensors": 0, "bytes": 0,
              "errors": []}
    code = 1
    try:
        if args.mode == "probe":
            run_probe(args, result)
            code = 0
        else:
            code = run_client(args, result)
    except Exception as exc:  # noqa: BLE001 - every failure goes into the report
        result["errors"].append(f"{type(exc).__name__}: {exc}")
        code = 1
    if code == 0 and (result["errors"] or result["tensors"] == 0):
        code = 1
    result["ok"] = code == 0
    json.dump(result, sys.stdout)
    print()
    return code


if __name__ == "__main__":
    sys.exit(main())
