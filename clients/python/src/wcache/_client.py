"""Attach to a wcache daemon and hold a lease on its weights.

    import wcache

    cfg = wcache.CacheConfig(model="/models/llama", checkpoint_digest=wcache.checkpoint_digest("/models/llama"))
    try:
        att = wcache.attach(cfg, device_index=0, on_daemon_gone=lambda gone: os._exit(1))
    except wcache.NoDaemonError:
        ...  # the only case in which to load from disk
    weights = att.tensors()  # name -> torch.Tensor, aliasing the daemon's memory

The Attach RPC is server-streaming: its first message is the manifest, and the
open stream is the lease. While the lease is held the daemon keeps the memory
the tensors alias; ``release()`` (or leaving a ``with`` block, or process exit)
ends it. A background thread reads the rest of the stream: notices (the
daemon is draining) go to ``on_notice``; the end of the stream that the client
did not ask for (daemon stopped, crashed, forced stop) goes to
``on_daemon_gone``. A takeover (``wcache serve --takeover``) is not a gone
daemon: the lease re-attaches to the successor, which serves the same
generation, and the tensors stay valid (``lease_id`` becomes the
successor's); ``on_daemon_gone`` fires only when the weights are gone.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import grpc

from . import content, _fdchannel as fdchannel, pb
from . import checkpoint as _checkpoint
from .checkpoint import model_files
from ._config import CacheConfig
from ._discovery import Target, check_socket, probe, resolve
from ._errors import (DaemonBusyError, DaemonDeadError, DaemonError, EmptyDaemonError, FieldDiff, HandleKindsError, HoldsWeightsError,
                     IncompatibleConfigError, ProtocolError, PublishConflictError, PublishInProgressError,
                     WcacheError)
from ._manifest import DESCRIPTOR_KINDS, TensorSpec
from ._paths import Getenv
from ._mappers import CORE_KINDS, HandleMappers
from ._tensors import LIBRARY_AUTO, Materialized, materialize, private_copy

log = logging.getLogger("wcache")

STATUS_DETAILS_KEY = "grpc-status-details-bin"

# Channel options: manifests of very large checkpoints exceed gRPC's 4 MiB
# default receive limit (256 MiB, like the Go client); a Unix socket needs no
# retries or proxies. Keepalive pings (every 10 s, 5 s to answer, also on an
# idle lease) detect a hung daemon; they respect the daemon's enforcement
# policy (no more often than every 5 s), as the Go client's do.
_MAX_METADATA_SIZE = 1 << 20

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 256 << 20),
    ("grpc.max_send_message_length", 256 << 20),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.enable_retries", 0),
    ("grpc.enable_http_proxy", 0),
    ("grpc.default_authority", "localhost"),
    # A config mismatch travels in the trailers (grpc-status-details-bin). The
    # daemon bounds it to a few KiB, under grpc-core's 8 KiB default; accept
    # up to 1 MiB anyway so that a daemon with other bounds is still decoded.
    ("grpc.max_metadata_size", _MAX_METADATA_SIZE),
]


@dataclass(frozen=True)
class DaemonGone:
    """Why a lease ended without the client releasing it.

    code is the grpc.StatusCode the stream ended with (OK when the daemon
    closed it cleanly, e.g. after a drain), details the daemon's message.
    """

    code: grpc.StatusCode
    details: str


def default_client_name() -> str:
    """"<program> (pid <pid>)", shown by `wcache status`."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"{prog} (pid {os.getpid()})"


def _channel(path: str) -> grpc.Channel:
    return grpc.insecure_channel("unix://" + path, options=_CHANNEL_OPTIONS)


def _config_message(config: Union[CacheConfig, "pb.CacheConfig"]):
    """The wire message of config, validated (InvalidConfigError) before it is sent."""
    if isinstance(config, pb.CacheConfig):
        config = CacheConfig.from_proto(config)
    if isinstance(config, CacheConfig):
        config.validate()
        return config.to_proto()
    raise TypeError(f"config must be a wcache.CacheConfig or wcache.pb.CacheConfig, not {type(config).__name__}")


