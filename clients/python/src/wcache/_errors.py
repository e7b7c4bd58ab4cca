"""Exceptions raised by the wcache client.

Every exception derives from WcacheError. Only NoDaemonError means "there is
no daemon for this GPU" (or, as its subclass EmptyDaemonError, a daemon that
holds no weights yet): the one case in which an engine may fall back to
loading from disk. Every other error means a daemon (or something posing
as one) is there but cannot be used safely, and must surface to the operator.
"""

from __future__ import annotations

import os
from typing import List, NamedTuple, Optional


class WcacheError(Exception):
    """Base class of every error raised by the wcache client."""


class NoDaemonError(WcacheError):
    """No daemon serves this GPU: the socket path does not exist.

    The only error after which an engine may load weights from disk.

    ``others`` lists the ``wcache serve`` processes of other users running
    on this machine (ForeignDaemon: pid, uid, command line, read from /proc)
    when the socket was looked up by discovery: their sockets are not where
    this user looks unless their owner shares them, and the message says how.
    """

    def __init__(self, socket_path: str, device_uuid: Optional[str] = None, others=()):
        self.socket_path = socket_path
        self.device_uuid = device_uuid
        self.others = list(others)
        who = f" for device {device_uuid}" if device_uuid else ""
        msg = f"no wcache daemon{who}: socket {socket_path} does not exist"
        if self.others:
            listed = ", ".join(f"pid {o.pid} (uid {o.uid}: {o.command})" for o in self.others)
            msg = f"{msg}; daemons of other users run here: {listed} — {share_hint(os.geteuid())}"
        super().__init__(msg)


def share_hint(uid: int) -> str:
    """How a daemon of another user is shared with uid (the words of the Go
    client's and `wcache status`'s hint)."""
    return (f"a daemon of another user serves uid {uid} only if its owner starts it with "
            f"`wcache serve --socket-group GROUP --allow-uid {uid}` (or --allow-gid) and a socket template in a "
            f"directory uid {uid} can reach, and this side sets WCACHE_SOCKET_TEMPLATE (or --socket-template) "
            "to the same template")


class EmptyDaemonError(NoDaemonError):
    """The daemon is there but holds no weights: it is empty (started without
    a model, or evicted) or another client is publishing into it.

    A NoDaemonError, so code that loads from disk on NoDaemonError keeps doing
    the right thing: "no cached weights: load from disk". ``state`` is
    "empty" or "publishing", ``publisher_pid`` the publishing client's pid
    (0 when none). wcache.load_or_publish publishes into an empty daemon.
    """

    def __init__(self, socket_path: str, device_uuid: Optional[str], state: str, publisher_pid: int,
                 details: str = ""):
        WcacheError.__init__(self, f"no cached weights: load from disk (wcache daemon at {socket_path}: "
                                   f"{details or state})")
        self.socket_path = socket_path
        self.device_uuid = device_uuid
        self.state = state
        self.publisher_pid = publisher_pid


class UnsafeSocketError(WcacheError):
    """The socket path exists but must not be trusted.

    Raised when it is a symbolic link, not a socket, or owned by another user
    (one not listed in allow_owners).
    """

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"refusing wcache socket {path}: {reason}")


class DaemonDeadError(WcacheError):
    """The socket exists but nobody accepts connections on it.

    The daemon crashed (or was killed) without removing its socket. Run
    ``wcache cleanup`` or restart the daemon; do not silently load from disk.
    """

    def __init__(self, socket_path: str, detail: str = "connection refused"):
        self.socket_path = socket_path
        super().__init__(
            f"wcache daemon at {socket_path} is not running ({detail}); "
            "it left a stale socket: restart it or run `wcache cleanup`")


class InvalidUUIDError(WcacheError, ValueError):
    """A device UUID that may not be used in a path.

    Allowed: ASCII letters, digits and '-', 1 to 128 characters.
    """

    def __init__(self, uuid: str, reason: str):
        self.uuid = uuid
        self.reason = reason
        shown = repr(uuid if len(uuid) <= 80 else uuid[:80] + "…")
        super().__init__(
            f"invalid device UUID {shown}: {reason} "
            "(allowed: ASCII letters, digits and '-', 1 to 128 characters)")


class TemplateError(WcacheError, ValueError):
    """A socket or ready-file path template was refused.

    ``source`` names where the template came from (the environment variable,
    e.g. WCACHE_SOCKET_TEMPLATE, or a caller-supplied argument).
    """

    def __init__(self, source: str, text: str, detail: str):
        self.source = source
        self.text = text
        self.detail = detail
        super().__init__(f"{source}={text!r}: {detail}")


