#!/usr/bin/env python3
"""Driver and machine facts for the GPU check, stdlib only; prints JSON.

    facts.py [--gpu-id 0]

Driver and CUDA version, kernel (uname -r), compute and persistence mode, PCIe
generation and width (current and max), the GPU's NUMA node (sysfs numa_node of
its PCI device), /dev/shm size and free space, CPU count and memory. Without
nvidia-smi or a GPU, "gpu" is null and "no_gpu" says why.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys

FIELDS = ["index", "name", "uuid", "pci.bus_id", "driver_version", "compute_mode", "persistence_mode",
          "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
          "memory.total", "memory.used", "mig.mode.current"]


def nvidia_smi(gpu):
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi not found"
    try:
        out = subprocess.run([exe, f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits", "-i", str(gpu)],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi: {exc}"
    if out.returncode != 0:
        return None, f"nvidia-smi: {(out.stderr or out.stdout).strip()}"
    vals = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    gpu_info = dict(zip(FIELDS, vals))
    banner = subprocess.run([exe], capture_output=True, text=True, timeout=20).stdout
    for line in banner.splitlines():
        if "CUDA Version" in line:
            gpu_info["cuda_version"] = line.split("CUDA Version:")[1].split()[0]
    return gpu_info, None


def numa_node(bus_id):
    if not bus_id:
        return None
    bdf = bus_id.lower()
    if len(bdf.split(":")[0]) == 8:  # nvidia-smi prints a 32-bit domain
        bdf = bdf[4:]
    try:
        with open(f"/sys/bus/pci/devices/{bdf}/numa_node") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpu-id", type=int, default=0)
    args = ap.parse_args()
    facts = {"kernel": platform.release(), "machine": platform.machine(), "cpus": os.cpu_count(),
             "python": sys.version.split()[0]}
    try:
        st = os.statvfs("/dev/shm")
        facts["dev_shm_bytes"], facts["dev_shm_free_bytes"] = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    except OSError:
        facts["dev_shm_bytes"] = None
    try:
        with open("/proc/meminfo") as f:
            facts["mem_total_kib"] = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    gpu, why = nvidia_smi(args.gpu_id)
    facts["gpu"] = gpu
    if gpu is None:
        facts["no_gpu"] = why
    else:
        facts["gpu"]["numa_node"] = numa_node(gpu.get("pci.bus_id"))
    for mod in ("torch", "grpc", "numpy"):
        try:
            m = __import__(mod)
            facts[f"{mod}_version"] = getattr(m, "__version__", "?")
        except ImportError:
            facts[f"{mod}_version"] = None
    json.dump(facts, sys.stdout, indent=2)
    print()
    return 0 if gpu is not None else 2


if __name__ == "__main__":
    sys.exit(main())