def status_detail(err: grpc.RpcError, message_class):
    """The first detail of type message_class (a wcache.pb class) in err's
    grpc-status-details-bin trailer, decoded, or None when there is none."""
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    name = message_class.DESCRIPTOR.full_name
    for key, value in trailers or ():
        if key != STATUS_DETAILS_KEY:
            continue
        try:
            status = pb.RpcStatus.FromString(bytes(value))
        except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError subclasses per runtime
            raise ProtocolError(f"cannot decode {STATUS_DETAILS_KEY}: {exc}") from exc
        for detail in status.details:
            if detail.type_url.rsplit("/", 1)[-1] == name:
                return message_class.FromString(detail.value)
    return None


def mismatch_from_error(err: grpc.RpcError) -> Optional[Tuple[List[FieldDiff], int]]:
    """The FieldDiffs of a ConfigMismatch detail in err's grpc-status-details-bin
    trailer and the number of fields the daemon omitted, or None when there is
    no such detail."""
    mismatch = status_detail(err, pb.ConfigMismatch)
    if mismatch is None:
        return None
    return [FieldDiff(d.field, None if d.daemon_absent else d.daemon_value,
                      None if d.client_absent else d.client_value, d.truncated)
            for d in mismatch.diffs], mismatch.omitted


_CONFLICTS = {pb.PUBLISH_CONFLICT_IN_PROGRESS: ("in-progress", PublishInProgressError),
              pb.PUBLISH_CONFLICT_HOLDS_WEIGHTS: ("holds-weights", HoldsWeightsError),
              pb.PUBLISH_CONFLICT_BUSY: ("busy", PublishConflictError)}


def _translate(operation: str, target: Target, err: grpc.RpcError) -> WcacheError:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        mismatch = mismatch_from_error(err)
        if mismatch is not None:
            return IncompatibleConfigError(mismatch[0], details or "", omitted=mismatch[1])
        kinds = status_detail(err, pb.HandleKindsRefused)
        if kinds is not None:
            return HandleKindsError(code, details or "", kinds.daemon_kinds, kinds.client_kinds)
        refused = status_detail(err, pb.ContentRefused)
        if refused is not None:
            return _content_refused(target, refused, details or "")
    if code == grpc.StatusCode.NOT_FOUND:
        empty = status_detail(err, pb.NoWeights)
        if empty is not None:
            state = "publishing" if empty.state == pb.DAEMON_STATE_PUBLISHING else "empty"
            return EmptyDaemonError(target.socket, target.device_uuid, state, int(empty.publisher_pid),
                                    details or "")
    if code in (grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION):
        conflict = status_detail(err, pb.PublishConflict)
        if conflict is not None:
            reason, cls = _CONFLICTS.get(conflict.reason, ("unknown", PublishConflictError))
            return cls(target.socket, reason, int(conflict.publisher_pid), conflict.config_digest,
                       details or "")
    if code == grpc.StatusCode.UNAVAILABLE:
        busy = status_detail(err, pb.PublishConflict)
        if busy is not None and busy.reason == pb.PUBLISH_CONFLICT_BUSY:
            state = "stopping" if busy.state == pb.DAEMON_STATE_STOPPING else "draining"
            return DaemonBusyError(operation, code, details or "", state)
    if code == grpc.StatusCode.UNAVAILABLE and details and "refused" in details.lower():
        return DaemonDeadError(target.socket, details)
    return DaemonError(operation, code, details or "")


def _content_refused(target: Target, refused, details: str) -> WcacheError:
    """The error of an attach the daemon refused by its content policy
    (a ContentRefused detail): ContentMismatchError (REASON_MISMATCH),
    PolicyRefusedError (REASON_POLICY), else ContentUnknownError (a
    NoDaemonError: load from disk; REASON_UNKNOWN with ``unproven``, the
    files to hash under "hash", and REASON_PROOF_REQUIRED). Each carries
    ``reason``, ``generation`` and ``policies`` (the generation's)."""
    if refused.reason == pb.CONTENT_REFUSED_MISMATCH:
        exc: WcacheError = content.ContentMismatchError(refused.name, refused.daemon_digest, refused.client_digest,
                                                        refused.client_path)
    elif refused.reason == pb.CONTENT_REFUSED_POLICY:
        exc = content.PolicyRefusedError(f"content policy refused by the daemon at {target.socket}: {details}")
    else:
        exc = content.ContentUnknownError("", "", f"refused by the daemon at {target.socket}: {details}")
        exc.socket_path, exc.device_uuid = target.socket, target.device_uuid
    exc.reason, exc.generation, exc.policies = int(refused.reason), int(refused.generation), list(refused.policies)
    exc.unproven = list(refused.unproven)
    # The algorithm to hash the unproven files in: the daemon's records'.
    try:
        exc.algorithm = content.algorithm_of(refused.daemon_digest) if refused.daemon_digest else None
    except ValueError:
        exc.algorithm = None
    return exc


