"""The daemon's descriptor channel: receive a lease's descriptors with SCM_RIGHTS.

A daemon whose handles are descriptors (kind ``memfd``; ``cuda-vmm-fd``)
listens on a SOCK_SEQPACKET socket beside its gRPC socket, at
``<socket>.fd``. A client holding a lease sends one 48-byte request (magic
``WCFD``, version 1, op 1, the manifest's ``lease_id`` and its 32-byte
``fd_token``) and receives a reply header followed by one message per
descriptor handle, each carrying one descriptor. The format is specified
byte by byte in docs/protocol.md, "Descriptor channel"; core/fdchannel is
the Go side.
"""

from __future__ import annotations

import array
import os
import socket
import stat
import struct
from typing import Dict, Tuple

from ._errors import ProtocolError, WcacheError

SUFFIX = ".fd"
MAGIC = b"WCFD"
VERSION = 1
OP_LEASE = 1
OP_PUBLISH = 2  # the writable descriptors of a publish in progress (ident: publish_id)
TOKEN_SIZE = 32
REPLY_HEADER = 16
MAX_MESSAGE = 1024
DESCRIPTOR_SIZE = 24
KIND_DESCRIPTOR = 0x10
MAX_DESCRIPTORS = 4096

STATUS_NAMES = {0: "ok", 1: "bad request", 2: "permission denied", 3: "no such lease", 4: "wrong token",
                5: "unavailable"}


class RefusedError(WcacheError):
    """The daemon refused the request: ``status`` (int, see STATUS_NAMES) and its ``message``."""

    def __init__(self, path: str, status: int, message: str):
        super().__init__(f"descriptor channel {path} refused the request: "
                         f"{STATUS_NAMES.get(status, f'status {status}')}: {message}")
        self.path = path
        self.status = status
        self.message = message


def path_for(socket_path: str) -> str:
    """The descriptor channel of the daemon listening on socket_path."""
    return socket_path + SUFFIX


def request(op: int, ident: int, token: bytes) -> bytes:
    """The 48-byte request message."""
    if len(token) != TOKEN_SIZE:
        raise ProtocolError(f"fd_token has {len(token)} bytes, want {TOKEN_SIZE}")
    return MAGIC + struct.pack("<HHQ", VERSION, op, ident) + bytes(token)


def _close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _recv(sock: socket.socket, size: int, maxfds: int) -> Tuple[bytes, list]:
    fds = array.array("i")
    data, ancdata, flags, _ = sock.recvmsg(size, socket.CMSG_SPACE(max(maxfds, 1) * fds.itemsize))
    got = []
    for level, typ, cdata in ancdata:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(cdata[:len(cdata) - (len(cdata) % a.itemsize)])
            got.extend(a)
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(got) > maxfds:
        _close_all(got)
        raise ProtocolError("descriptor channel: message or its descriptors truncated")
    return data, got


def _check_head(b: bytes, what: str) -> None:
    if b[:4] != MAGIC:
        raise ProtocolError(f"descriptor channel: {what} has magic {b[:4]!r}")
    version = struct.unpack_from("<H", b, 4)[0]
    if version != VERSION:
        raise ProtocolError(f"descriptor channel: {what} has version {version}, this client speaks {VERSION}")


def fetch(socket_path: str, op: int, ident: int, token: bytes, timeout: float = 10.0) -> Dict[int, Tuple[int, int]]:
    """Ask the daemon at socket_path for the descriptors of lease (or publish) ident.

    Returns handle index → (size, descriptor); the caller owns the
    descriptors (os.close). Raises RefusedError when the daemon refuses,
    UnsafeSocketError-like WcacheError when the path is not a socket,
    ProtocolError for a malformed answer, WcacheError for I/O errors.
    """
    path = path_for(socket_path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise WcacheError(f"descriptor channel {path}: {exc.strerror} (a daemon older than descriptor handles?)") \
            from exc
    if not stat.S_ISSOCK(st.st_mode):
        raise WcacheError(f"descriptor channel {path} is not a socket: refusing it")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    out: Dict[int, Tuple[int, int]] = {}
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            sock.sendall(request(op, ident, token))
            data, fds = _recv(sock, REPLY_HEADER + MAX_MESSAGE, 0)
        except OSError as exc:
            raise WcacheError(f"descriptor channel {path}: {exc}") from exc
        _close_all(fds)
        if len(data) < REPLY_HEADER:
            raise ProtocolError(f"descriptor channel {path}: reply of {len(data)} bytes")
        _check_head(data, "reply")
        status, count, msglen = struct.unpack_from("<HII", data, 6)
        if msglen != len(data) - REPLY_HEADER or msglen > MAX_MESSAGE:
            raise ProtocolError(f"descriptor channel {path}: reply message of {msglen} bytes in {len(data)}")
        if status != 0:
            raise RefusedError(path, status, data[REPLY_HEADER:].decode("utf-8", "replace"))
        if count > MAX_DESCRIPTORS:
            raise ProtocolError(f"descriptor channel {path}: {count} descriptors announced")
        for _ in range(count):
            try:
                data, fds = _recv(sock, DESCRIPTOR_SIZE + 1, 1)
            except OSError as exc:
                raise WcacheError(f"descriptor channel {path}: {exc}") from exc
            if len(data) != DESCRIPTOR_SIZE or len(fds) != 1:
                _close_all(fds)
                raise ProtocolError(f"descriptor channel {path}: descriptor message of {len(data)} bytes "
                                    f"with {len(fds)} descriptors")
            try:
                _check_head(data, "descriptor message")
            except ProtocolError:
                _close_all(fds)
                raise
            kind, index, _reserved, size = struct.unpack_from("<HIIQ", data, 6)
            if kind != KIND_DESCRIPTOR or index in out:
                _close_all(fds)
                raise ProtocolError(f"descriptor channel {path}: message kind {kind:#x} for handle {index}")
            out[index] = (size, fds[0])
        return out
    except BaseException:
        _close_all(fd for _, fd in out.values())
        raise
    finally:
        sock.close()
