"""Interop with the real Go daemon: `wcache serve --backend mock` serving a checkpoint
generated here, and a Python process attaching to it.

Needs bin/wcache and bin/wcache-backend-mock (`make build`; WCACHE_BIN_DIR
overrides the folder). Missing binaries are a failure, not a skip: CI must
never pass without running these.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
import torch

import arena
import harness
import st_writer
import wcache
from wcache import pb

pytestmark = pytest.mark.interop

N_TENSORS = 300


@pytest.fixture(scope="module")
def world():
    harness.require_binaries()
    with harness.World(devices=6) as w:
        yield w


@pytest.fixture(scope="module")
def checkpoint(world):
    d = os.path.join(world.root, "model")
    return d, st_writer.make_checkpoint(d, n_tensors=N_TENSORS, n_shards=3)


@pytest.fixture(scope="module")
def daemon0(world, checkpoint):
    return world.serve(0, checkpoint[0])


def client_config(model_dir: str) -> wcache.CacheConfig:
    # The mock backend reports device capability "mock"; the daemon fills it in.
    return wcache.CacheConfig(model=model_dir, checkpoint_digest=wcache.checkpoint_digest(model_dir),
                              device_capability="mock")


def expected_value(dtype, shape, data):
    if dtype == "F32":
        arr = np.frombuffer(data, "<f4")
    elif dtype == "F16":
        arr = np.frombuffer(data, "<f2").astype(np.float32)
    else:
        arr = (np.frombuffer(data, "<u2").astype("<u4") << 16).view("<f4")
    return arr.reshape(shape)


def wait_until(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def test_attach_gets_every_tensor_zero_copy(world, checkpoint, daemon0):
    model_dir, tensors = checkpoint
    with wcache.attach(client_config(model_dir), device_uuid=world.uuids[0], getenv=world.getenv,
                       client_name="interop-zero-copy") as att:
        assert att.device_uuid == world.uuids[0]
        assert att.socket == world.socket_path(world.uuids[0])
        ts = att.tensors()
        assert set(ts) == set(tensors)
        regions = att.regions
        # The mock's default handles are memfds: mapped from a descriptor,
        # named nowhere in the file system (test_memfd.py covers their life).
        assert regions and all(r.path.startswith("/memfd:wcache-mock-") for r in regions)
        maps = {r.path: arena.mapped_ranges(r.path) for r in regions}
        for name, (_, dtype, shape, data) in tensors.items():
            t = ts[name]
            assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
            assert tuple(t.shape) == tuple(shape), name
            assert t.dtype == {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
            if not data:
                continue
            region = regions[att.specs[name].handle_index]
            ptr = t.data_ptr()
            assert region.contains(ptr, len(data)), f"{name} is not inside the daemon's mapping"
            assert any(lo <= ptr and ptr + len(data) <= hi for lo, hi in maps[region.path]), name
            off = ptr - region.address
            assert region.buffer[off:off + len(data)] == data, f"{name}: bytes differ from the checkpoint"
            np.testing.assert_array_equal(t.to(torch.float32).numpy(), expected_value(dtype, shape, data))


def test_status_says_a_sibling_filled_the_weights(world, checkpoint, daemon0):
    """A second daemon for the same checkpoint on the node copies the weights
    from daemon0's device (peer fill, docs/peer-fill.md): status() says
    where they came from, and a client reads the checkpoint's bytes."""
    model_dir, tensors = checkpoint
    d = world.serve(4, model_dir)
    try:
        st = wcache.status(device_uuid=world.uuids[4], getenv=world.getenv)
        assert (st.filled_from, st.fill_fallback) == ("peer " + world.uuids[0], ""), st.fill_fallback
        assert st.start_phases.bytes_from_peer == st.bytes > 0 and st.start_phases.bytes_loaded == 0
        assert [g.filled_from for g in st.generations] == [st.filled_from]
        assert wcache.status(device_uuid=world.uuids[0], getenv=world.getenv).filled_from == "files"
        with wcache.attach(client_config(model_dir), device_uuid=world.uuids[4], getenv=world.getenv) as att:
            ts = att.tensors()
            for name, (_, dtype, shape, data) in tensors.items():
                np.testing.assert_array_equal(ts[name].to(torch.float32).numpy(), expected_value(dtype, shape, data))
    finally:
        d.signal(signal.SIGTERM)
        assert d.wait(30) == 0, d.log()


def test_digests_agree_with_the_daemon(world, checkpoint, daemon0):
    model_dir, _ = checkpoint
    cfg = client_config(model_dir)
    with wcache.attach(cfg, device_uuid=world.uuids[0], getenv=world.getenv) as att:
        # Checkpoint digest: Go (daemon, from the files it loaded) == Python (headers read here).
        assert att.config.checkpoint_digest == cfg.checkpoint_digest
        # Canonical config digest: Go's digest of its config == Python's digest of the same config.
        assert att.config_digest == att.config.digest()
    ready = world.read_ready(world.uuids[0])
    assert ready["config_digest"] == att.config_digest


