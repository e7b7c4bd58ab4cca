"""Importing wcache in a Python without grpc or protobuf says what to install."""

from __future__ import annotations

import os
import subprocess
import sys

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

# Makes the named top-level packages unimportable, as on a Python without them.
BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
sys.path.insert(0, {src!r})
try:
    import wcache
except ImportError as exc:
    print(exc)
    sys.exit(3)
"""


def run_blocked(blocked):
    return subprocess.run([sys.executable, "-c", BLOCK.format(blocked=set(blocked), src=SRC)],
                          capture_output=True, text=True, timeout=60)


def test_missing_protobuf_names_what_to_install():
    r = run_blocked({"google"})
    assert r.returncode == 3, r.stderr
    assert "'google'" in r.stdout and "pip install grpcio protobuf" in r.stdout
    assert "apt-get install python3-grpcio python3-protobuf" in r.stdout


def test_missing_grpc_names_what_to_install():
    r = run_blocked({"grpc"})
    assert r.returncode == 3, r.stderr
    assert "'grpc'" in r.stdout and "pip install grpcio protobuf" in r.stdout
