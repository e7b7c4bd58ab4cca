#!/usr/bin/env python3
"""The Python client's GPU-check steps against a running wcache daemon.

    client_steps.py STEP --model DIR --socket-template T --ready-template T [--gpu-id 0] [...]

Steps (each prints one JSON object; exit 0 pass, 1 fail, 3 unavailable: the
client, torch or grpcio cannot be imported):

  attach-p50      20 attaches (attach + open every handle + release) in one
                  process: p50 and per-handle open time; the first is reported apart
  zero-copy       torch.cuda.mem_get_info barely moves when the handles open; a
                  byte the importer writes is seen by the daemon's backend
                  (`wcache attach --verify`, given as --verify-cmd, must fail),
                  and after restoring it --verify passes again
  two-importers   two processes attach and check bytes at the same time
  reattach        a fresh process with an explicit device index and nothing
                  touching CUDA before wcache.attach
  malloc-async    a fresh process under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  sigkill         an importer holds its tensors; the daemon (--daemon-pid) gets
                  SIGKILL; what the importer sees within 10 s
  big-arena       the largest arena (>= --min-arena bytes) imported in torch;
                  its last byte read and written
  publish         into an empty daemon: wcache.publish of --publish-bytes made on
                  the GPU (a transposed view and two views of one storage
                  included): its rate against a torch device-to-device copy of
                  the same bytes, then attach and compare bytes and layouts
  import-once     (internal) attach, check a few tensors against the files, print JSON
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "clients", "python", "src")))

UNAVAILABLE = 3


def imports():
    import torch  # noqa: PLC0415
    import wcache  # noqa: PLC0415
    return torch, wcache


def attach(args, wcache, library="torch"):
    env = {"WCACHE_SOCKET_TEMPLATE": args.socket_template, "WCACHE_READY_TEMPLATE": args.ready_template}
    model = os.path.abspath(args.model)
    cfg = wcache.CacheConfig(model=model, checkpoint_digest=wcache.checkpoint_digest(model),
                             device_capability=wcache.device_capability(args.gpu_id))
    return wcache.attach(cfg, device_index=args.gpu_id, getenv=env, library=library,
                         client_name=f"gpu-check {args.step} (pid {os.getpid()})")


def check_some(torch, tensors, model, res, limit=4):
    """Compare up to limit tensors per file with the checkpoint's bytes."""
    from ipc_check import read_header  # noqa: PLC0415
    from wcache.checkpoint import checkpoint_files  # noqa: PLC0415
    files, _ = checkpoint_files(model)
    for path in files:
        start, header = read_header(path)
        for name, (_, _, b, e) in list(header.items())[:limit]:
            with open(path, "rb") as f:
                f.seek(start + b)
                want = torch.frombuffer(bytearray(f.read(e - b)), dtype=torch.uint8)
            t = tensors[name]
            got = t.reshape(-1).view(torch.uint8).cpu() if t.numel() else want[:0]
            if not torch.equal(got, want):
                res["errors"].append(f"{name}: bytes differ from the file")
            res["checked"] += 1