def test_config_mismatch_lists_the_differing_fields(world, checkpoint, daemon0):
    model_dir, _ = checkpoint
    # dtype "bf16" against the daemon's default "auto" matches: both sides carry a checkpoint digest.
    cfg = client_config(model_dir).replace(tp_size=2, tp_rank=1, dtype="bf16", extra={"attn_dp": "2"})
    with pytest.raises(wcache.IncompatibleConfigError) as e:
        wcache.attach(cfg, device_uuid=world.uuids[0], getenv=world.getenv)
    diffs = {d.field: d for d in e.value.diffs}
    assert set(diffs) == {"tp_size", "tp_rank", "extra.attn_dp"}, e.value.diffs
    assert (diffs["tp_size"].daemon, diffs["tp_size"].client) == ("1", "2")
    assert (diffs["tp_rank"].daemon, diffs["tp_rank"].client) == ("0", "1")
    assert (diffs["extra.attn_dp"].daemon, diffs["extra.attn_dp"].client) == (None, "2")
    # Another checkpoint (one header differs) is a digest mismatch, whatever its path.
    other = client_config(model_dir).replace(checkpoint_digest="sha256:" + "0" * 64)
    with pytest.raises(wcache.IncompatibleConfigError) as e:
        wcache.attach(other, device_uuid=world.uuids[0], getenv=world.getenv)
    assert [d.field for d in e.value.diffs] == ["checkpoint_digest"]


def test_a_mismatch_far_above_8_kib_keeps_its_structure(world, checkpoint, daemon0):
    # 100 extra keys of 1 KiB: the full diff list is ~100 KiB, far above grpcio's 8 KiB metadata
    # default; the daemon bounds the detail and counts the rest.
    model_dir, _ = checkpoint
    extra = {f"knob{i:03d}": "v" * 1024 for i in range(100)}
    cfg = client_config(model_dir).replace(extra=extra)
    with pytest.raises(wcache.IncompatibleConfigError) as e:
        wcache.attach(cfg, device_uuid=world.uuids[0], getenv=world.getenv)
    assert e.value.diffs and e.value.omitted > 0 and len(e.value.diffs) + e.value.omitted == 100
    for d in e.value.diffs:
        assert d.field in {"extra." + k for k in extra} and d.daemon is None and d.truncated
        assert d.client == "v" * 256
    assert f"+{e.value.omitted} more" in str(e.value)


def test_dtype_aliases_match_the_daemons_spelling(world, checkpoint):
    model_dir, _ = checkpoint
    world.serve(3, model_dir, "--dtype", "bfloat16")
    for spelling in ("bf16", "BF16", "torch.bfloat16", "auto"):
        cfg = client_config(model_dir).replace(dtype=spelling)
        with wcache.attach(cfg, device_uuid=world.uuids[3], getenv=world.getenv) as att:
            assert att.config.dtype == "bfloat16"
    # Without a checkpoint digest on the client, "auto" is compared literally.
    with pytest.raises(wcache.IncompatibleConfigError) as e:
        wcache.attach(client_config(model_dir).replace(checkpoint_digest="", dtype="auto"),
                      device_uuid=world.uuids[3], getenv=world.getenv)
    assert [(d.field, d.daemon, d.client) for d in e.value.diffs] == [("dtype", "bfloat16", "auto")]


def leases_in_status(world, uuid):
    return [(l.pid, l.client_name) for l in wcache.status(device_uuid=uuid, getenv=world.getenv).leases]


def test_lease_shows_in_status_while_held(world, checkpoint, daemon0):
    model_dir, _ = checkpoint
    name = f"interop-status-{os.getpid()}"
    att = wcache.attach(client_config(model_dir), device_uuid=world.uuids[0], getenv=world.getenv, client_name=name)
    try:
        assert (os.getpid(), name) in leases_in_status(world, world.uuids[0])
        cli = world.wcache("status", "--json")
        assert name in cli.stdout, cli.stdout
        assert str(att.lease_id) in cli.stdout
    finally:
        att.release()
    wait_until(lambda: (os.getpid(), name) not in leases_in_status(world, world.uuids[0]), what="lease to go")
    cli = world.wcache("status", "--json")
    json.loads(cli.stdout)
    assert name not in cli.stdout


def test_no_daemon_for_a_gpu_without_one(world):
    with pytest.raises(wcache.NoDaemonError) as e:
        wcache.attach(wcache.CacheConfig(model="/m"), device_uuid=world.uuids[2], getenv=world.getenv)
    assert e.value.socket_path == world.socket_path(world.uuids[2])


