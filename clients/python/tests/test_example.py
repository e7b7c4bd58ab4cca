"""The worked example (clients/python/examples/engine_loader.py) keeps working: daemon, mismatch and disk paths."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

import arena
import st_writer
from fake_daemon import FakeDaemon
from harness import REPO


@pytest.fixture(scope="module")
def loader():
    spec = importlib.util.spec_from_file_location("engine_loader", os.path.join(REPO, "clients", "python", "examples", "engine_loader.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def served(short_tmp):
    ck = os.path.join(short_tmp, "ck")
    tensors = st_writer.make_checkpoint(ck, n_tensors=40, n_shards=2)
    manifest, _ = arena.build(short_tmp, list(tensors.values()))
    arena.loaded_from(manifest, ck)
    return ck, short_tmp + "/d.sock", manifest, tensors


def test_parameters_alias_the_daemons_tensors(loader, served):
    ck, sock, manifest, tensors = served
    with FakeDaemon(sock, manifest):
        cfg = loader.expected_config(ck, device_capability="mock")
        state = loader.weights(cfg, socket=sock)
        lease = state.attachment
        assert state.source == "attached" and lease is not None and lease.active
        model = loader.skeleton({n: (t.dtype, tuple(t.shape)) for n, t in state.items()})
        assert loader.fill(model, state, torch.device("cpu"), zero_copy=True) == 0
        params = dict(model.named_parameters())
        assert set(params) == set(tensors)
        for name, t in state.items():
            assert params[name].data_ptr() == t.data_ptr()
        lease.release()


def test_main_reports_the_daemon_and_the_mismatch(loader, served, capsys):
    ck, sock, manifest, _ = served
    with FakeDaemon(sock, manifest):
        assert loader.main(["--model", ck, "--socket", sock, "--device-capability", "mock"]) == 0
    assert "attached from wcache daemon GPU-fake-0 (lease 7)" in capsys.readouterr().out
    with FakeDaemon(sock, manifest, mismatch=[("tp_size", "1", "2")]):
        assert loader.main(["--model", ck, "--socket", sock, "--device-capability", "mock", "--tp-size", "2"]) == 2


def test_no_daemon_falls_back_to_disk_and_other_errors_do_not(loader, served, capsys):
    ck, sock, _, tensors = served
    assert loader.main(["--model", ck, "--socket", sock, "--device-capability", "mock"]) == 0
    assert "from disk (no wcache daemon" in capsys.readouterr().out
    disk = loader.load_from_disk(ck)
    for name, (_, _, shape, data) in tensors.items():
        assert tuple(disk[name].shape) == tuple(shape)
        assert disk[name].reshape(-1).view(torch.uint8).numpy().tobytes() == data
    open(sock, "w").close()  # not a socket: refuse, never fall back
    assert loader.main(["--model", ck, "--socket", sock, "--device-capability", "mock"]) == 1


def test_first_start_publishes_and_the_next_attaches(short_tmp):
    """Against a real empty daemon: the first run loads, casts to bf16 and
    publishes; the second attaches to exactly those bytes."""
    import subprocess
    import sys

    import harness

    harness.require_binaries()
    ck = os.path.join(short_tmp, "ck")
    tensors = st_writer.make_checkpoint(ck, n_tensors=30, n_shards=2)
    with harness.World(devices=1) as world:
        world.serve(0, None)
        run = [sys.executable, os.path.join(REPO, "clients", "python", "examples", "engine_loader.py"), "--model", ck,
               "--device-uuid", world.uuids[0], "--device-capability", "mock", "--dtype", "bf16",
               "--engine-name", "example", "--engine-version", "1"]
        outs = [subprocess.run(run, env=world.env, capture_output=True, text=True, timeout=120) for _ in range(2)]
        for o in outs:
            assert o.returncode == 0, o.stderr
        assert f"{len(tensors)} tensors" in outs[0].stdout and "published to wcache daemon" in outs[0].stdout
        assert "attached from wcache daemon" in outs[1].stdout
        status = world.wcache_json("status", "--json")[0]
        assert status["state"] == "serving"