# A daemon that handed its memory over to a successor (serve --takeover) ends
# every lease with UNAVAILABLE and this text (Go: fdchannel.HandoverMessage).
HANDOVER_MESSAGE = "handed its memory over to a successor"
# How long a lease ended by a handover tries to re-attach to the successor.
RESUME_WINDOW = 30.0
RESUME_RETRY = 0.05


def _same_weights(a, b) -> bool:
    """b serves what a did: the same device, generation and handles (kind and size)."""
    return (a.device_uuid == b.device_uuid and a.generation == b.generation and len(a.handles) == len(b.handles)
            and all(x.kind == y.kind and x.size == y.size for x, y in zip(a.handles, b.handles)))


class Attachment:
    """A lease on a daemon's weights. Create with wcache.attach().

    Attributes: ``manifest`` (wcache.pb.Manifest; attach asks for the
    compact tensor_table, so weights loaded from files come in
    manifest.tensor_table and published ones in manifest.tensors:
    ``specs`` reads either), ``config`` (the daemon's
    CacheConfig), ``metadata`` (the publisher's metadata map, empty for
    weights loaded from files), ``device_uuid``, ``socket``, ``lease_id``, ``generation``,
    ``draining`` and ``gone`` (threading.Event set when the daemon announced a
    drain / when the lease ended), ``gone_reason`` (DaemonGone or None),
    ``device_bytes`` (the device memory this generation holds: the sum of
    its arenas' sizes, at least the tensor bytes; wcache.status() reports
    the daemon's total as ``device_bytes_total``).

    Thread-safe; callbacks run on the lease's background thread and must not
    call release() and then wait for that thread (release() from a callback is
    fine: it does not join itself).
    """

    def __init__(self, channel: grpc.Channel, call, manifest, target: Target,
                 on_daemon_gone: Optional[Callable[[DaemonGone], None]],
                 on_notice: Optional[Callable[[object], None]],
                 device_index: Optional[int], library: str, mappers: Optional[HandleMappers] = None,
                 descriptors: Optional[Dict[int, int]] = None, request=None, allow_owners: Iterable[int] = (),
                 copy: bool = False):
        self._channel = channel
        # What a resume after a takeover needs (see _resume).
        self._target = target
        self._request = request
        self._allow_owners = tuple(allow_owners)
        # handle index → descriptor of a descriptor handle (memfd), closed by release().
        self._descriptors: Dict[int, int] = dict(descriptors or {})
        self._call = call
        self.manifest = manifest
        self.socket = target.socket
        self.device_uuid = manifest.device_uuid
        self.lease_id = manifest.lease_id
        self.generation = manifest.generation
        self.config = CacheConfig.from_proto(manifest.config)
        self.config_digest = manifest.config_digest
        self.metadata: Dict[str, str] = dict(manifest.metadata)
        self.device_bytes: int = sum(int(h.size) for h in manifest.handles)
        self._on_daemon_gone = on_daemon_gone
        self._on_notice = on_notice
        self._device_index = device_index
        self._library = library
        self._mappers = mappers
        self._copy = copy
        self._lock = threading.Lock()
        self._released = False
        self._materialized: Optional[Materialized] = None
        self.draining = threading.Event()
        self.gone = threading.Event()
        self.gone_reason: Optional[DaemonGone] = None
        self._thread = threading.Thread(target=self._watch, name=f"wcache-lease-{self.lease_id}", daemon=True)
        self._thread.start()

    # --- tensors -------------------------------------------------------------------------------

    def tensors(self) -> Dict[str, object]:
        """name → tensor aliasing the daemon's memory (see wcache.tensors),
        or, attached with copy=True, the engine's own copy of it.

        Host-memory tensors are copy-on-write views: a write changes this
        process's copy of the page only. Device tensors (cuda-ipc, hip-ipc)
        are the daemon's memory: a write reaches every client; attach with
        copy=True to modify them. Handles are opened on the first call and
        reused afterwards; the same dict is returned each time. Raises
        WcacheError after release().
        """
        with self._lock:
            if self._released:
                raise WcacheError("the lease was released; attach again")
            if self._materialized is None:
                self._materialized = materialize(self.manifest, library=self._library,
                                                 device_index=self._device_index, mappers=self._mappers,
                                                 descriptors=self._descriptors)
                if self._copy:
                    self._materialized.tensors = private_copy(self._materialized.tensors)
            return self._materialized.tensors

    @property
    def specs(self) -> Dict[str, TensorSpec]:
        """name → TensorSpec (dtype, shape, handle, offset, length) from the manifest."""
        from ._manifest import parse_manifest  # noqa: PLC0415

        return {s.name: s for s in parse_manifest(self.manifest)[1]}

    @property
    def regions(self) -> List[object]:
        """The opened handles (ShmRegion, TorchIpcRegion, DriverIpcRegion), once tensors() ran."""
        return list(self._materialized.regions) if self._materialized else []

    # --- lease ---------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """True while the lease is held: not released and the stream still open."""
        return not self._released and not self.gone.is_set()

    def release(self, timeout: float = 5.0) -> None:
        """End the lease: cancel the stream and close the connection. Idempotent.

        Drop every tensor first: after release the daemon may free (or, on
        stop, unmap) the memory they alias. posix-shm mappings stay readable in
        this process; IPC-mapped device memory does not.
        """
        with self._lock:
            if self._released:
                return
            self._released = True
            self._materialized = None
            descriptors, self._descriptors = self._descriptors, {}
            call = self._call
        for fd in descriptors.values():  # mappings made from them stay valid
            os.close(fd)
        call.cancel()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        with self._lock:
            channel = self._channel
        channel.close()

    def __enter__(self) -> "Attachment":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def wait_gone(self, timeout: Optional[float] = None) -> bool:
        """Block until the lease ends (released or daemon gone); False on timeout."""
        return self.gone.wait(timeout)

    def _watch(self) -> None:
        while True:
            gone = self._read_stream()
            if self._resume(gone):
                continue
            break
        with self._lock:
            released = self._released
        if not released:
            self.gone_reason = gone
        self.gone.set()
        if not released:
            self._callback(self._on_daemon_gone, gone)

    def _read_stream(self) -> "DaemonGone":
        """Read the lease's stream until it ends; why it ended."""
        try:
            for event in self._call:
                if event.WhichOneof("event") == "notice":
                    notice = event.notice
                    if notice.kind == pb.NOTICE_KIND_DRAINING:
                        self.draining.set()
                    self._callback(self._on_notice, notice)
                else:
                    log.warning("wcache lease %d: ignoring unexpected %s after the manifest",
                                self.lease_id, event.WhichOneof("event"))
        except grpc.RpcError as err:
            return DaemonGone(err.code(), err.details() or "")
        except Exception as exc:  # noqa: BLE001 - a broken stream is still a gone daemon
            return DaemonGone(grpc.StatusCode.UNKNOWN, str(exc))
        return DaemonGone(grpc.StatusCode.OK, "the daemon closed the lease")

    def _resume(self, gone: "DaemonGone") -> bool:
        """After a takeover (UNAVAILABLE, HANDOVER_MESSAGE), re-attach to the successor.

        Tries for up to RESUME_WINDOW seconds. The new lease replaces the
        ended one only when it serves the same generation of the same device
        with the same handles (kind and size): the tensors, mappings and
        descriptors of this lease stay valid, and on_daemon_gone does not
        fire. Its own descriptors are closed. False: not a handover, released,
        or no successor serving the same weights — the lease ends.
        """
        if (self._request is None or gone.code != grpc.StatusCode.UNAVAILABLE
                or HANDOVER_MESSAGE not in (gone.details or "")):
            return False
        deadline = time.monotonic() + RESUME_WINDOW
        while time.monotonic() < deadline:
            with self._lock:
                if self._released:
                    return False
            try:
                check_socket(self._target, self._allow_owners)
                channel, call, manifest, descriptors = _open_lease(
                    self._target, self._request, max(0.1, min(5.0, deadline - time.monotonic())))
            except Exception as err:  # noqa: BLE001 - no successor yet: retry until the window ends
                if isinstance(err, (IncompatibleConfigError, EmptyDaemonError, ProtocolError)):
                    log.warning("wcache lease %d: after a takeover: %s", self.lease_id, err)
                    return False
                time.sleep(RESUME_RETRY)
                continue
            for fd in descriptors.values():  # ours map the same memory
                os.close(fd)
            if not _same_weights(self.manifest, manifest):
                call.cancel()
                channel.close()
                log.warning("wcache lease %d: the successor serves other weights (generation %d, was %d)",
                            self.lease_id, manifest.generation, self.generation)
                return False
            with self._lock:
                if self._released:
                    call.cancel()
                    channel.close()
                    return False
                old = self._channel
                self._channel, self._call = channel, call
                log.info("wcache lease %d: resumed as lease %d after a takeover (generation %d)",
                         self.lease_id, manifest.lease_id, manifest.generation)
                self.lease_id = manifest.lease_id
            old.close()
            return True
        return False

    def _callback(self, fn, arg) -> None:
        if fn is None:
            return
        try:
            fn(arg)
        except Exception:  # noqa: BLE001 - a callback must not kill the lease thread
            log.exception("wcache lease %d: callback %r raised", self.lease_id, fn)

    def __repr__(self) -> str:
        state = "released" if self._released else ("gone" if self.gone.is_set() else "active")
        return (f"Attachment(device_uuid={self.device_uuid!r}, lease_id={self.lease_id}, "
                f"tensors={len(self.manifest.tensors) or len(self.manifest.tensor_table.name_shared)}, {state})")


def attach(config: Union[CacheConfig, "pb.CacheConfig"], socket: Optional[str] = None,
           device_uuid: Optional[str] = None, device_index: Optional[int] = None,
           client_name: Optional[str] = None,
           on_daemon_gone: Optional[Callable[[DaemonGone], None]] = None,
           on_notice: Optional[Callable[[object], None]] = None,
           timeout: float = 30.0, library: str = LIBRARY_AUTO, getenv: Getenv = None,
           allow_owners: Iterable[int] = (), mappers: Optional[HandleMappers] = None,
           copy: bool = False, handle_kinds: Optional[Iterable[str]] = None,
           files: Optional[Sequence[str]] = None, content_policy: str = content.POLICY_IDENTITY,
           digest_cache: Optional[content.DigestCache] = None,
           on_hash_progress: Optional[Callable[[str, int, int], None]] = None) -> Attachment:
    """Attach to the daemon of this process's GPU and take a lease.

    Discovery: an explicit socket wins; else device_uuid (canonical, e.g.
    ``GPU-…``); else the UUID of device_index (default torch's current
    device) through WCACHE_SOCKET_TEMPLATE or the default directory.

    config: what the engine expects (CacheConfig or wcache.pb.CacheConfig).
    client_name: shown by ``wcache status`` (default "<program> (pid N)").
    on_daemon_gone(DaemonGone): the stream ended without release().
    on_notice(wcache.pb.Notice): e.g. KIND_DRAINING with a deadline.
    timeout: seconds to wait for the manifest. library: "auto", "torch" or
    "numpy" for tensors(). getenv: a mapping or function replacing os.environ
    for the templates. allow_owners: socket owner uids accepted besides our
    own (a daemon run by a service account). mappers: a
    wcache.HandleMappers with the mappers of vendor handle kinds
    (x-VENDOR-NAME) for tensors(); None: the built-in kinds only. copy:
    tensors() returns the engine's own copy of every storage (views kept,
    on the same device), which it may modify in place — for device handles,
    whose memory every client shares; host-memory tensors are copy-on-write
    views already (a write stays this process's). handle_kinds: the handle
    kinds this client maps, sent to the daemon (None: the built-in kinds
    and those of mappers); a daemon whose handles are of another kind
    refuses with HandleKindsError before a lease exists.

    files: the checkpoint files the engine would load; None (the default):
    those config.model names (wcache.checkpoint.model_files: a local
    directory, or a hub id's snapshot in the local Hugging Face cache).
    The attach carries their content proof (wcache.content.ContentProof:
    identity, a digest the per-user digest_cache knows, a trusted hub blob
    name) and the daemon checks it before a lease exists, then this client
    checks the manifest too (an older daemon ignores the proof). Under
    content_policy "identity" (the default) a file that is not proven
    without reading it is a miss; "hash" hashes the files the daemon could
    not prove (on_hash_progress(name, done, total)) and attaches once more;
    "headers" proves nothing, where the daemon allows it. No files found
    (a model that is not on this host) is answered only by a daemon whose
    generation allows "headers". Raised, with no lease left:
    ContentUnknownError (a NoDaemonError: load from disk),
    ContentMismatchError (names the first differing file) or
    PolicyRefusedError. A same-header copy with other bytes (a fine-tune)
    never gets the daemon's bytes.

    Raises InvalidConfigError (config fails CacheConfig.validate, before
    any connection), NoDaemonError (no socket: load from disk; its subclass
    EmptyDaemonError when the daemon holds no weights yet), UnsafeSocketError,
    DaemonDeadError, IncompatibleConfigError (.diffs), DaemonError (other
    RPC errors), ProtocolError (unusable answer, or a daemon serving another
    GPU than the one asked for), and TemplateError / InvalidUUIDError /
    SocketPathTooLongError for bad input, HandleKindsError (a DaemonError)
    when the daemon serves no kind of handle_kinds.
    """
    if handle_kinds is None:
        handle_kinds = list(CORE_KINDS) + (mappers.kinds() if mappers is not None else [])
    request = pb.AttachRequest(config=_config_message(config),
                               client_name=client_name if client_name is not None else default_client_name(),
                               handle_kinds=list(handle_kinds), tensor_table=True)
    target = resolve(socket=socket, device_uuid=device_uuid, device_index=device_index, getenv=getenv)
    check_socket(target, allow_owners)
    probe(target, timeout=min(timeout, 5.0))

    derived = files is None
    if derived:
        files = model_files(request.config.model)
    proof = content.ContentProof(files or (), content_policy, cache=digest_cache, progress=on_hash_progress,
                                 derived=derived)
    request.content.CopyFrom(proof.to_proto())
    try:
        channel, call, manifest, descriptors = _open_lease(target, request, timeout)
    except content.ContentUnknownError as exc:
        # Under "hash": hash what the daemon could not prove, and ask once more.
        if proof.policy != content.POLICY_HASH or not proof.hash(getattr(exc, "unproven", ()),
                                                                 getattr(exc, "algorithm", None)):
            raise
        request.content.CopyFrom(proof.to_proto())
        channel, call, manifest, descriptors = _open_lease(target, request, timeout)
    try:
        proof.check(content.files_from_proto(manifest.files, manifest.file_sha256), list(manifest.content_policies))
    except BaseException:
        for fd in descriptors.values():
            os.close(fd)
        call.cancel()
        channel.close()
        raise
    return Attachment(channel, call, manifest, target, on_daemon_gone, on_notice, device_index, library, mappers,
                      descriptors, request=request, allow_owners=allow_owners, copy=copy)


def _open_lease(target: Target, request, timeout: float):
    """Make the Attach RPC: (channel, call, manifest, descriptors), or raise as attach() does."""
    channel = _channel(target.socket)
    try:
        stream = channel.unary_stream(pb.METHOD_ATTACH,
                                      request_serializer=pb.AttachRequest.SerializeToString,
                                      response_deserializer=pb.AttachEvent.FromString)
        call = stream(request)
        timed_out = threading.Event()

        def on_timeout() -> None:
            timed_out.set()
            call.cancel()

        timer = threading.Timer(timeout, on_timeout)
        timer.daemon = True
        timer.start()
        try:
            first = next(call)
        except StopIteration:
            raise ProtocolError(f"wcache daemon at {target.socket} closed the Attach stream without a manifest") \
                from None
        except grpc.RpcError as err:
            if timed_out.is_set():
                raise WcacheError(f"wcache daemon at {target.socket} sent no manifest within {timeout}s") \
                    from None
            raise _translate("attach", target, err) from None
        finally:
            timer.cancel()
        if first.WhichOneof("event") != "manifest":
            call.cancel()
            raise ProtocolError(f"wcache daemon at {target.socket} answered Attach with "
                                f"{first.WhichOneof('event')!r} instead of a manifest")
        manifest = first.manifest
        if target.device_uuid is not None and manifest.device_uuid != target.device_uuid:
            call.cancel()
            raise ProtocolError(f"wcache daemon at {target.socket} serves device {manifest.device_uuid!r}, "
                                f"not {target.device_uuid!r}: refusing another GPU's weights")
        descriptors = _fetch_descriptors(target.socket, manifest, call, timeout)
    except BaseException:
        channel.close()
        raise
    return channel, call, manifest, descriptors