def test_unsafe_and_dead_sockets_at_the_daemon_path(world):
    path = world.socket_path(world.uuids[2])
    cfg = wcache.CacheConfig(model="/m")
    try:
        open(path, "w").close()
        with pytest.raises(wcache.UnsafeSocketError, match="not a socket"):
            wcache.attach(cfg, device_uuid=world.uuids[2], getenv=world.getenv)
        os.remove(path)
        os.symlink(world.socket_path(world.uuids[0]), path)  # points at a live daemon's socket
        with pytest.raises(wcache.UnsafeSocketError, match="symbolic link"):
            wcache.attach(cfg, device_uuid=world.uuids[2], getenv=world.getenv)
        os.remove(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.close()
        with pytest.raises(wcache.DaemonDeadError):
            wcache.attach(cfg, device_uuid=world.uuids[2], getenv=world.getenv)
    finally:
        if os.path.lexists(path):
            os.remove(path)


def stop_rpc(socket_path: str, force: bool) -> None:
    with grpc.insecure_channel("unix://" + socket_path) as ch:
        stop = ch.unary_unary(pb.METHOD_STOP, request_serializer=pb.StopRequest.SerializeToString,
                              response_deserializer=pb.StopResponse.FromString)
        stop(pb.StopRequest(force=force), timeout=30)


def test_forced_stop_fires_on_daemon_gone(world, checkpoint):
    model_dir, _ = checkpoint
    d = world.serve(1, model_dir)
    gone, fired = [], threading.Event()
    att = wcache.attach(client_config(model_dir), device_uuid=world.uuids[1], getenv=world.getenv,
                        on_daemon_gone=lambda g: (gone.append(g), fired.set()))
    ts = att.tensors()
    stop_rpc(att.socket, force=True)
    assert fired.wait(15), "on_daemon_gone did not fire"
    assert gone[0].code == grpc.StatusCode.UNAVAILABLE, gone[0]
    assert not att.active and att.gone_reason == gone[0]
    assert d.wait(30) == 0, d.log()
    # The daemon removed its socket: the next attach finds no daemon.
    with pytest.raises(wcache.NoDaemonError):
        wcache.attach(client_config(model_dir), device_uuid=world.uuids[1], getenv=world.getenv)
    # posix-shm pages stay readable after the daemon unlinked its files.
    name, (_, _, _, data) = next((k, v) for k, v in checkpoint[1].items() if v[3])
    region = att.regions[att.specs[name].handle_index]
    off = ts[name].data_ptr() - region.address
    assert region.buffer[off:off + len(data)] == data
    att.release()


def test_sigterm_drains_with_a_notice_and_release_lets_it_exit(world, checkpoint):
    model_dir, _ = checkpoint
    d = world.serve(1, model_dir)
    notices, gone = [], []
    holder = {}

    def on_notice(n):
        notices.append(n)
        if n.kind == wcache.NOTICE_DRAINING:
            holder["att"].release()  # what an engine does on drain: drop the weights, release

    holder["att"] = wcache.attach(client_config(model_dir), device_uuid=world.uuids[1], getenv=world.getenv,
                                  on_notice=on_notice, on_daemon_gone=gone.append)
    d.signal(signal.SIGTERM)
    assert d.wait(30) == 0, d.log()
    assert notices and notices[0].kind == wcache.NOTICE_DRAINING
    assert notices[0].deadline_unix_ms > int(time.time() * 1000) - 60_000
    assert gone == [], "a lease the client released is not 'daemon gone'"
    assert not os.path.exists(world.socket_path(world.uuids[1]))


def test_killed_daemon_fires_on_daemon_gone_and_leaves_a_dead_socket(world, checkpoint):
    model_dir, _ = checkpoint
    d = world.serve(1, model_dir)
    fired = threading.Event()
    att = wcache.attach(client_config(model_dir), device_uuid=world.uuids[1], getenv=world.getenv,
                        on_daemon_gone=lambda g: fired.set())
    os.killpg(d.pid, signal.SIGKILL)
    d.wait(30)
    assert fired.wait(15), "on_daemon_gone did not fire after SIGKILL"
    assert os.path.exists(world.socket_path(world.uuids[1])), "SIGKILL cannot remove the socket"
    with pytest.raises(wcache.DaemonDeadError):
        wcache.attach(client_config(model_dir), device_uuid=world.uuids[1], getenv=world.getenv)
    att.release()


def test_worked_example_against_the_daemon(world, checkpoint, daemon0):
    """clients/python/examples/engine_loader.py, run as an engine would run it."""
    import subprocess
    import sys

    model_dir, _ = checkpoint
    script = os.path.join(harness.REPO, "clients", "python", "examples", "engine_loader.py")
    base = [sys.executable, script, "--model", model_dir, "--device-uuid", world.uuids[0], "--device-capability", "mock"]
    run = lambda *extra: subprocess.run([*base, *extra], env=world.env, capture_output=True, text=True, timeout=120)  # noqa: E731
    ok = run()
    assert ok.returncode == 0, ok.stderr
    assert f"{N_TENSORS} tensors" in ok.stdout and f"from wcache daemon {world.uuids[0]}" in ok.stdout
    assert "0 bytes copied" in ok.stdout
    mismatch = run("--tp-size", "2")
    assert mismatch.returncode == 2 and "config mismatch: tp_size: daemon='1' engine='2'" in mismatch.stderr
    disk = subprocess.run([*base[:5], world.uuids[2], *base[6:]], env=world.env, capture_output=True, text=True,
                          timeout=120)
    assert disk.returncode == 0 and "from disk" in disk.stdout, disk.stderr


def python_block(doc: str) -> str:
    """The first ```python block of a document of the repository, verbatim."""
    return harness.python_blocks(doc)[0]


@pytest.mark.parametrize("doc, serve_flags", [
    ("README.md", ()),
    ("docs/python-client.md", ("--engine-name", "my-engine", "--engine-version", "1.4")),
])
def test_documented_snippets_run_as_printed_on_the_mock(world, checkpoint, doc, serve_flags):
    # The snippet's free names, as its comment describes them; then the snippet itself, unchanged,
    # in a Python whose environment says WCACHE_BACKEND=mock and has no GPU.
    model_dir, _ = checkpoint
    index = 4 if serve_flags else 5
    daemon = world.serve(index, model_dir, *serve_flags)
    prelude = (f"path, tp_size, rank, local_gpu = {model_dir!r}, 1, 0, {index}\n"
               "def load_from_disk(p): raise SystemExit('fell back to disk')\n"
               "def drain_and_exit(deadline): pass\n")
    script = prelude + python_block(doc) + "\nprint('tensors', len(state_dict))\n"
    env = dict(world.env, WCACHE_BACKEND="mock", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.path.join(harness.REPO, "clients", "python", "src"))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"tensors {N_TENSORS}" in r.stdout, (r.stdout, r.stderr)
    daemon.signal(signal.SIGTERM)
    daemon.wait(30)


@pytest.mark.parametrize("devices", ["3", None])
def test_mock_device_uuids_are_the_mocks(world, devices):
    env = dict(world.env)
    if devices is None:  # the harness's explicit list
        devices = env["WCACHE_MOCK_DEVICES"]
    env["WCACHE_MOCK_DEVICES"] = devices
    out = subprocess.run([os.path.join(harness.bin_dir(), "wcache"), "devices", "--backend", "mock", "--json"],
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    want = [d["uuid"] for d in json.loads(out)]
    assert wcache.mock_device_uuids(env) == want
    assert [wcache.device_uuid(i, backend="mock", getenv=env) for i in range(len(want))] == want
    assert wcache.device_capability(0, getenv=dict(env, WCACHE_BACKEND="mock")) == wcache.MOCK_CAPABILITY == "mock"
    with pytest.raises(wcache.WcacheError, match="out of range"):
        wcache.device_capability(len(want), backend="mock", getenv=env)


def test_documented_mismatch_decoding_runs_as_printed(world, checkpoint, daemon0, capsys):
    # docs/protocol.md decodes the ConfigMismatch detail with plain grpcio and protobuf; its free
    # names are a raw stub, a mismatching AttachRequest and the two message classes.
    with open(os.path.join(harness.REPO, "docs", "protocol.md"), encoding="utf-8") as f:
        doc = f.read()
    after = doc.split("Decoding it without helpers", 1)[1]
    snippet = after.split("```python\n", 1)[1].split("```", 1)[0]
    model_dir, _ = checkpoint
    cfg = client_config(model_dir).replace(tp_size=2, tp_rank=1, extra={"attn_dp": "2"})
    with grpc.insecure_channel("unix://" + world.socket_path(world.uuids[0])) as ch:
        class Stub:
            Attach = ch.unary_stream(pb.METHOD_ATTACH, request_serializer=pb.AttachRequest.SerializeToString,
                                     response_deserializer=pb.AttachEvent.FromString)
        scope = {"grpc": grpc, "stub": Stub, "request": pb.AttachRequest(config=cfg.to_proto()),
                 "Status": pb.RpcStatus, "ConfigMismatch": pb.ConfigMismatch}
        exec(compile(snippet, "docs/protocol.md", "exec"), scope)  # noqa: S102 - our own documentation
    printed = capsys.readouterr().out.splitlines()
    assert sorted(line.strip() for line in printed) == ["extra.attn_dp None 2", "tp_rank 0 1", "tp_size 1 2"], printed