def p50(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def step_attach_p50(args, torch, wcache, res):
    torch.cuda.init()
    runs = []
    for _ in range(args.n + 1):
        t0 = time.monotonic()
        lease = attach(args, wcache)
        t1 = time.monotonic()
        tensors = lease.tensors()
        torch.cuda.synchronize()
        t2 = time.monotonic()
        n = len(lease.regions)
        del tensors
        lease.release()
        runs.append({"attach_ms": (t1 - t0) * 1e3, "open_ms": (t2 - t1) * 1e3, "handles": n,
                     "arena_bytes": sum(h.size for h in lease.manifest.handles)})
    res["first"], rest = runs[0], runs[1:]
    res["runs"] = rest
    res["attach_ms_p50"] = p50([r["attach_ms"] for r in rest])
    res["open_ms_p50"] = p50([r["open_ms"] for r in rest])
    res["total_ms_p50"] = p50([r["attach_ms"] + r["open_ms"] for r in rest])
    res["per_handle_open_ms_p50"] = p50([r["open_ms"] / max(r["handles"], 1) for r in rest])
    res["arena_bytes"] = rest[0]["arena_bytes"] if rest else None
    return 0


def verified(run):
    """Whether a `wcache attach --json --verify` run reported every tensor equal to the file."""
    if run.returncode != 0:
        return False
    try:
        return bool(json.loads(run.stdout).get("verified"))
    except ValueError:
        return False


def step_zero_copy(args, torch, wcache, res):
    torch.cuda.init()
    torch.cuda.set_device(args.gpu_id)
    torch.empty(1, device=f"cuda:{args.gpu_id}")  # the context exists before the first reading
    free0, _ = torch.cuda.mem_get_info(args.gpu_id)
    lease = attach(args, wcache)
    try:
        tensors = lease.tensors()
        torch.cuda.synchronize()
        free1, _ = torch.cuda.mem_get_info(args.gpu_id)
        arena = sum(h.size for h in lease.manifest.handles)
        res.update(arena_bytes=arena, free_before=free0, free_after=free1, moved_bytes=free0 - free1)
        res["moved_fraction"] = (free0 - free1) / arena if arena else None
        if res["moved_fraction"] is None or res["moved_fraction"] > 0.02:
            res["errors"].append("opening the handles used device memory: not zero-copy")
        name = max(tensors, key=lambda k: tensors[k].numel())
        raw = tensors[name].reshape(-1).view(torch.uint8)
        orig = int(raw[0].item())
        raw[0] = orig ^ 0xFF
        torch.cuda.synchronize()
        seen = subprocess.run(args.verify_cmd, shell=True, capture_output=True, text=True, timeout=120)
        res["verify_after_write"] = {"rc": seen.returncode, "verified": verified(seen),
                                     "out": (seen.stdout + seen.stderr)[-2000:]}
        raw[0] = orig
        torch.cuda.synchronize()
        again = subprocess.run(args.verify_cmd, shell=True, capture_output=True, text=True, timeout=120)
        res["verify_after_restore"] = {"rc": again.returncode, "verified": verified(again)}
        res["written_tensor"] = name
        if verified(seen):
            res["errors"].append("the daemon's backend did not see the importer's write")
        if not verified(again):
            res["errors"].append("--verify still fails after the byte was restored")
        del tensors, raw
    finally:
        lease.release()
    return 0


def spawn_import(args, extra_env=None, hold=False):
    cmd = [sys.executable, os.path.abspath(__file__), "import-once", "--model", args.model,
           "--socket-template", args.socket_template, "--ready-template", args.ready_template,
           "--gpu-id", str(args.gpu_id)] + (["--hold"] if hold else [])
    env = dict(os.environ, **(extra_env or {}))
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def collect(p, timeout=150):
    out, err = p.communicate(timeout=timeout)
    try:
        return json.loads(out)
    except ValueError:
        return {"ok": False, "rc": p.returncode, "output": (out + err)[-2000:]}


def step_two_importers(args, torch, wcache, res):
    ps = [spawn_import(args), spawn_import(args)]
    res["importers"] = [collect(p) for p in ps]
    if not all(r.get("ok") for r in res["importers"]):
        res["errors"].append("an importer failed")
    return 0


def step_reattach(args, torch, wcache, res):
    res["importer"] = collect(spawn_import(args))
    if not res["importer"].get("ok"):
        res["errors"].append("the fresh process could not attach")
    return 0


def step_malloc_async(args, torch, wcache, res):
    res["importer"] = r = collect(spawn_import(args, {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}))
    if not r.get("ok"):
        res["errors"].append("attach under cudaMallocAsync failed")
    elif r.get("allocator") != "cudaMallocAsync" or "TorchDriverIpcRegion" not in r.get("regions", []):
        res["errors"].append(f"cudaMallocAsync was not in effect: allocator {r.get('allocator')}, regions {r.get('regions')}")
    return 0


def step_sigkill(args, torch, wcache, res):
    p = spawn_import(args, hold=True)
    line = p.stdout.readline()
    if line.strip() != "holding":
        res["errors"].append(f"importer did not get its tensors: {line!r} {p.stderr.read()[-1000:]}")
        p.kill()
        return 0
    t0 = time.monotonic()
    os.kill(args.daemon_pid, signal.SIGKILL)
    try:
        res["importer"] = collect(p, timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        res["importer"] = {"hung": True}
        res["errors"].append("the importer hung after the daemon was killed")
    res["seconds"] = time.monotonic() - t0
    return 0


def step_big_arena(args, torch, wcache, res):
    torch.cuda.init()
    lease = attach(args, wcache)
    try:
        t0 = time.monotonic()
        tensors = lease.tensors()
        torch.cuda.synchronize()
        res["open_ms"] = (time.monotonic() - t0) * 1e3
        sizes = [h.size for h in lease.manifest.handles]
        res["arena_bytes"] = sizes
        big = max(range(len(sizes)), key=lambda i: sizes[i])
        if sizes[big] < args.min_arena:
            res["errors"].append(f"largest arena {sizes[big]} bytes < {args.min_arena}")
        specs = lease.specs
        last = max((s for s in specs.values() if s.handle_index == big and s.length),
                   key=lambda s: s.offset + s.length)
        raw = tensors[last.name].reshape(-1).view(torch.uint8)
        res["last_byte_offset"] = last.offset + last.length - 1
        v = int(raw[-1].item())
        raw[-1] = v ^ 1
        torch.cuda.synchronize()
        ok = int(raw[-1].item()) == v ^ 1
        raw[-1] = v
        torch.cuda.synchronize()
        if not ok:
            res["errors"].append("the last byte did not take a write")
        del tensors, raw
    finally:
        lease.release()
    return 0


def step_import_once(args, torch, wcache, res):
    # Nothing touches CUDA before attach: the client must do what it needs.
    lease = attach(args, wcache)
    t0 = time.monotonic()
    tensors = lease.tensors()
    torch.cuda.synchronize()
    res["open_ms"] = (time.monotonic() - t0) * 1e3
    res["regions"] = sorted({type(r).__name__ for r in lease.regions})
    res["allocator"] = torch.cuda.get_allocator_backend() if hasattr(torch.cuda, "get_allocator_backend") else None
    check_some(torch, tensors, os.path.abspath(args.model), res)
    if args.hold:
        print("holding", flush=True)
        seen, t0 = [], time.monotonic()
        name = next(iter(tensors))
        while time.monotonic() - t0 < 10:
            try:
                s = float(tensors[name].reshape(-1).view(torch.uint8)[:4096].sum().item())
                torch.cuda.synchronize()
                seen.append({"t": round(time.monotonic() - t0, 2), "read": "ok", "sum": s, "lease_gone": lease.gone.is_set()})
            except Exception as exc:  # noqa: BLE001 - the observation is the point
                seen.append({"t": round(time.monotonic() - t0, 2), "read": f"{type(exc).__name__}: {exc}"[:300]})
                break
            if lease.gone.is_set() and len(seen) > 2:
                break
            time.sleep(0.5)
        res["observed"] = seen
        res["lease_gone"] = lease.gone.is_set()
        res["gone_reason"] = str(getattr(lease, "gone_reason", ""))
    del tensors
    try:
        lease.release()
    except Exception as exc:  # noqa: BLE001
        res["release_error"] = str(exc)[:300]
    return 0


def step_publish(args, torch, wcache, res):
    torch.cuda.init()
    dev = torch.device(f"cuda:{args.gpu_id}")
    env = {"WCACHE_SOCKET_TEMPLATE": args.socket_template, "WCACHE_READY_TEMPLATE": args.ready_template}
    cfg = wcache.CacheConfig(model="gpu-check-publish", engine_name="gpu-check", engine_version="1",
                             device_capability=wcache.device_capability(args.gpu_id))
    n = 8
    per = args.publish_bytes // n
    gen = torch.Generator(device=dev)
    gen.manual_seed(7)
    tensors = {f"w{i}": torch.randint(0, 256, (per,), dtype=torch.uint8, device=dev, generator=gen) for i in range(n)}
    base = torch.arange(64 * 128, dtype=torch.float32, device=dev).reshape(64, 128)
    tensors.update({"transposed": base.T, "q": base[:32], "k": base[32:]})
    # A device-to-device copy of the same bytes: the rate to compare with.
    dst = torch.empty(per, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    for i in range(n):
        dst.copy_(tensors[f"w{i}"])
    torch.cuda.synchronize()
    res["d2d_copy_gb_per_s"] = per * n / (time.monotonic() - t0) / 1e9
    del dst
    filled = {}

    def before_commit():
        torch.cuda.synchronize()
        filled["t"] = time.monotonic()

    t0 = time.monotonic()
    r = wcache.publish(cfg, tensors, device_index=args.gpu_id, getenv=env, before_commit=before_commit,
                       client_name=f"gpu-check publish (pid {os.getpid()})")
    took = time.monotonic() - t0
    res.update(published_bytes=r.bytes, tensors=r.tensors, publish_s=took,
               publish_gb_per_s=r.bytes / took / 1e9, until_commit_gb_per_s=r.bytes / (filled["t"] - t0) / 1e9)
    res["publish_over_d2d"] = res["publish_gb_per_s"] / res["d2d_copy_gb_per_s"]
    lease = wcache.attach(cfg, device_index=args.gpu_id, getenv=env)
    try:
        got = lease.tensors()
        for name, want in tensors.items():
            g = got[name]
            if (tuple(g.shape), g.stride()) != (tuple(want.shape), want.stride()) or not torch.equal(g, want):
                res["errors"].append(f"{name}: attached tensor differs from the published one")
            res["checked"] += 1
        if got["q"].untyped_storage().data_ptr() != got["k"].untyped_storage().data_ptr():
            res["errors"].append("q and k no longer share a storage")
        del got
    finally:
        lease.release()
    return 0


STEPS = {"attach-p50": step_attach_p50, "zero-copy": step_zero_copy, "two-importers": step_two_importers,
         "reattach": step_reattach, "malloc-async": step_malloc_async, "sigkill": step_sigkill,
         "big-arena": step_big_arena, "publish": step_publish, "import-once": step_import_once}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=sorted(STEPS))
    ap.add_argument("--model", required=True)
    ap.add_argument("--socket-template", required=True)
    ap.add_argument("--ready-template", required=True)
    ap.add_argument("--gpu-id", type=int, default=0)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--verify-cmd", default="")
    ap.add_argument("--daemon-pid", type=int, default=0)
    ap.add_argument("--min-arena", type=int, default=100 << 30)
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--publish-bytes", type=int, default=4 << 30)
    args = ap.parse_args()
    res = {"step": args.step, "errors": [], "checked": 0}
    try:
        torch, wcache = imports()
    except ImportError as exc:
        res["unavailable"] = f"cannot import the client, torch or grpcio: {exc}"
        print(json.dumps(res))
        return UNAVAILABLE
    try:
        rc = STEPS[args.step](args, torch, wcache, res)
    except Exception as exc:  # noqa: BLE001 - report, the shell records the step as failed
        res["errors"].append(f"{type(exc).__name__}: {exc}"[:2000])
        rc = 1
    res["ok"] = rc == 0 and not res["errors"]
    print(json.dumps(res, indent=None if args.step == "import-once" else 2))
    return 0 if res["ok"] else (rc or 1)


if __name__ == "__main__":
    sys.exit(main())
