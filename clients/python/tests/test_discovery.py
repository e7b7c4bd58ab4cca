"""Socket discovery and safety checks: only an absent socket means "no daemon"."""

from __future__ import annotations

import os
import socket

import pytest

import wcache
from wcache import (DaemonDeadError, InvalidUUIDError, NoDaemonError, SocketPathTooLongError, TemplateError,
                    UnsafeSocketError)
from wcache._discovery import Target, check_socket, probe, resolve

CFG = wcache.CacheConfig(model="/m")
UUID = "GPU-edfee158-11c1-52b8-0517-92f30e7fac88"


def env_for(directory):
    return {"WCACHE_SOCKET_TEMPLATE": directory + "/{device_uuid}.sock",
            "WCACHE_READY_TEMPLATE": directory + "/{device_uuid}.ready.json"}


def listening_socket(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    return s


def test_explicit_socket_wins(short_tmp):
    t = resolve(socket=short_tmp + "/explicit.sock", getenv=env_for("/nowhere"))
    assert t == Target(socket=short_tmp + "/explicit.sock", device_uuid=None)
    # A device UUID given with it is kept, to check the daemon's answer against.
    assert resolve(socket="/x.sock", device_uuid=UUID).device_uuid == UUID


def test_device_uuid_goes_through_the_template(short_tmp):
    t = resolve(device_uuid=UUID, getenv=env_for(short_tmp))
    assert t.socket == f"{short_tmp}/{UUID}.sock" and t.device_uuid == UUID
    t = resolve(device_uuid=UUID, getenv={"XDG_RUNTIME_DIR": short_tmp})
    assert t.socket == f"{short_tmp}/wcache/{UUID}.sock"


def test_bad_inputs_raise_instead_of_pretending_there_is_no_daemon(short_tmp):
    with pytest.raises(InvalidUUIDError, match="PyTorch's form"):
        resolve(device_uuid="edfee158-11c1-52b8-0517-92f30e7fac88", getenv=env_for(short_tmp))
    with pytest.raises(InvalidUUIDError):
        resolve(device_uuid="../../etc/passwd", getenv=env_for(short_tmp))
    with pytest.raises(TemplateError, match="WCACHE_SOCKET_TEMPLATE"):
        resolve(device_uuid=UUID, getenv={"WCACHE_SOCKET_TEMPLATE": "/run/wcache-rank0.sock"})
    with pytest.raises(SocketPathTooLongError):
        resolve(socket="/" + "s" * 120)


def test_absent_socket_is_no_daemon(short_tmp):
    with pytest.raises(NoDaemonError) as e:
        wcache.attach(CFG, device_uuid=UUID, getenv=env_for(short_tmp))
    assert e.value.socket_path == f"{short_tmp}/{UUID}.sock"
    assert e.value.device_uuid == UUID
    # Absent default directory: no daemon either (and the client creates nothing).
    xdg = short_tmp + "/xdg"
    with pytest.raises(NoDaemonError):
        wcache.attach(CFG, device_uuid=UUID, getenv={"XDG_RUNTIME_DIR": xdg})
    assert not os.path.exists(xdg)


def test_regular_file_at_the_socket_path_is_unsafe(short_tmp):
    path = f"{short_tmp}/{UUID}.sock"
    open(path, "w").close()
    with pytest.raises(UnsafeSocketError, match="not a socket \\(a regular file\\)"):
        wcache.attach(CFG, device_uuid=UUID, getenv=env_for(short_tmp))


def test_symlink_to_a_live_socket_is_unsafe(short_tmp):
    real = short_tmp + "/real.sock"
    s = listening_socket(real)
    try:
        os.symlink(real, f"{short_tmp}/{UUID}.sock")
        with pytest.raises(UnsafeSocketError, match="symbolic link"):
            wcache.attach(CFG, device_uuid=UUID, getenv=env_for(short_tmp))
        with pytest.raises(UnsafeSocketError, match="symbolic link"):
            wcache.status(socket=f"{short_tmp}/{UUID}.sock")
    finally:
        s.close()


def test_socket_owned_by_another_user_is_unsafe(short_tmp):
    if os.geteuid() != 0:
        pytest.skip("needs root to create a socket owned by another uid (CI runs as root)")
    path = f"{short_tmp}/{UUID}.sock"
    s = listening_socket(path)
    try:
        os.chown(path, 65534, 65534)
        with pytest.raises(UnsafeSocketError, match="owned by uid 65534"):
            wcache.attach(CFG, device_uuid=UUID, getenv=env_for(short_tmp))
        # An explicitly allowed owner (a daemon's service account) passes the check.
        check_socket(Target(socket=path, device_uuid=UUID), allow_owners=[65534])
    finally:
        s.close()


def test_socket_nobody_listens_on_is_a_dead_daemon(short_tmp):
    path = f"{short_tmp}/{UUID}.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)  # bound, never listening: what a crashed daemon leaves behind
    s.close()
    with pytest.raises(DaemonDeadError, match="not running"):
        wcache.attach(CFG, device_uuid=UUID, getenv=env_for(short_tmp))
    with pytest.raises(DaemonDeadError):
        wcache.status(socket=path)


def test_check_and_probe_accept_a_live_socket(short_tmp):
    path = short_tmp + "/live.sock"
    s = listening_socket(path)
    try:
        t = Target(socket=path, device_uuid=None)
        check_socket(t)
        probe(t)
    finally:
        s.close()


def test_foreign_daemons_reads_serve_processes_of_other_users(tmp_path):
    """/proc as the Go client reads it: `wcache serve` of another uid is
    listed, this uid's own, other commands and unreadable entries are not."""
    from wcache._discovery import foreign_daemons  # noqa: PLC0415

    def proc(pid, *argv):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")

    proc(40, "/opt/bin/wcache", "serve", "--backend", "cuda", "--gpu-id", "0")
    proc(7, "wcache", "--log-level=debug", "serve", "--gpu-id", "1")
    proc(41, "/opt/bin/wcache", "status")
    proc(42, "/usr/bin/python3", "wcache", "serve")
    (tmp_path / "43").mkdir()  # no cmdline: skipped
    (tmp_path / "self").mkdir()
    owner = os.stat(tmp_path).st_uid
    got = foreign_daemons(owner + 1, proc=str(tmp_path))
    assert [(d.pid, d.uid) for d in got] == [(7, owner), (40, owner)]
    assert got[1].command == "wcache serve --backend cuda --gpu-id 0"
    assert foreign_daemons(owner, proc=str(tmp_path)) == []
    assert foreign_daemons(owner, proc=str(tmp_path / "absent")) == []


@pytest.mark.interop
def test_another_user_is_told_how_to_share():
    """An engine of another uid finds no daemon of its own: NoDaemonError
    (still the load-from-disk case) names root's daemon and how to share it."""
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    import harness  # noqa: PLC0415

    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as uid 65534")
    python = "/usr/bin/python3"
    if subprocess.run([python, "-c", "import grpc, google.protobuf"], capture_output=True).returncode != 0:
        pytest.skip(f"{python} lacks grpcio or protobuf (the client runs as uid 65534, outside root's environments)")
    harness.require_binaries()
    with harness.World(devices=1) as w:
        d = w.serve(0, None)
        src = os.path.join(harness.REPO, "clients", "python", "src")
        code = ("import json, sys; sys.path.insert(0, %r); import wcache\n"
                "try:\n"
                "    wcache.attach(wcache.CacheConfig(model='/m', device_capability='mock'), device_uuid=%r)\n"
                "except wcache.NoDaemonError as e:\n"
                "    print(json.dumps({'msg': str(e), 'pids': [o.pid for o in e.others], 'uids': [o.uid for o in e.others]}))\n"
                % (src, w.uuids[0]))

        def as_nobody():
            os.setgid(65534)
            os.setuid(65534)

        r = subprocess.run([python, "-c", code], capture_output=True, text=True, preexec_fn=as_nobody,
                           env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"}, timeout=120)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert d.proc.pid in got["pids"] and 0 in got["uids"], got
        assert f"pid {d.proc.pid} (uid 0: wcache serve" in got["msg"], got["msg"]
        assert "--socket-group" in got["msg"] and "--allow-uid 65534" in got["msg"], got["msg"]