class SocketPathTooLongError(WcacheError, ValueError):
    """The socket path does not fit into sun_path (107 bytes)."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(
            f"socket path {path} is {len(path.encode())} bytes, longer than the 107 bytes a Unix socket "
            "path may have; use a shorter template (WCACHE_SOCKET_TEMPLATE) or a shorter XDG_RUNTIME_DIR")


class FieldDiff(NamedTuple):
    """One CacheConfig field on which the daemon and the client differ.

    ``daemon`` and ``client`` are the values as given (decimal integers, raw
    strings), or None on the side that lacks the field (an extra key only
    the other side sets). ``truncated``: the daemon cut the field name or a
    value to its first 256 bytes to bound the error's size.
    """

    field: str
    daemon: Optional[str]
    client: Optional[str]
    truncated: bool = False

    def __str__(self) -> str:
        def side(v: Optional[str]) -> str:
            return "<absent>" if v is None else repr(v)
        return (f"{self.field}: daemon={side(self.daemon)} client={side(self.client)}"
                + (" (truncated)" if self.truncated else ""))


class IncompatibleConfigError(WcacheError):
    """The daemon holds other weights than the client asked for.

    ``diffs`` lists the differing fields as FieldDiff(field, daemon, client,
    truncated), with proto (snake_case) field names; ``omitted`` counts the
    differing fields the daemon left out to bound the error's size. Loading
    from disk would hide a deployment mistake, so this is not a fallback case.
    """

    def __init__(self, diffs: List[FieldDiff], message: str = "", omitted: int = 0):
        self.diffs = list(diffs)
        self.message = message
        self.omitted = omitted
        listed = "; ".join(str(d) for d in self.diffs)
        if omitted:
            listed += ("; " if listed else "") + f"+{omitted} more"
        super().__init__("wcache daemon holds an incompatible config: " + (listed or message or "no details"))


class DaemonError(WcacheError):
    """The daemon answered with an error (other than a config mismatch).

    ``code`` is the grpc.StatusCode, ``details`` the daemon's message.
    """

    def __init__(self, operation: str, code, details: str):
        self.operation = operation
        self.code = code
        self.details = details
        name = getattr(code, "name", str(code))
        super().__init__(f"wcache {operation}: {name}: {details}")


class DaemonBusyError(DaemonError):
    """An attach refused because the daemon is draining (an evict or a stop
    waits for its leases) or stopping: ``state`` is "draining" or "stopping".

    Not a mismatch and not an absent daemon: a draining daemon is empty (or
    serving again, when the evict timed out) once its leases are gone, so an
    engine waits a bounded time and asks again (load_or_publish does).
    """

    def __init__(self, operation: str, code, details: str, state: str):
        self.state = state
        super().__init__(operation, code, details)


class HandleKindsError(DaemonError):
    """The daemon holds no handle of a kind this client maps (attach's
    handle_kinds), and refused before a lease existed. ``daemon_kinds`` are
    the kinds it serves, ``client_kinds`` those the client said it maps;
    the message says what to change."""

    def __init__(self, code, details: str, daemon_kinds, client_kinds):
        super().__init__("attach", code, details)
        self.daemon_kinds = list(daemon_kinds)
        self.client_kinds = list(client_kinds)


class ProtocolError(WcacheError):
    """The daemon sent something this client cannot use (malformed manifest,
    unknown handle kind, out-of-range offsets, unexpected message)."""


class CheckpointError(WcacheError, ValueError):
    """A checkpoint directory or safetensors header could not be used to
    compute a checkpoint digest. ``path`` names the offending file."""

    def __init__(self, path: str, detail: str):
        self.path = path
        self.detail = detail
        super().__init__(f"{path}: {detail}")


class PublishConflictError(WcacheError):
    """The daemon's state refused a publish (or an evict).

    ``reason`` is "in-progress" (another client is publishing:
    ``publisher_pid``; load on your own), "holds-weights" (the daemon already
    serves weights, ``config_digest``: attach, or ``wcache evict`` first) or
    "busy" (draining or stopping); ``details`` is the daemon's message.
    """

    def __init__(self, socket_path: str, reason: str, publisher_pid: int, config_digest: str, details: str):
        self.socket_path = socket_path
        self.reason = reason
        self.publisher_pid = publisher_pid
        self.config_digest = config_digest
        self.details = details
        super().__init__(f"wcache daemon at {socket_path}: {details}")


class PublishInProgressError(PublishConflictError):
    """Another client is publishing into this daemon (``publisher_pid``)."""


class HoldsWeightsError(PublishConflictError):
    """The daemon already serves weights: attach to them, or evict first."""
