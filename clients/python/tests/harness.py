"""Runs the Go binaries (bin/wcache, bin/wcache-backend-mock) in a private world for interop tests.

Like test/e2e's harness: a private XDG_RUNTIME_DIR (so sockets and ready
files go to <root>/run/wcache), a private WCACHE_MOCK_DIR, mock devices with
UUIDs unique to this harness, and process groups that are always cleaned up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Dict, List, Optional

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
READY_TIMEOUT = 60.0
STOP_GRACE = 15.0


def python_blocks(doc: str) -> List[str]:
    """Every ```python block of a document of the repository (a path
    relative to it), verbatim, in order."""
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        text = f.read()
    blocks, start = [], 0
    while True:
        start = text.find("```python\n", start)
        if start < 0:
            return blocks
        start += len("```python\n")
        end = text.index("```", start)
        blocks.append(text[start:end])
        start = end + 3


def bin_dir() -> str:
    return os.environ.get("WCACHE_BIN_DIR") or os.path.join(REPO, "bin")


def missing_binaries() -> List[str]:
    d = bin_dir()
    return [os.path.join(d, b) for b in ("wcache", "wcache-backend-mock") if not os.access(os.path.join(d, b), os.X_OK)]


def require_binaries() -> None:
    """Fails the calling test (interop tests are part of the suite: no skip)
    when the Go binaries are not built."""
    missing = missing_binaries()
    if missing:
        pytest.fail("Go binaries missing: " + ", ".join(missing) + ": run `make build` first "
                    "(or point WCACHE_BIN_DIR at them)", pytrace=False)


class Daemon:
    """A `wcache serve` process."""

    def __init__(self, proc: subprocess.Popen, uuid: str, log_path: str):
        self.proc = proc
        self.uuid = uuid
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-6000:]

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)


class World:
    """A private world of mock devices; close() (or leaving a with block)
    stops its daemons and removes its files."""

    def __init__(self, devices: int = 2):
        self.root = tempfile.mkdtemp(prefix="wcpy", dir="/tmp")
        self.run_dir = os.path.join(self.root, "run")
        self.mock_dir = os.path.join(self.root, "shm")
        for d in (self.run_dir, self.mock_dir):
            os.mkdir(d, 0o700)
        tag = (int(time.time() * 1e6) ^ (os.getpid() << 8)) & 0xFFFFFFFF
        self.uuids = [f"GPU-{tag:08x}-0000-4000-8000-{i:012x}" for i in range(devices)]
        self.env = {k: v for k, v in os.environ.items()
                    if not (k.startswith("WCACHE_") and k != "WCACHE_BIN_DIR")
                    and k not in ("XDG_RUNTIME_DIR", "CUDA_VISIBLE_DEVICES")}
        self.env.update({
            "XDG_RUNTIME_DIR": self.run_dir,
            "WCACHE_MOCK_DIR": self.mock_dir,
            "WCACHE_MOCK_DEVICES": ",".join(self.uuids),
            "WCACHE_PLUGIN_DIR": bin_dir(),
        })
        self.daemons: List[Daemon] = []

    # What a client in this world sees instead of os.environ.
    def getenv(self, name: str) -> str:
        return self.env.get(name, "")

    def socket_path(self, uuid: str) -> str:
        return os.path.join(self.run_dir, "wcache", uuid + ".sock")

    def ready_path(self, uuid: str) -> str:
        return os.path.join(self.run_dir, "wcache", uuid + ".ready.json")

    def wcache(self, *args: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([os.path.join(bin_dir(), "wcache"), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"wcache {' '.join(args)} exited {proc.returncode}:\n"
                                 f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")
        return proc

    def wcache_json(self, *args: str, timeout: float = 60.0):
        return json.loads(self.wcache(*args, timeout=timeout).stdout)

    def serve(self, gpu: int, model: Optional[str], *extra: str) -> Daemon:
        """Start `wcache serve` on mock device gpu (without --model when model
        is None: an empty daemon) and wait until its ready file names it.

        An empty daemon allows content policy "headers" unless extra names
        --content-policies: the publications of these tests are synthetic
        tensors under a model that names no files, which only such a daemon
        serves to an attach (docs/cacheconfig.md); files a client does name
        are still checked."""
        uuid = self.uuids[gpu]
        if model is None and not any(a.startswith("--content-policies") for a in extra):
            extra = (*extra, "--content-policies", "identity,hash,headers")
        log_path = os.path.join(self.root, f"serve-{gpu}-{len(self.daemons)}.log")
        log = open(log_path, "wb")
        model_args = ["--model", model] if model is not None else []
        proc = subprocess.Popen([os.path.join(bin_dir(), "wcache"), "serve", "--backend", "mock",
                                 "--gpu-id", str(gpu), *model_args, *extra],
                                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        d = Daemon(proc, uuid, log_path)
        self.daemons.append(d)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            ready = self.read_ready(uuid)
            if ready is not None and ready.get("pid") == proc.pid:
                return d
            if proc.poll() is not None:
                raise AssertionError(f"wcache serve exited ({proc.returncode}) before it was ready:\n{d.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"wcache serve not ready after {READY_TIMEOUT}s:\n{d.log()}")
            time.sleep(0.02)

    def read_ready(self, uuid: str) -> Optional[Dict[str, object]]:
        try:
            with open(self.ready_path(uuid)) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for d in self.daemons:
            d.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for d in self.daemons:
            try:
                d.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # the group outlives its leader when a plugin was orphaned
                os.killpg(d.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            d.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
