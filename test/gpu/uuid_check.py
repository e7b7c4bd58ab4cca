#!/usr/bin/env python3
"""Check the CUDA backend's ordinal -> UUID mapping against nvidia-smi and PyTorch.

    uuid_check.py --wcache BIN/wcache --plugin-dir BIN

Runs `wcache devices --backend cuda --json` under several environments:
the default device order, CUDA_DEVICE_ORDER=PCI_BUS_ID (compared with
nvidia-smi, which lists by PCI bus), CUDA_VISIBLE_DEVICES=<full UUID> and
=<abbreviated UUID> for every GPU (each must show exactly that GPU), and
compares the default order with PyTorch's str(get_device_properties(i).uuid)
(which lacks the GPU-/MIG- prefix). Prints one JSON object; exit status 1 on
any mismatch.
"""

import argparse
import json
import os
import subprocess
import sys


def devices(args, env_extra):
    env = dict(os.environ)
    for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        env.pop(k, None)
    env.update(env_extra)
    out = subprocess.run([args.wcache, "devices", "--backend", "cuda", "--plugin-dir", args.plugin_dir, "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"wcache devices with {env_extra}: exit {out.returncode}: {out.stderr.strip()}")
    return [d["uuid"] for d in json.loads(out.stdout)]


def nvidia_smi():
    out = subprocess.run(["nvidia-smi", "--query-gpu=uuid,pci.bus_id,name", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"nvidia-smi: {out.stderr.strip()}")
    rows = [[c.strip() for c in l.split(",")] for l in out.stdout.splitlines() if l.strip()]
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    return rows, listing


def torch_uuids():
    import torch  # noqa: PLC0415
    return [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wcache", required=True)
    ap.add_argument("--plugin-dir", required=True)
    args = ap.parse_args()
    res = {"checks": [], "errors": []}

    def check(name, ok, **detail):
        res["checks"].append(dict(name=name, ok=bool(ok), **detail))

    try:
        default = devices(args, {})
        pci = devices(args, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"{type(exc).__name__}: {exc}")
        default = pci = []
    res["wcache_default_order"], res["wcache_pci_order"] = default, pci
    try:
        rows, listing = nvidia_smi()
        res["nvidia_smi"], res["nvidia_smi_L"] = rows, listing
        smi = [r[0] for r in rows]
        mig = [u for u in default if u.startswith("MIG-")]
        if mig:
            # nvidia-smi --query-gpu lists parent GPUs; MIG UUIDs appear in -L.
            check("MIG UUIDs appear in nvidia-smi -L", all(u in listing for u in mig), mig=mig)
        else:
            check("PCI_BUS_ID order equals nvidia-smi's", pci == smi, wcache=pci, nvidia_smi=smi)
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"nvidia-smi: {type(exc).__name__}: {exc}")
    try:
        for u in default:
            only = devices(args, {"CUDA_VISIBLE_DEVICES": u})
            check(f"CUDA_VISIBLE_DEVICES={u}", only == [u], got=only)
            short = u[:12]
            only = devices(args, {"CUDA_VISIBLE_DEVICES": short})
            check(f"CUDA_VISIBLE_DEVICES={short} (abbreviated)", only == [u], got=only)
        for i, u in enumerate(pci):
            only = devices(args, {"CUDA_VISIBLE_DEVICES": str(i), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
            check(f"CUDA_VISIBLE_DEVICES={i} with PCI_BUS_ID", only == [u], got=only)
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"{type(exc).__name__}: {exc}")
    try:
        tu = torch_uuids()
        res["torch"] = tu
        check("PyTorch UUIDs (default order) equal wcache's without prefix",
              tu == [u[4:] for u in default], torch=tu, wcache=default)
    except Exception as exc:  # noqa: BLE001
        res["errors"].append(f"PyTorch: {type(exc).__name__}: {exc}")
    res["ok"] = not res["errors"] and bool(res["checks"]) and all(c["ok"] for c in res["checks"])
    json.dump(res, sys.stdout, indent=2)
    print()
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
