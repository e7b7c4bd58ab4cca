#!/usr/bin/env python3
"""Assemble the GPU check's figures into OUT/gpu-results.json and print a summary.

    results.py OUT_DIR

Reads what the steps of scripts/gpu-check.sh left in OUT_DIR (steps.jsonl,
env.json, devices.json, uuids.json, conformance-*.txt, checkpoint.json,
h2d_peak.json, ipc_probe.json, serve.out, attach.json, ipc_client.json) and
tolerates any of them missing: a missing figure is null and its step says why.
"""

import json
import os
import re
import sys


def load(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def lines(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return f.read().splitlines()
    except OSError:
        return []


def conformance(out, name):
    text = lines(out, name)
    passed = [l.split()[2] for l in text if l.strip().startswith("--- PASS")]
    failed = [l.split()[2] for l in text if l.strip().startswith("--- FAIL")]
    return {"passed": len(passed), "failed": failed, "ok": bool(passed) and not failed and "PASS" in text}


GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_seconds(text):
    return sum(float(v) * UNITS[u] for v, u in GO_DURATION.findall(text))


def daemon_load(out, ckpt):
    for line in lines(out, "serve.out"):
        m = re.search(r"loaded in (\S+) \(", line)
        if m:
            secs = go_seconds(m.group(1))
            n = (ckpt or {}).get("bytes")
            return {"line": line, "seconds": secs,
                    "gb_per_second": (n / secs / 1e9) if n and secs else None}
    return None


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def main():
    out = sys.argv[1]
    steps = [json.loads(l) for l in lines(out, "steps.jsonl") if l.strip()]
    ckpt = load(out, "checkpoint.json")
    peak = load(out, "h2d_peak.json")
    probe = load(out, "ipc_probe.json")
    attach = load(out, "attach.json") or {}
    dl = daemon_load(out, ckpt)
    peak_gbs = ((peak or {}).get("pinned") or {}).get("best_gb_per_s")
    probe_gbs = ((probe or load(out, "ipc_probe_driver.json") or {}).get("probe") or {}).get("gb_per_second")
    runs = attach.get("runs") or []
    res = {
        "hardware_run": True,
        "steps": steps,
        "env": load(out, "env.json"),
        "devices": load(out, "devices.json"),
        "uuid_checks": load(out, "uuids.json"),
        "conformance": {"subprocess": conformance(out, "conformance-subprocess.txt"),
                        "in_process": conformance(out, "conformance-inprocess.txt")},
        "checkpoint": ckpt,
        "h2d_peak": peak,
        "load": {
            "daemon": dl,
            "backend_probe_gb_per_second": probe_gbs,
            "pinned_peak_gb_per_second": peak_gbs,
            "daemon_fraction_of_peak": (dl["gb_per_second"] / peak_gbs) if dl and dl.get("gb_per_second") and peak_gbs else None,
            "probe_fraction_of_peak": (probe_gbs / peak_gbs) if probe_gbs and peak_gbs else None,
        },
        "attach": {
            "runs": runs,
            "attach_ms_median": median([r["timings_ms"]["attach"] for r in runs if "timings_ms" in r]),
            "dial_ms_median": median([r["timings_ms"]["dial"] for r in runs if "timings_ms" in r]),
            "verify": attach.get("verify"),
        },
        "ipc": {"probe_torch": probe, "probe_driver": load(out, "ipc_probe_driver.json"),
                "python_client": load(out, "ipc_client.json")},
    }
    res["ok"] = bool(steps) and all(s["status"] in ("pass", "unavailable") for s in steps)
    with open(os.path.join(out, "gpu-results.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")

    def fmt(v, spec=".2f"):
        return "n/a" if v is None else format(v, spec)

    print("\n===== wcache CUDA GPU check =====")
    for s in steps:
        print(f"  {s['step']:<24} {s['status']:<12} {s['seconds']:>8.1f}s  {s.get('reason', '')}")
    print(f"  checkpoint            {fmt((ckpt or {}).get('bytes', 0) / 2**30)} GiB")
    print(f"  pinned H2D peak       {fmt(peak_gbs)} GB/s")
    print(f"  backend load (probe)  {fmt(probe_gbs)} GB/s")
    print(f"  daemon load (serve)   {fmt(dl and dl.get('gb_per_second'))} GB/s")
    print(f"  attach (median)       {fmt(res['attach']['attach_ms_median'], '.3f')} ms")
    print(f"  overall               {'PASS' if res['ok'] else 'FAIL'}")
    print(f"  figures: {os.path.join(out, 'gpu-results.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
