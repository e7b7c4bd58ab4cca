#!/usr/bin/env python3
"""Assemble the GPU check's results; also parses one fill for gpu-check.sh.

    results.py OUT_DIR [--quiet]
        Reads what the steps left in OUT_DIR (steps.jsonl, facts.json,
        ipc_control.json, devices.json, uuids.json, h2d_peak.json,
        checkpoint.json, fill-*.json, client-*.json), writes
        OUT_DIR/gpu-results.json and OUT_DIR/gpu-results.md (results_md.py)
        and prints a summary. Missing files are tolerated: a missing figure is
        null and its step says why. Exit status: 0 PASS (or PARTIAL: the steps
        GPU_CHECK_STEPS named passed), 1 FAIL, 2 NO-GPU.

    results.py --fill SERVE_OUT SERVE_ERR METRICS_SOCKET READERS
        JSON for one daemon fill: its "loaded in" line, seconds, GB/s and the
        fill counters scraped from /metrics (names with fill/load/read/copy/wait).

Verdict: PASS when every step passed. "unavailable"
(the Python client, torch or grpcio could not be imported) fails the run when
facts.json shows torch and grpcio installed. NO-GPU when the facts step found
no GPU and nothing failed.
"""

import json
import os
import re
import socket
import sys

GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
CLIENT_STEPS = ("attach-p50", "zero-copy", "two-importers", "reattach", "malloc-async", "sigkill", "big-arena",
                "publish")


def load(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError:
        return []


def scrape(sock_path):
    """GET /metrics over a Unix socket; {} when unreachable."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(sock_path)
        s.sendall(b"GET /metrics HTTP/1.0\r\nHost: wcache\r\n\r\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
    except OSError:
        return {}
    body = data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
    out = {}
    for line in body.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        if name.startswith("wcache_") and re.search(r"fill|load|read|copy|wait|queue", name):
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def fill(serve_out, serve_err, sock, readers):
    res = {"readers": int(readers), "line": None, "seconds": None, "gb_per_second": None}
    for line in read_lines(serve_out):
        m = re.search(r"(\d+) tensors, (\S+ \S+) in (\d+) allocation\(s\), loaded in (\S+) \(", line)
        if m:
            res["line"] = line
            res["seconds"] = sum(float(v) * UNITS[u] for v, u in GO_DURATION.findall(m.group(4)))
            res["allocations"] = int(m.group(3))
    res["counters"] = scrape(sock)
    res["loaded_bytes"] = next((v for k, v in res["counters"].items() if "loaded_bytes" in k), None)
    if res["loaded_bytes"] is None and res["line"]:
        m = re.search(r"([\d.]+) (B|KiB|MiB|GiB|TiB) in \d+ allocation", res["line"])
        if m:  # the line's size is rounded to 3 digits: a fallback only
            res["loaded_bytes"] = float(m.group(1)) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(m.group(2))
            res["loaded_bytes_from"] = "serve line (rounded)"
    if res["loaded_bytes"] and res["seconds"]:
        res["gb_per_second"] = res["loaded_bytes"] / res["seconds"] / 1e9
    res["log_counters"] = [l for l in read_lines(serve_err) if re.search(r"fill|readers|counters", l)][-10:]
    json.dump(res, sys.stdout, indent=2)
    print()
    return 0 if res["line"] else 1


def p50(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def assemble(out):
    steps = [json.loads(l) for l in read_lines(os.path.join(out, "steps.jsonl")) if l.strip()]
    facts = load(out, "facts.json") or {}
    peak = load(out, "h2d_peak.json") or {}
    peak_gbs = (peak.get("pinned") or {}).get("best_gb_per_s")
    fills = {tag: load(out, f"fill-{tag}.json") for tag in ("1", "n", "big")}
    for f in fills.values():
        if f and f.get("gb_per_second") and peak_gbs:
            f["fraction_of_pinned_peak"] = f["gb_per_second"] / peak_gbs
    clients = {s: load(out, f"client-{s}.json") for s in CLIENT_STEPS}
    have_python = bool(facts.get("torch_version") and facts.get("grpc_version"))
    by_status = {}
    for s in steps:
        by_status.setdefault(s["status"], []).append(s["step"])
    failing = [s["step"] for s in steps if s["status"] in ("fail", "timeout", "not-run")
               or (s["status"] == "unavailable" and have_python)]
    no_gpu = "no-gpu" in by_status
    if not steps:
        verdict = "FAIL"
    elif failing:
        verdict = "FAIL"
    elif no_gpu:
        verdict = "NO-GPU"
    elif "unavailable" in by_status:
        verdict = "FAIL"  # a PASS needs the Python client's steps too
    elif "skipped" in by_status:
        verdict = "PARTIAL"  # GPU_CHECK_STEPS named some steps, and they passed
    else:
        verdict = "PASS"
    client_counted = [s for s in steps if s["step"] in CLIENT_STEPS]
    a = clients.get("attach-p50") or {}
    res = {
        "verdict": verdict,
        "failing_steps": failing,
        "python_client_steps": {"total": len(client_counted),
                                "passed": sum(s["status"] == "pass" for s in client_counted),
                                "unavailable_counts_as_failure": have_python},
        "steps": steps,
        "facts": facts,
        "ipc_control": load(out, "ipc_control.json"),
        "devices": load(out, "devices.json"),
        "uuid_checks": load(out, "uuids.json"),
        "h2d_peak": peak or None,
        "checkpoint": load(out, "checkpoint.json"),
        "fill": fills,
        "attach": {"p50_ms": a.get("total_ms_p50"), "attach_ms_p50": a.get("attach_ms_p50"),
                   "open_ms_p50": a.get("open_ms_p50"), "per_handle_open_ms_p50": a.get("per_handle_open_ms_p50"),
                   "arena_bytes": a.get("arena_bytes"), "first": a.get("first")},
        "client": clients,
    }
    return res


def main(argv):
    if argv and argv[0] == "--fill":
        return fill(*argv[1:5])
    out = argv[0]
    quiet = "--quiet" in argv
    res = assemble(out)
    with open(os.path.join(out, "gpu-results.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from results_md import render  # noqa: PLC0415
    with open(os.path.join(out, "gpu-results.md"), "w") as f:
        f.write(render(res))
    if not quiet:
        print("\n===== wcache CUDA GPU check =====")
        for s in res["steps"]:
            print(f"  {s['step']:<16} {s['status']:<12} {s['seconds']:>8.1f}s  {s.get('reason', '')}")
        pc = res["python_client_steps"]
        print(f"  python client steps: {pc['passed']}/{pc['total']} passed")
        print(f"  verdict: {res['verdict']}" + (f" (failing: {', '.join(res['failing_steps'])})" if res["failing_steps"] else ""))
        print(f"  figures: {os.path.join(out, 'gpu-results.json')}")
    return {"PASS": 0, "PARTIAL": 0, "NO-GPU": 2}.get(res["verdict"], 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
