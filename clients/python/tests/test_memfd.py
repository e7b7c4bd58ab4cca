"""memfd handles (the mock's default) against the real Go daemon: the weights are
descriptors, so a client's mapping outlives the daemon and its plugin, nothing
is named in /dev/shm, and the memory goes when the last holder closes it.

Needs bin/wcache and bin/wcache-backend-mock (`make build`).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import st_writer

pytestmark = pytest.mark.interop

# A client in its own process: attach, map, report the memfds it maps, then
# check the bytes when told to (after the daemon is gone) and exit when told to.
CLIENT = textwrap.dedent("""
    import hashlib, json, sys
    import wcache
    socket, model, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    cfg = wcache.CacheConfig(model=model, checkpoint_digest=wcache.checkpoint_digest(model), device_capability="mock")
    att = wcache.attach(cfg, socket=socket, library="numpy")
    arrays = att.tensors()
    names = sorted({line.split(None, 5)[5].strip() for line in open("/proc/self/maps")
                    if "/memfd:wcache-mock-" in line})
    print(json.dumps({"memfds": names, "kinds": [h.kind for h in att.manifest.handles]}), flush=True)
    for line in sys.stdin:
        if line.strip() == "check":
            bad = [n for n, want in expected.items() if hashlib.sha256(arrays[n].tobytes()).hexdigest() != want]
            print("ok" if not bad else "bad " + ",".join(bad), flush=True)
        elif line.strip() == "exit":
            break
