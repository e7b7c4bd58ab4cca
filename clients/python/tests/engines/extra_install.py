"""What `pip install 'wcache[EXTRA]'` would change in an engine's environment (a dry run, offline)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys

from harness import REPO


def dry_run_install(extra: str, keep: tuple, uv_cache: str) -> tuple:
    """Runs uv's `pip install --dry-run --offline` of clients/python[extra]
    into this interpreter's environment with uv's cache at uv_cache, and
    returns (the distributions the plan would add, remove or change, the
    plan's text). Fails unless uv succeeds and every distribution in keep
    has the version it had before."""
    uv = subprocess.run([os.path.join(REPO, "clients", "python", "engines", "setup-venv.sh"), "--uv"],
                        capture_output=True, text=True, check=True).stdout.strip()
    before = {d: importlib.metadata.version(d) for d in keep}
    proc = subprocess.run([uv, "pip", "install", "--dry-run", "--offline", "--no-build-isolation",
                           "--python", sys.executable, os.path.join(REPO, "clients", "python") + f"[{extra}]"],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, UV_CACHE_DIR=uv_cache))
    assert proc.returncode == 0, proc.stderr[-4000:]
    plan = proc.stdout + proc.stderr
    assert before == {d: importlib.metadata.version(d) for d in keep}
    return set(re.findall(r"^\s*[-+~] (\S+)==", plan, re.M)), plan