def _fetch_descriptors(socket_path: str, manifest, call, timeout: float) -> Dict[int, int]:
    """Receive the descriptors of the manifest's descriptor handles (exactly one per such handle, of its size)."""
    wanted = {i: h.size for i, h in enumerate(manifest.handles) if h.kind in DESCRIPTOR_KINDS}
    if not wanted:
        return {}
    try:
        got = fdchannel.fetch(socket_path, fdchannel.OP_LEASE, manifest.lease_id, bytes(manifest.fd_token),
                              timeout=min(timeout, 10.0))
    except BaseException:
        call.cancel()
        raise
    bad = sorted(set(got) ^ set(wanted)) or [i for i in got if got[i][0] != wanted[i]]
    if bad:
        for _, fd in got.values():
            os.close(fd)
        call.cancel()
        raise ProtocolError(f"descriptor channel of {socket_path} sent descriptors for handles {sorted(got)}, "
                            f"the manifest's descriptor handles are {sorted(wanted)} (mismatch at {bad})")
    return {i: fd for i, (_, fd) in got.items()}


def served_checkpoint_digest(model: str, socket: Optional[str] = None, device_uuid: Optional[str] = None,
                             device_index: Optional[int] = None, getenv=None, allow_owners: Iterable[int] = (),
                             timeout: float = 10.0) -> str:
    """The checkpoint digest of ``model`` for a CacheConfig, without parsing
    every header when the daemon holds these very files.

    One status call (discovery as attach: socket, device_uuid,
    device_index, getenv, allow_owners) and one stat per file
    (wcache.checkpoint.model_files, wcache.content.identities_match): when a generation of that
    daemon loaded exactly model's files, by name and identity, its config's
    checkpoint_digest is theirs (same files, same headers). Otherwise — no
    daemon, other files (a copy, a fine-tune, a rewrite), a daemon that
    recorded none, no files found — checkpoint_digest(model), which reads
    every header (about a second at 100k tensors). Raises what
    checkpoint_digest raises (CheckpointError, ModelNotCachedError); a
    daemon that cannot be asked is no error (the headers are read).
    Either way the attach still proves the files (ContentProof).
    """
    files = model_files(model)
    if files:
        try:
            st = status(socket=socket, device_uuid=device_uuid, device_index=device_index, timeout=timeout,
                        getenv=getenv, allow_owners=allow_owners)
        except WcacheError:
            st = None
        for g in (list(st.generations) or [st]) if st is not None else ():
            if g.config.checkpoint_digest and content.identities_match(content.files_from_proto(g.files), files):
                return g.config.checkpoint_digest
    return _checkpoint.checkpoint_digest(model)


def status(socket: Optional[str] = None, device_uuid: Optional[str] = None,
           device_index: Optional[int] = None, timeout: float = 10.0, getenv: Getenv = None,
           allow_owners: Iterable[int] = ()):
    """Ask a daemon for its status (wcache.pb.StatusResponse).

    ``device_bytes_total`` is the device memory the daemon holds (its
    arenas' sizes as the backend allocated them, every generation and a
    publish in progress included; ``device_bytes`` the first serving
    generation's alone; ``generations`` lists each with its state, config,
    ``device_bytes`` and leases; see resident_bytes()): the figure an
    engine integration hands to its KV-cache sizing (SGLang
    ``preloaded_weights_bytes``). ``max_bytes`` and ``reserve_bytes`` are the
    daemon's cap and reserve (0: none). ``filled_from`` says where a loaded
    generation's bytes came from (``"files"``, ``"peer GPU-<uuid>"``: a
    sibling daemon's GPU on this node, ``"peer HOST:PORT"``: another node's
    daemon; ``""`` for published weights) and ``fill_fallback`` why a peer
    fill was tried and not used (each generation has both; the top-level
    ones are the oldest generation's). Discovery and errors as attach(); an
    RPC error is a DaemonError.
    """
    target = resolve(socket=socket, device_uuid=device_uuid, device_index=device_index, getenv=getenv)
    check_socket(target, allow_owners)
    probe(target, timeout=min(timeout, 5.0))
    with _channel(target.socket) as channel:
        rpc = channel.unary_unary(pb.METHOD_STATUS,
                                  request_serializer=pb.StatusRequest.SerializeToString,
                                  response_deserializer=pb.StatusResponse.FromString)
        try:
            return rpc(pb.StatusRequest(), timeout=timeout)
        except grpc.RpcError as err:
            raise _translate("status", target, err) from None


@dataclass(frozen=True)
class ResidentBytes:
    """The device memory a daemon holds: ``total`` (every generation, a
    publish in progress included) and ``by_generation`` (generation id →
    bytes; empty from a daemon older than several generations), each the
    arenas' sizes as the backend allocated them. ``total`` is what an engine
    hands to its KV-cache sizing (SGLang ``preloaded_weights_bytes``, vLLM
    ``ExternalWeightCharges``)."""

    total: int
    by_generation: Dict[int, int]


def resident_bytes(socket: Optional[str] = None, device_uuid: Optional[str] = None,
                   device_index: Optional[int] = None, timeout: float = 10.0, getenv: Getenv = None,
                   allow_owners: Iterable[int] = ()) -> ResidentBytes:
    """The device memory the daemon of this GPU holds, in total and per
    generation (status()'s ``device_bytes_total`` and ``generations``).
    Discovery and errors as status()."""
    st = status(socket=socket, device_uuid=device_uuid, device_index=device_index, timeout=timeout,
                getenv=getenv, allow_owners=allow_owners)
    return ResidentBytes(int(st.device_bytes_total), {int(g.generation): int(g.device_bytes) for g in st.generations})


@dataclass(frozen=True)
class EvictResult:
    """What an evict did: the leases that held the evicted weights when it
    began, the tensor bytes freed (0 for a daemon that was already empty)
    and the ids of the generations freed."""

    leases_at_evict: int
    bytes_freed: int
    generations: Tuple[int, ...] = ()


def evict(socket: Optional[str] = None, device_uuid: Optional[str] = None, device_index: Optional[int] = None,
          timeout: float = 0.0, getenv: Getenv = None, allow_owners: Iterable[int] = (), model: str = "",
          config_digest: str = "", generation: int = 0, all_generations: bool = False) -> EvictResult:
    """Ask a daemon to drop weights and stay up (``wcache evict``).

    A daemon holds several generations (a target and a draft model, several
    models): ``model``, ``config_digest`` and ``generation`` name the ones
    to free (each given one must match), ``all_generations`` every one;
    naming none frees the daemon's only generation (a daemon holding
    several refuses: DaemonError FAILED_PRECONDITION naming them). Only
    their leases are drained; the others serve on.

    The daemon tells every lease to let go and waits up to ``timeout``
    seconds (0: its --drain-timeout; at most 10 min) for them; memory is
    never freed under a live lease. Discovery as attach(). Raises
    NoDaemonError (no socket), PublishInProgressError (a publish is in
    progress), PublishConflictError (the daemon is stopping), DaemonError
    FAILED_PRECONDITION (leases remained at the timeout: the daemon keeps
    serving) or PERMISSION_DENIED (only the daemon's uid and root may
    evict; --allow-uid/--allow-gid guests may not), and the errors of discovery.
    """
    if timeout < 0:
        raise ValueError(f"timeout {timeout}: want >= 0 seconds")
    target = resolve(socket=socket, device_uuid=device_uuid, device_index=device_index, getenv=getenv)
    check_socket(target, allow_owners)
    probe(target, timeout=5.0)
    with _channel(target.socket) as channel:
        rpc = channel.unary_unary(pb.METHOD_EVICT, request_serializer=pb.EvictRequest.SerializeToString,
                                  response_deserializer=pb.EvictResponse.FromString)
        # The RPC itself waits for the drain: its deadline outlasts the
        # daemon's longest drain (10 min) when no timeout is given.
        wait = timeout if timeout > 0 else 600.0
        try:
            r = rpc(pb.EvictRequest(timeout_ms=int(timeout * 1000), model=model, config_digest=config_digest,
                                    generation=int(generation), all=bool(all_generations)), timeout=wait + 30.0)
        except grpc.RpcError as err:
            raise _translate("evict", target, err) from None
    return EvictResult(int(r.leases_at_evict), int(r.bytes_freed), tuple(int(g) for g in r.generations))