""")


def _children(pid: int):
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(e))
    return out


def _plugin_pid(daemon_pid: int) -> int:
    for c in _children(daemon_pid):
        with open(f"/proc/{c}/comm") as f:
            if f.read().startswith("wcache-backend-"):
                return c
    raise AssertionError(f"daemon {daemon_pid} has no backend plugin child")


def _holders(names):
    """pid → what of names it still holds (a mapping or a descriptor), over every process."""
    held = {}
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        found = set()
        try:
            with open(f"/proc/{e}/maps") as f:
                found |= {n for line in f for n in names if n in line}
            for fd in os.listdir(f"/proc/{e}/fd"):
                try:
                    target = os.readlink(f"/proc/{e}/fd/{fd}")
                except OSError:
                    continue
                found |= {n for n in names if n in target}
        except OSError:
            continue
        if found:
            held[int(e)] = found
    return held


def _shmem_kib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1])
    return 0


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and _state(pid) != "Z":
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} still alive")
        time.sleep(0.02)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return s[s.rindex(")") + 2]
    except OSError:
        return ""


def test_mapping_outlives_daemon_and_plugin_and_memory_goes_with_the_last_holder(world):
    model = os.path.join(world.root, "model")
    tensors = st_writer.make_checkpoint(model, n_tensors=24, n_shards=2)
    expected = {n: hashlib.sha256(t[3]).hexdigest() for n, t in tensors.items()}
    d = world.serve(0, model)
    plugin = _plugin_pid(d.pid)
    env = dict(world.env, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "src"))
    client = subprocess.Popen([sys.executable, "-c", CLIENT, world.socket_path(world.uuids[0]), model, json.dumps(expected)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(client.stdout.readline())
        assert first["kinds"] and set(first["kinds"]) == {"memfd"}, first
        memfds = first["memfds"]
        assert memfds, "the client maps no memfd"

        # SIGKILL both: no cleanup code of theirs runs.
        os.kill(plugin, signal.SIGKILL)
        os.kill(d.pid, signal.SIGKILL)
        d.proc.wait(10)
        _wait_gone(plugin)
        client.stdin.write("check\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "ok", "the client's bytes changed after the daemon died"
        # Only the client holds the memory now.
        assert set(_holders(memfds)) == {client.pid}, _holders(memfds)
        # Nothing named in /dev/shm: the mock folder was never used, and
        # the default one has no file of this plugin.
        assert os.listdir(world.mock_dir) == [], os.listdir(world.mock_dir)
        default = f"/dev/shm/wcache-mock-{os.geteuid()}"
        if os.path.isdir(default):
            assert not [f for f in os.listdir(default) if f.startswith(f"{plugin}-")]
        shmem_held = _shmem_kib()

        client.stdin.write("exit\n")
        client.stdin.flush()
        assert client.wait(10) == 0
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    # The last holder is gone: so is every reference to the memory, and
    # the kernel freed it (Shmem is machine-wide: logged, not asserted).
    assert _holders(memfds) == {}
    print(f"Shmem {shmem_held} KiB with the client, {_shmem_kib()} KiB after it exited")


def test_descriptor_channel_refuses_a_wrong_token_and_an_ended_lease(world):
    from wcache import _fdchannel as fdchannel  # noqa: PLC0415
    import wcache  # noqa: PLC0415

    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=8, n_shards=1)
    world.serve(0, model)
    sock = world.socket_path(world.uuids[0])
    cfg = wcache.CacheConfig(model=model, checkpoint_digest=wcache.checkpoint_digest(model), device_capability="mock")
    att = wcache.attach(cfg, socket=sock, library="numpy")
    m = att.manifest
    assert len(m.fd_token) == fdchannel.TOKEN_SIZE
    got = fdchannel.fetch(sock, fdchannel.OP_LEASE, m.lease_id, bytes(m.fd_token))
    try:
        assert sorted(got) == list(range(len(m.handles)))
        assert all(size == m.handles[i].size for i, (size, _) in got.items())
    finally:
        for _, fd in got.values():
            os.close(fd)
    wrong = bytes([m.fd_token[0] ^ 1]) + bytes(m.fd_token[1:])
    with pytest.raises(fdchannel.RefusedError) as exc:
        fdchannel.fetch(sock, fdchannel.OP_LEASE, m.lease_id, wrong)
    assert exc.value.status == 4 and "wrong token" in str(exc.value)
    att.release()
    deadline = time.monotonic() + 5
    while True:
        try:
            for _, fd in fdchannel.fetch(sock, fdchannel.OP_LEASE, m.lease_id, bytes(m.fd_token)).values():
                os.close(fd)
        except fdchannel.RefusedError as err:
            assert err.status == 3, err
            break
        assert time.monotonic() < deadline, "an ended lease still gets its descriptors"
        time.sleep(0.02)


def test_a_client_says_which_handle_kinds_it_maps(world):
    """A client that maps posix-shm only (handle_kinds) is refused by a
    memfd daemon before a lease exists, with HandleKindsError naming both
    sides and how to fix it; the default (every built-in kind) attaches."""
    import wcache  # noqa: PLC0415

    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=4, n_shards=1)
    world.serve(0, model)
    sock = world.socket_path(world.uuids[0])
    cfg = wcache.CacheConfig(model=model, checkpoint_digest=wcache.checkpoint_digest(model), device_capability="mock")
    with pytest.raises(wcache.HandleKindsError) as exc:
        wcache.attach(cfg, socket=sock, handle_kinds=["posix-shm"])
    assert exc.value.daemon_kinds == ["memfd"] and exc.value.client_kinds == ["posix-shm"]
    assert "handle=posix-shm" in str(exc.value)
    assert isinstance(exc.value, wcache.DaemonError)
    status = world.wcache_json("status", "--json")
    assert all(not row.get("leases") for row in status), status
    att = wcache.attach(cfg, socket=sock, library="numpy")
    try:
        assert len(att.tensors()) == 4
    finally:
        att.release()


def test_a_lease_survives_a_takeover_without_on_daemon_gone(world):
    """`wcache serve --takeover` replaces the daemon under an attached client:
    the lease re-attaches to the successor (the same generation), on_daemon_gone
    never fires, and the tensors keep the checkpoint's bytes."""
    import wcache  # noqa: PLC0415

    model = os.path.join(world.root, "model")
    tensors = st_writer.make_checkpoint(model, n_tensors=12, n_shards=2)
    expected = {n: hashlib.sha256(t[3]).hexdigest() for n, t in tensors.items()}
    old = world.serve(0, model)
    sock = world.socket_path(world.uuids[0])
    cfg = wcache.CacheConfig(model=model, checkpoint_digest=wcache.checkpoint_digest(model), device_capability="mock")
    gone = []
    att = wcache.attach(cfg, socket=sock, library="numpy", getenv=world.getenv, on_daemon_gone=gone.append)
    try:
        arrays = att.tensors()
        generation = att.generation
        try:
            new = world.serve(0, None, "--takeover")
        except AssertionError:
            print("the daemon taken over:\n" + old.log())
            raise
        assert old.wait(10) == 0, old.log()
        # The lease resumes on the successor: its Status lists it.
        deadline = time.monotonic() + 30
        while True:
            rows = [r for r in world.wcache_json("status", "--json") if r.get("pid") == new.pid]
            if rows and rows[0].get("leases"):
                break
            assert time.monotonic() < deadline and not att.gone.is_set(), (att.gone_reason, rows, new.log())
            time.sleep(0.05)
        assert not att.gone.is_set() and not gone, (att.gone_reason, gone, new.log())
        assert [lease["id"] for lease in rows[0]["leases"]] == [att.lease_id], (rows, att.lease_id)
        assert wcache.status(socket=sock, getenv=world.getenv).generation == generation
        bad = [n for n, want in expected.items() if hashlib.sha256(arrays[n].tobytes()).hexdigest() != want]
        assert not bad, bad
        assert att.active
    finally:
        att.release()
    assert not gone, gone
