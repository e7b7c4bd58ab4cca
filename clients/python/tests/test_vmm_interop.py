"""cuda-vmm-fd against the real Go daemon: `wcache serve --backend cuda
--backend-opt handle=cuda-vmm-fd` on the Go backend's fake driver
(plugins/cuda/testdata/fakecuda), and a Python client in its own process
that attaches, receives the descriptors on the daemon's descriptor channel
and maps them through its libcuda (the client's fake, tests/fakecuda, found
as libcuda.so.1 on LD_LIBRARY_PATH) with cuMemImportFromShareableHandle,
cuMemAddressReserve, cuMemMap and cuMemSetAccess; the bytes equal the file's.

Needs bin/wcache and bin/wcache-backend-cuda (`make build`) and gcc.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import harness
import st_writer

pytestmark = pytest.mark.interop

HERE = os.path.dirname(os.path.abspath(__file__))

CLIENT = textwrap.dedent("""
    import ctypes, hashlib, json, sys
    import wcache
    socket, model = sys.argv[1], sys.argv[2]
    digest = wcache.checkpoint_digest(model)
    cfg = wcache.CacheConfig(model=model, checkpoint_digest=digest, device_capability="9.0")  # the fake GPU's
    att = wcache.attach(cfg, socket=socket, library="numpy")
    arrays = att.tensors()
    sums = {n: hashlib.sha256(ctypes.string_at(a.pointer, a.nbytes)).hexdigest() for n, a in arrays.items()}
    out = {"kinds": [h.kind for h in att.manifest.handles], "sha256": sums}
    print(json.dumps(out), flush=True)
""")


def test_python_client_maps_cuda_vmm_fd_from_the_go_daemon(tmp_path):
    missing = [b for b in ("wcache", "wcache-backend-cuda")
               if not os.access(os.path.join(harness.bin_dir(), b), os.X_OK)]
    if missing:
        pytest.fail(f"missing Go binaries {missing}: run make build")
    go_fake = str(tmp_path / "go" / "libcuda.so.1")
    py_fake_dir = tmp_path / "py"
    os.makedirs(os.path.dirname(go_fake))
    os.makedirs(py_fake_dir)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1",
                    "-I", os.path.join(harness.REPO, "plugins/internal/testkit/fakelib/include"), "-o", go_fake,
                    os.path.join(harness.REPO, "plugins/cuda/testdata/fakecuda/fakecuda.c"), "-lpthread"], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(py_fake_dir / "libcuda.so.1"),
                    os.path.join(HERE, "fakecuda", "fake_libcuda.c")], check=True)

    rng = np.random.default_rng(7)
    model = str(tmp_path / "model")
    os.makedirs(model)
    tensors = [st_writer.random_tensor(rng, f"w{i}", "F32", (300, 1000)) for i in range(3)]
    st_writer.write(os.path.join(model, "model.safetensors"), tensors)
    want = {name: hashlib.sha256(data).hexdigest() for name, _, _, data in tensors}

    with harness.World(devices=1) as w:
        env = dict(w.env, WCACHE_CUDA_LIBRARY=go_fake, WCACHE_NVML_LIBRARY=str(tmp_path / "absent.so"),
                   # The UUID of the client fake's device 0 (16 zero bytes): the client finds its ordinal by it.
                   FAKECUDA_DEVICES="GPU-00000000-0000-0000-0000-000000000000")
        log = open(tmp_path / "serve.log", "wb")
        proc = subprocess.Popen([os.path.join(harness.bin_dir(), "wcache"), "serve", "--backend", "cuda",
                                 "--gpu-id", "0", "--model", model, "--backend-opt", "handle=cuda-vmm-fd"],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        w.daemons.append(harness.Daemon(proc, "", str(tmp_path / "serve.log")))
        deadline = time.monotonic() + harness.READY_TIMEOUT
        socket = None
        while socket is None:
            for path in glob.glob(os.path.join(w.run_dir, "wcache", "*.ready.json")):
                with open(path) as f:
                    try:
                        ready = json.load(f)
                    except ValueError:
                        continue
                if ready.get("pid") == proc.pid:
                    socket = path[: -len(".ready.json")] + ".sock"
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"wcache serve not ready ({proc.poll()}):\n{open(tmp_path / 'serve.log').read()}")
            time.sleep(0.05)

        client_env = dict(w.env, LD_LIBRARY_PATH=str(py_fake_dir),
                          PYTHONPATH=os.pathsep.join([os.path.join(harness.REPO, "clients/python/src"), HERE]))
        out = subprocess.run([sys.executable, "-c", CLIENT, socket, model], env=client_env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["kinds"] and set(got["kinds"]) == {"cuda-vmm-fd"}
        assert got["sha256"] == want
