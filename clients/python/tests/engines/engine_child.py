"""Runs an engine test's child script (sglang_child.py, transformers_child.py, …) in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(script: str, env: dict, *args: str, timeout: float, expect_rc: int = 0) -> tuple:
    """Runs script (a file name in this folder) with args under this
    interpreter and env; fails unless it exits expect_rc (the message has
    the ends of its output) or outlives timeout seconds. Returns (the JSON
    of its last stdout line, its stderr: the engine's log)."""
    proc = subprocess.run([sys.executable, os.path.join(HERE, script), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == expect_rc, f"{script} {args} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n" \
                                         f"{proc.stderr[-8000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr
