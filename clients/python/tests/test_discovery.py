"""Socket discovery and safety checks: only an absent socket means "no daemon"."""

from __future__ import annotations

import os
import socket

import pytest

import wcache
from wcache import (DaemonDeadError, InvalidUUIDError, NoDaemonError, SocketPathTooLongError, TemplateError,
                    UnsafeSocketError)
from wcache.discovery import Target, check_socket, probe, resolve

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
