"""Shared fixtures. The package is imported from src/ so tests run without installing it."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
sys.path.insert(0, HERE)

import harness  # noqa: E402  (found through the path above)


@pytest.fixture
def world():
    """A harness.World of one mock device, closed after the test; fails the
    test when the Go binaries are not built (make build)."""
    harness.require_binaries()
    with harness.World(devices=1) as w:
        yield w


@pytest.fixture
def short_tmp():
    """A private directory with a short path (Unix socket paths are limited to 107 bytes)."""
    d = tempfile.mkdtemp(prefix="wc-", dir="/tmp")
    os.chmod(d, 0o700)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
