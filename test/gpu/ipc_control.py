#!/usr/bin/env python3
"""CUDA IPC control without wcache: tells "this machine has no CUDA IPC" apart
from a wcache bug. Prints JSON {"torch_multiprocessing": {...}, "ctypes": {...}, "ok"}.

    ipc_control.py [--gpu-id 0] [--library libcuda.so.1]

* torch_multiprocessing: a CUDA tensor sent to a spawned process through a
  torch.multiprocessing queue; the child checks its bytes and writes one, which
  the parent must see (the same memory, not a copy).
* ctypes: cuMemAlloc_v2 + cuIpcGetMemHandle in this process, cuIpcOpenMemHandle_v2
  + cuMemcpyDtoH_v2 in a fresh python process, raw driver calls only.
Exit status 0 when both worked, 1 when one failed, 2 without a GPU.
"""

import argparse
import ctypes
import json
import subprocess
import sys
import time


def _child_torch(q_in, q_out):
    import torch  # noqa: PLC0415
    t = q_in.get()
    ok = bool((t[:1024] == 7).all().item())
    t[0] = 9
    torch.cuda.synchronize()
    q_out.put({"child_saw_bytes": ok, "child_device": str(t.device)})
    q_in.get()  # keep the mapping until the parent has looked


def torch_control(gpu):
    try:
        import torch  # noqa: PLC0415
        import torch.multiprocessing as mp  # noqa: PLC0415
    except ImportError as exc:
        return {"ok": False, "unavailable": f"no torch: {exc}"}
    if not torch.cuda.is_available():
        return {"ok": False, "no_gpu": "torch.cuda.is_available() is False"}
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    t = torch.full((64 << 20,), 7, dtype=torch.uint8, device=f"cuda:{gpu}")
    torch.cuda.synchronize()
    p = ctx.Process(target=_child_torch, args=(q_in, q_out))
    t0 = time.monotonic()
    p.start()
    try:
        q_in.put(t)
        res = q_out.get(timeout=60)
        torch.cuda.synchronize()
        res["parent_sees_child_write"] = int(t[0].item()) == 9
        res["seconds"] = time.monotonic() - t0
        q_in.put(None)
    except Exception as exc:  # noqa: BLE001 - report whatever the sandbox does
        res = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        p.join(20)
        if p.is_alive():
            p.kill()
    res["ok"] = bool(res.get("child_saw_bytes") and res.get("parent_sees_child_write"))
    return res


class Drv:
    def __init__(self, lib):
        self.lib = ctypes.CDLL(lib)

    def __call__(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name}: CUresult {rc}")


CHILD = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1]); gpu = int(sys.argv[2]); raw = bytes.fromhex(sys.argv[3])
def c(n, *a):
    rc = getattr(lib, n)(*a)
    if rc: print(f"{n}: CUresult {rc}"); sys.exit(1)
class H(ctypes.Structure): _fields_ = [("r", ctypes.c_char * 64)]
c("cuInit", 0); dev = ctypes.c_int(); c("cuDeviceGet", ctypes.byref(dev), gpu)
ctx = ctypes.c_void_p(); c("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
c("cuCtxSetCurrent", ctx)
p = ctypes.c_uint64(); lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), H, ctypes.c_uint]
c("cuIpcOpenMemHandle_v2", ctypes.byref(p), H.from_buffer_copy(raw), 1)
buf = (ctypes.c_ubyte * 4096)()
lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
c("cuMemcpyDtoH_v2", buf, p.value, 4096)
lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
c("cuIpcCloseMemHandle", p.value)
print("ok" if all(b == 0x5a for b in buf) else "bytes differ")
"""


def ctypes_control(gpu, library):
    try:
        d = Drv(library)
        d("cuInit", 0)
        dev = ctypes.c_int()
        d("cuDeviceGet", ctypes.byref(dev), gpu)
        ctx = ctypes.c_void_p()
        d("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        d("cuCtxSetCurrent", ctx)
        ptr = ctypes.c_uint64()
        d("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(64 << 20))
        d.lib.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
        d("cuMemsetD8_v2", ptr.value, 0x5A, 64 << 20)
        d("cuCtxSynchronize")
        h = (ctypes.c_char * 64)()
        d.lib.cuIpcGetMemHandle.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        d("cuIpcGetMemHandle", h, ptr.value)
    except (OSError, RuntimeError, AttributeError) as exc:
        return {"ok": False, "error": str(exc)}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", CHILD, library, str(gpu), bytes(h).hex()],
                         capture_output=True, text=True, timeout=60)
    res = {"child": (out.stdout + out.stderr).strip(), "seconds": time.monotonic() - t0}
    res["ok"] = out.returncode == 0 and res["child"] == "ok"
    d.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    d("cuMemFree_v2", ptr.value)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpu-id", type=int, default=0)
    ap.add_argument("--library", default="libcuda.so.1")
    args = ap.parse_args()
    try:
        ctypes.CDLL(args.library)
    except OSError as exc:
        json.dump({"ok": False, "no_gpu": f"cannot load {args.library}: {exc}"}, sys.stdout)
        print()
        return 2
    res = {"ctypes": ctypes_control(args.gpu_id, args.library), "torch_multiprocessing": torch_control(args.gpu_id)}
    res["ok"] = res["ctypes"]["ok"] and res["torch_multiprocessing"]["ok"]
    json.dump(res, sys.stdout, indent=2)
    print()
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
