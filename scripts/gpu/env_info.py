#!/usr/bin/env python3
"""Describe the machine the GPU check runs on, as JSON (never fails).

    env_info.py BIN_DIR
"""

import json
import os
import platform
import subprocess
import sys


def run(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip()
    except Exception as exc:  # noqa: BLE001
        return f"unavailable: {type(exc).__name__}: {exc}"


def version(module):
    try:
        m = __import__(module)
        return getattr(m, "__version__", "present")
    except Exception as exc:  # noqa: BLE001
        return f"unavailable: {type(exc).__name__}: {exc}"


def main():
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else "bin"
    info = {
        "host": platform.node(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "nvidia_smi_L": run(["nvidia-smi", "-L"]),
        "driver": run(["nvidia-smi", "--query-gpu=driver_version,name,memory.total,pci.bus_id", "--format=csv,noheader"]),
        "torch": version("torch"),
        "cupy": version("cupy"),
        "grpc": version("grpc"),
        "protobuf": version("google.protobuf"),
        "wcache_version": run([os.path.join(bin_dir, "wcache"), "version"]),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
    }
    try:
        import torch  # noqa: PLC0415
        info["torch_cuda"] = torch.version.cuda
        info["torch_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as exc:  # noqa: BLE001
        info["torch_cuda"] = f"unavailable: {type(exc).__name__}: {exc}"
    json.dump(info, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
