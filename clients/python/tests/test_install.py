"""`pip install ./clients/python` into a fresh environment gives `import wcache`
(with its protobuf descriptors, no PYTHONPATH), `python -m wcache --help`, the
console script, and the README's Python snippet works against a mock daemon.

The fresh environment is a PyTorch engine's: uv creates it with pip seeded and
links torch and numpy from the pinned lock (requirements/test.txt) out of uv's
cache, then the real pip runs exactly the README's install. It needs uv, which
clients/python/test.sh passes in WCACHE_DEV_UV when it runs the pinned
environment; under Debian's python3 (PYTHON=/usr/bin/python3) it is skipped.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys

import pytest

import harness
import st_writer

pytestmark = pytest.mark.interop

CLIENT = os.path.join(harness.REPO, "clients", "python")


def readme_snippet() -> str:
    with open(os.path.join(harness.REPO, "README.md")) as f:
        text = f.read()
    m = re.search(r"```python\n(import wcache\n.*?)```", text, re.S)
    assert m, "README.md has no ```python block starting with `import wcache`"
    return m.group(1)


def locked(name: str) -> str:
    with open(os.path.join(CLIENT, "requirements", "test.txt")) as f:
        m = re.search(rf"^{re.escape(name)}==(\S+)", f.read(), re.M)
    assert m, f"{name} is not pinned in requirements/test.txt"
    return f"{name}=={m.group(1)}"


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory):
    uv = os.environ.get("WCACHE_DEV_UV", "")
    if not uv:
        pytest.skip("needs uv from the pinned environment (clients/python/test.sh without PYTHON)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WCACHE_", "PYTHON", "VIRTUAL_ENV"))}
    venv = str(tmp_path_factory.mktemp("fresh") / "venv")
    subprocess.run([uv, "venv", "-q", "--seed", "--python", sys.executable, venv], check=True, env=env)
    py = os.path.join(venv, "bin", "python")
    subprocess.run([uv, "pip", "install", "-q", "--python", py, locked("torch"), locked("numpy"), "-c",
                    os.path.join(CLIENT, "requirements", "test.txt")], check=True, env=env)
    # Exactly the README's install, with the environment's own pip.
    proc = subprocess.run([py, "-m", "pip", "install", "-q", CLIENT], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return venv, env


def test_the_installed_package_imports_from_site_packages(fresh_env):
    venv, env = fresh_env
    py = os.path.join(venv, "bin", "python")
    out = subprocess.run([py, "-c", "import wcache, wcache.pb as pb; print(wcache.__file__); print(wcache.__version__);"
                          " print(pb.StatusRequest.DESCRIPTOR.full_name)"],
                         cwd="/", env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    assert "site-packages" in out[0] and not out[0].startswith(CLIENT)
    with open(os.path.join(CLIENT, "src", "wcache", "_version.py")) as f:
        assert f'"{out[1]}"' in f.read()
    assert out[2] == "wcache.daemon.v1.StatusRequest"
    for cmd in ([py, "-m", "wcache", "--help"], [os.path.join(venv, "bin", "wcache-py"), "--help"]):
        res = subprocess.run(cmd, cwd="/", env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert "WCACHE_SOCKET_TEMPLATE" in res.stdout and "wcache serve" in res.stdout


def test_the_readme_snippet_attaches_after_the_install(fresh_env):
    venv, env = fresh_env
    with harness.World(devices=1) as w:
        model = os.path.join(w.root, "model")
        tensors = st_writer.make_checkpoint(model, n_tensors=24, n_shards=2)
        w.serve(0, model)
        script = (
            f"path, tp_size, rank, local_gpu = {model!r}, 1, 0, 0\n"
            "def load_from_disk(p):\n    raise SystemExit('fell back to disk')\n"
            + readme_snippet() +
            "import hashlib, torch\n"
            "for name, t in sorted(state_dict.items()):\n"
            "    b = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()\n"
            "    print(name, hashlib.sha256(b).hexdigest())\n")
        run_env = dict(env, **{k: v for k, v in w.env.items() if k.startswith(("WCACHE_", "XDG_"))},
                       WCACHE_BACKEND="mock")
        res = subprocess.run([os.path.join(venv, "bin", "python"), "-c", script], cwd="/", env=run_env,
                             capture_output=True, text=True, timeout=900)  # a hang guard: the first torch import compiles its bytecode
        assert res.returncode == 0, res.stdout + res.stderr
        got = dict(line.split() for line in res.stdout.splitlines())
        want = {name: hashlib.sha256(t[3]).hexdigest() for name, t in tensors.items()}
        assert got == want
