"""Find the daemon of the GPU this process loads on, and decide whether to trust its socket.

Resolution order (the same as the Go client):

1. An explicit socket path wins.
2. Else an explicit device UUID (canonical: ``GPU-…``, ``MIG-…``, or whatever
   the daemon's backend reports) is expanded through the socket template.
3. Else the UUID of ``device_index`` (default: torch's current device) is
   read from the GPU itself and expanded.

Checks, all without following symlinks:

* the socket path does not exist → NoDaemonError (the only fallback case);
* it is a symlink, not a socket, or owned by a uid other than ours (and not
  in allow_owners) → UnsafeSocketError;
* nobody accepts connections on it → DaemonDeadError;
* any other failure (permission denied, bad template, …) is raised as is.
"""

from __future__ import annotations

import errno
import os
import re
import socket as socketlib
import stat
from dataclasses import dataclass
from typing import Iterable, Optional

from ._device import device_uuid as read_device_uuid
from ._errors import DaemonDeadError, InvalidUUIDError, NoDaemonError, UnsafeSocketError, WcacheError
from ._paths import Getenv, Layout, check_socket_path, validate_device_uuid

_BARE_HEX_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class Target:
    """Where to connect: the socket path, and the device UUID it was derived
    from or that the caller named (None when the caller gave only a socket
    path)."""

    socket: str
    device_uuid: Optional[str]


def _current_device_index() -> int:
    try:
        import torch  # noqa: PLC0415
    except ImportError as exc:
        raise WcacheError("cannot tell which GPU this process loads on without PyTorch: "
                          "pass socket=, device_uuid= or device_index=") from exc
    if not torch.cuda.is_available():
        raise WcacheError("PyTorch sees no GPU: pass socket= or device_uuid= to choose a daemon")
    return torch.cuda.current_device()


def check_device_uuid_arg(uuid: str) -> str:
    """Validate a caller-supplied device UUID. PyTorch's bare 8-4-4-4-12 form
    is refused with a hint: it would name a socket no daemon uses, and the
    resulting NoDaemonError would silently fall back to disk."""
    validate_device_uuid(uuid)
    if _BARE_HEX_UUID.match(uuid):
        raise InvalidUUIDError(uuid, "this is PyTorch's form without the vendor prefix; convert it with "
                                     "wcache.canonical_device_uuid(uuid, platform='cuda' or 'rocm')")
    return uuid


def resolve(socket: Optional[str] = None, device_uuid: Optional[str] = None,
            device_index: Optional[int] = None, getenv: Getenv = None) -> Target:
    """Resolve the socket path (see the module docstring for the order).

    With an explicit socket, device_uuid or device_index (when given) still
    name the GPU the caller expects: attach then checks that the daemon serves
    that GPU. Raises TemplateError, InvalidUUIDError, SocketPathTooLongError,
    WcacheError (no torch / no GPU to read a UUID from).
    """
    if device_uuid is not None:
        uuid: Optional[str] = check_device_uuid_arg(device_uuid)
    elif device_index is not None or socket is None:
        index = device_index if device_index is not None else _current_device_index()
        uuid = read_device_uuid(index, getenv=getenv)
    else:
        uuid = None
    if socket is not None:
        if not isinstance(socket, str) or not socket:
            raise ValueError("socket must be a non-empty path")
        return Target(socket=check_socket_path(socket), device_uuid=uuid)
    paths = Layout.from_env(getenv=getenv).for_device(uuid)
    return Target(socket=paths.socket, device_uuid=uuid)


def check_socket(target: Target, allow_owners: Iterable[int] = ()) -> None:
    """lstat the socket path and refuse anything but a socket owned by us (or
    by a uid in allow_owners, e.g. a daemon's service account).

    Raises NoDaemonError (absent), UnsafeSocketError (symlink, not a socket,
    other owner) or WcacheError (lstat failed, e.g. permission denied).
    """
    try:
        st = os.lstat(target.socket)
    except FileNotFoundError:
        raise NoDaemonError(target.socket, target.device_uuid, foreign_daemons(os.geteuid())) from None
    except OSError as exc:
        raise WcacheError(f"inspect wcache socket {target.socket}: {exc.strerror}") from exc
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeSocketError(target.socket, "it is a symbolic link")
    if not stat.S_ISSOCK(st.st_mode):
        raise UnsafeSocketError(target.socket, f"it is not a socket ({_kind(st.st_mode)})")
    if st.st_uid != os.geteuid() and st.st_uid not in set(allow_owners):
        raise UnsafeSocketError(target.socket, f"it is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})")


@dataclass(frozen=True)
class ForeignDaemon:
    """A ``wcache serve`` process of another user, found in /proc."""

    pid: int
    uid: int
    args: tuple

    @property
    def command(self) -> str:
        return "wcache " + " ".join(self.args)


def foreign_daemons(uid: int, proc: str = "/proc") -> list:
    """The ``wcache serve`` processes (launch's daemons included) whose
    owner is not uid, by pid, as the Go client's daemonfile.ForeignDaemons
    finds them: /proc only (no signal, no socket); a process whose command
    line cannot be read is skipped; no /proc: []."""
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    found = []
    for name in names:
        if not name.isdigit() or int(name) <= 0:
            continue
        try:
            owner = os.stat(os.path.join(proc, name)).st_uid
            if owner == uid:
                continue
            with open(os.path.join(proc, name, "cmdline"), "rb") as f:
                raw = f.read()
        except OSError:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")] if raw else []
        if not argv or os.path.basename(argv[0]) != "wcache":
            continue
        command = next((a for a in argv[1:] if not a.startswith("-")), None)
        if command != "serve":
            continue
        found.append(ForeignDaemon(int(name), owner, tuple(argv[1:])))
    return sorted(found, key=lambda d: d.pid)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return f"mode {mode:#o}"


def probe(target: Target, timeout: float = 5.0) -> None:
    """Connect once to tell a crashed daemon from a live one before gRPC
    (whose own connection errors are retried and reported only as UNAVAILABLE).

    Raises DaemonDeadError (connection refused), NoDaemonError (the socket
    vanished since check_socket) or WcacheError (anything else).
    """
    s = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM | socketlib.SOCK_CLOEXEC)
    s.settimeout(timeout)
    try:
        s.connect(target.socket)
    except ConnectionRefusedError:
        raise DaemonDeadError(target.socket) from None
    except FileNotFoundError:
        raise NoDaemonError(target.socket, target.device_uuid) from None
    except socketlib.timeout as exc:
        raise WcacheError(f"connect to wcache daemon at {target.socket}: timed out after {timeout}s") from exc
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            raise DaemonDeadError(target.socket) from None
        raise WcacheError(f"connect to wcache daemon at {target.socket}: {exc.strerror}") from exc
    finally:
        s.close()
