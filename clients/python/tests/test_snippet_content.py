"""The documented snippets are the safe form (issue 35 item 1): each Python
block of README.md, docs/python-client.md and docs/publish.md that attaches
or publishes is extracted from the markdown and run as written, in a fresh
Python on the mock backend, against a real daemon whose weights are NOT the
bytes of the files the snippet names: a same-header copy with other bytes
(a fine-tune of the same shapes: the same checkpoint_digest), or the
snippet's own checkpoint rewritten in place after it was published. The
snippet must raise or load from disk; it must never return the daemon's
bytes. A doc change that drops the content proof fails here.

Needs bin/wcache and bin/wcache-backend-mock (`make build`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from typing import Dict, Optional

import pytest

import harness
import st_writer

pytestmark = pytest.mark.interop

# The free names of the snippets, as their comments describe them: the
# model directory, the layout, the device, and the engine's own loader (it
# reads the safetensors files as they are on disk now, through st_writer:
# _run puts this folder on the snippet's PYTHONPATH after the client).
_READER = r'''
import torch as _torch, st_writer as _st
_DT = {"F32": _torch.float32, "F16": _torch.float16, "BF16": _torch.bfloat16}
def _read_dir(d):
    return {name: (_torch.frombuffer(bytearray(data), dtype=_DT[dtype]).reshape(shape) if data
                   else _torch.empty(shape, dtype=_DT[dtype]))
            for name, dtype, shape, data in _st.read_dir(d)}
'''

# What the snippet left in `result`: a SHA-256 of every tensor's bytes, and
# where they came from when the result says so.
_EPILOGUE = r'''
import hashlib as _hashlib, json as _json2
def _bytes(t):
    return t.detach().cpu().reshape(-1).contiguous().view(_torch.uint8).numpy().tobytes()
print("RESULT " + _json2.dumps({"source": getattr(RESULT, "source", None),
                               "tensors": {n: _hashlib.sha256(_bytes(t)).hexdigest() for n, t in RESULT.items()}}))
'''


def _attach_prelude(path: str, gpu: int) -> str:
    return (f"path, tp_size, rank, local_gpu = {path!r}, 1, 0, {gpu}\n" + _READER +
            "def load_from_disk(p): return _read_dir(p)\n"
            "def drain_and_exit(deadline): pass\n")


def _python_client_publish_prelude(path: str, gpu: int) -> str:
    # docs/python-client.md's load_or_publish block continues the page's
    # first block: cfg as that block builds it, the engine's loader, a model.
    return (_attach_prelude(path, gpu) +
            "import wcache\n"
            "cfg = wcache.CacheConfig(model=path, checkpoint_digest=wcache.checkpoint_digest(path),\n"
            "                         device_capability=wcache.device_capability(local_gpu))\n"
            "def my_load_and_postprocess(): return _read_dir(path)\n"
            "class _Model:\n"
            "    def load_state_dict(self, sd, assign=False): self.sd = sd\n"
            "model = _Model()\n")


def _publish_md_prelude(path: str, gpu: int) -> str:
    return (f"model_path, tp, rank, local_gpu = {path!r}, 1, 0, {gpu}\n" + _READER +
            "import types\n"
            "myengine = types.SimpleNamespace(__version__='1.0')\n"
            "def build_state_dict(p, r): return _read_dir(p)\n"
            "class _Model:\n"
            "    def load_state_dict(self, sd, assign=False): self.sd = sd\n"
            "model = _Model()\n")


def _block(doc: str, marker: str) -> str:
    """The one ```python block of doc that contains marker (the call under test)."""
    found = [b for b in harness.python_blocks(doc) if marker in b]
    assert len(found) == 1, f"{doc}: want exactly one python block with {marker!r}, found {len(found)}"
    return found[0]


def _run(world: harness.World, code: str) -> subprocess.CompletedProcess:
    env = dict(world.env, WCACHE_BACKEND="mock", CUDA_VISIBLE_DEVICES="",
               XDG_CACHE_HOME=os.path.join(world.root, "xdg-cache"),
               PYTHONPATH=os.pathsep.join([os.path.join(harness.REPO, "clients", "python", "src"),
                                           os.path.dirname(os.path.abspath(__file__))]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)


def _result(proc: subprocess.CompletedProcess) -> Optional[dict]:
    """The snippet's result, or None when it raised (a wcache error)."""
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert "wcache" in proc.stderr, f"the snippet failed, but not with a wcache error:\n{proc.stderr}"
    return None


def tensor_hashes(directory: str) -> Dict[str, str]:
    """SHA-256 of every tensor's bytes in the safetensors files of directory, as they are on disk now."""
    return {name: hashlib.sha256(data).hexdigest() for name, _, _, data in st_writer.read_dir(directory)}


def rewrite_a_tensor(directory: str) -> str:
    """Invert the bytes of the largest tensor of the first shard of directory,
    in place (same size, same header: the same checkpoint_digest); its name."""
    path = os.path.join(directory, sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))[0])
    with open(path, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        name, (lo, hi) = max(((t, m["data_offsets"]) for t, m in header.items() if t != "__metadata__"),
                             key=lambda p: p[1][1] - p[1][0])
        f.seek(8 + n + lo)
        data = f.read(hi - lo)
        f.seek(8 + n + lo)
        f.write(bytes(b ^ 0xFF for b in data))
    return name


@pytest.fixture(scope="module")
def world():
    harness.require_binaries()
    with harness.World(devices=4) as w:
        yield w


def assert_never_the_daemons(result: Optional[dict], disk: Dict[str, str], daemon: Dict[str, str], changed: str):
    assert disk[changed] != daemon[changed], "the test's copy should hold other bytes than the daemon"
    if result is None:
        return  # raised: safe
    assert result["tensors"][changed] != daemon[changed], f"the snippet returned the daemon's bytes of {changed}"
    assert result["tensors"] == disk, "the snippet returned bytes that are not its files'"


@pytest.mark.parametrize("doc, serve_flags", [
    ("README.md", ()),
    ("docs/python-client.md", ("--engine-name", "my-engine", "--engine-version", "1.4")),
])
def test_attach_snippet_never_returns_a_fine_tunes_base_weights(world, doc, serve_flags):
    """The daemon serves m1 (default content policies); the snippet names
    m2, a copy of m1 with one tensor's bytes changed (same headers)."""
    gpu = 0 if doc == "README.md" else 1
    m1 = os.path.join(world.root, f"m1-{gpu}")
    st_writer.make_checkpoint(m1, n_tensors=30, n_shards=2)
    daemon = world.serve(gpu, m1, *serve_flags)
    m2 = os.path.join(world.root, f"m2-{gpu}")
    shutil.copytree(m1, m2)
    changed = rewrite_a_tensor(m2)
    proc = _run(world, _attach_prelude(m2, gpu) + _block(doc, "wcache.attach(cfg") + "\nRESULT = state_dict\n" + _EPILOGUE)
    assert_never_the_daemons(_result(proc), tensor_hashes(m2), tensor_hashes(m1), changed)
    # The same snippet on the daemon's own files attaches (the proof is not a refusal of everything).
    ok = _result(_run(world, _attach_prelude(m1, gpu) + _block(doc, "wcache.attach(cfg") + "\nRESULT = state_dict\n" + _EPILOGUE))
    assert ok is not None and ok["tensors"] == tensor_hashes(m1)
    daemon.signal(signal.SIGTERM)
    daemon.wait(30)


@pytest.mark.parametrize("doc, marker, prelude, result", [
    ("docs/publish.md", "wcache.load_or_publish(", _publish_md_prelude, "state_dict"),
    ("docs/python-client.md", "wcache.load_or_publish(", _python_client_publish_prelude, "weights"),
])
def test_publish_snippet_never_attaches_a_checkpoint_rewritten_in_place(world, doc, marker, prelude, result):
    """An empty daemon (content policies identity, hash); the snippet
    publishes m1; m1 is then rewritten in place (same size, same headers);
    the snippet run again loads the new files (or raises), never the
    publication's bytes."""
    gpu = 2 if doc == "docs/publish.md" else 3
    m1 = os.path.join(world.root, f"pub-{gpu}")
    st_writer.make_checkpoint(m1, n_tensors=30, n_shards=2)
    daemon = world.serve(gpu, None, "--content-policies", "identity,hash")
    code = lambda: prelude(m1, gpu) + _block(doc, marker) + f"\nRESULT = {result}\n" + _EPILOGUE  # noqa: E731
    first = _result(_run(world, code()))
    published = tensor_hashes(m1)
    assert first is not None and first["source"] == "published" and first["tensors"] == published, first
    again = _result(_run(world, code()))
    assert again is not None and again["source"] == "attached", "the unchanged files should attach"
    changed = rewrite_a_tensor(m1)
    after = _result(_run(world, code()))
    assert_never_the_daemons(after, tensor_hashes(m1), published, changed)
    daemon.signal(signal.SIGTERM)
    daemon.wait(30)
