"""Publish an engine's own weights into an empty daemon; load_or_publish around its loader.

    import wcache

    weights = wcache.load_or_publish(cfg, load, device_index=local_gpu)
    model.load_state_dict(weights, assign=True)

``load_or_publish`` attaches when the daemon holds weights for ``cfg``; when
the daemon is empty it calls ``load()`` (the engine's own loading and
post-processing), publishes the result and returns tensors that live in the
daemon's memory; when there is no daemon it returns ``load()``'s tensors
unchanged; a draining daemon is waited for (bounded); a publish race lost to
another engine attaches to its weights. A config mismatch stays an error
(IncompatibleConfigError), never a silent reload. Every daemon state and its
action: load_or_publish's docstring and docs/python-client.md.

``publish`` is the lower-level call: one Publish RPC (see docs/protocol.md,
"Publish"). A tensor is published as the span of its storage that the
published tensors reach, not as a contiguous copy: each distinct storage is
placed once, and every tensor carries its storage key, strides and storage
offset (relative to the span), so that after attach a tensor has the shape
and strides it was published with, and tensors that shared a storage share
one again (a storage of the attached process's own over that byte range;
see wcache._tensors).

Handle kinds: ``memfd`` (the mock backend's default; the writable descriptors
come from the daemon's descriptor channel with the plan's publish id and
token) and ``posix-shm`` are mapped writable and filled with a memcpy from
CPU memory (a GPU tensor is copied to the host first);
``cuda-ipc``/``hip-ipc`` handles are opened through PyTorch and filled with a
device-to-device ``copy_``, then the device is synchronised before the commit.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

import os

from . import content, dtypes, _fdchannel as fdchannel, pb
from .checkpoint import model_files
from ._client import _channel, _config_message, _translate, attach, default_client_name
from ._config import CacheConfig
from ._discovery import check_socket, probe, resolve
from ._errors import (DaemonBusyError, DaemonError, EmptyDaemonError, HoldsWeightsError, IncompatibleConfigError, NoDaemonError,
                     ProtocolError, PublishConflictError, PublishInProgressError, WcacheError)
from ._manifest import HANDLE_CUDA_IPC, HANDLE_HIP_IPC, HANDLE_MEMFD, HANDLE_POSIX_SHM, HandleSpec
from ._paths import Getenv
from ._shm import map_memfd, map_shm

log = logging.getLogger("wcache")

# Bound of the tensor entries in one Publish message, well under the daemon's
# 1 MiB request limit (as the Go client's).
_MAX_TABLE_CHUNK_BYTES = 512 << 10


@dataclass(frozen=True)
class PublishResult:
    """The daemon's confirmation: it serves the published weights.

    ``verified`` is True when the daemon checked every SHA-256 (a daemon run
    with --verify-publish).
    """

    generation: int
    config_digest: str
    bytes: int
    tensors: int
    verified: bool


class Weights(dict):
    """name → tensor, as returned by load_or_publish.

    ``source`` says where the tensors live: "attached" (the daemon already
    held them), "published" (load() ran, its result was published and these
    are the daemon's copies) or "loaded" (load()'s own tensors, unchanged:
    there is no daemon, or another client was publishing; ``reason`` says
    which). ``metadata`` is the published metadata map (load()'s own for
    "loaded"). ``attachment`` is the lease that keeps the daemon's memory
    (None for "loaded"): keep this object, or the attachment, alive while the
    tensors are in use; ``release()`` ends the lease.
    """

    def __init__(self, tensors: Mapping[str, object], source: str, metadata: Optional[Mapping[str, str]] = None,
                 attachment=None, reason: Optional[str] = None):
        super().__init__(tensors)
        self.source = source
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.attachment = attachment
        self.reason = reason

    def release(self) -> None:
        """End the lease (nothing for "loaded"). Drop the tensors first."""
        if self.attachment is not None:
            self.attachment.release()

    def __repr__(self) -> str:
        return f"Weights({len(self)} tensors, source={self.source!r})"


@dataclass
class _Storage:
    """One distinct storage of the published tensors and the entries on it.

    Only the span its views reach is published: bytes [base, base+nbytes)
    of the storage, base a multiple of _SPAN_ALIGN (so that every view's
    storage offset stays a whole number of its elements)."""

    key: str
    storage: object
    base: int
    nbytes: int
    entries: List[int] = field(default_factory=list)


# A published span starts at a multiple of this many bytes of its storage:
# a multiple of every element size (1 to 16 bytes), so that each view's
# offset from the span's start is a whole number of its elements.
_SPAN_ALIGN = 16


def _import_torch():
    try:
        import torch  # noqa: PLC0415
    except ImportError as exc:
        raise WcacheError("wcache.publish needs PyTorch") from exc
    return torch


def _untyped_storage(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage().untyped()  # torch < 2.0


def _byte_view(torch, storage, base: int, nbytes: int):
    """A 1-D uint8 tensor over bytes [base, base+nbytes) of storage."""
    return torch.empty((0,), dtype=torch.uint8, device=storage.device).set_(storage, base, (nbytes,), (1,))


def _reach(t) -> Tuple[int, int]:
    """The bytes [lo, hi) of its storage that the non-empty tensor t reads
    (strides are never negative in PyTorch)."""
    el = t.element_size()
    last = sum((d - 1) * st for d, st in zip(t.shape, t.stride()))
    lo = t.storage_offset() * el
    return lo, lo + (last + 1) * el


def _table(torch, tensors: Mapping[str, object]):
    """The publish table of tensors: TensorSpec messages in order, and the
    storages to copy (each once, only the span its tensors reach) with the
    entries placed on them. A tensor's storage_offset is relative to its
    span."""
    specs: List[object] = []
    storages: List[_Storage] = []
    by_ptr: Dict[Tuple[str, int], _Storage] = {}
    views: List[Tuple[int, object, _Storage]] = []
    for i, (name, t) in enumerate(tensors.items()):
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor names must be non-empty strings, not {name!r}")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensor {name!r} is a {type(t).__name__}, not a torch.Tensor")
        st = _untyped_storage(t)
        dtype = dtypes.safetensors_dtype(t.dtype, torch)
        shape = [int(d) for d in t.shape]
        specs.append(pb.PublishTensorSpec(name=name, dtype=dtype, shape=shape, length=0))
        if st.nbytes() == 0 or t.numel() == 0:  # no bytes to place
            continue
        k = (str(st.device), st.data_ptr())
        s = by_ptr.get(k)
        lo, hi = _reach(t)
        if s is None:
            s = by_ptr[k] = _Storage(f"s{len(by_ptr)}", st, lo, hi - lo)
            storages.append(s)
        else:
            end = max(s.base + s.nbytes, hi)
            s.base = min(s.base, lo)
            s.nbytes = end - s.base
        s.entries.append(i)
        views.append((i, t, s))
    for s in storages:
        end = s.base + s.nbytes
        s.base -= s.base % _SPAN_ALIGN
        s.nbytes = end - s.base
    for i, t, s in views:
        specs[i].length = s.nbytes
        specs[i].layout.CopyFrom(pb.TensorLayout(storage=s.key, strides=list(t.stride()),
                                                 storage_offset=t.storage_offset() - s.base // t.element_size()))
    return specs, storages


def _requests(begin_fields: dict, specs: List[object]) -> List[object]:
    """PublishBegin with the first entries, then PublishTensors messages."""
    chunks: List[List[object]] = [[]]
    size = 0
    for s in specs:
        n = s.ByteSize() + 8
        if size + n > _MAX_TABLE_CHUNK_BYTES and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(s)
        size += n
    reqs = [pb.PublishRequest(begin=pb.PublishBegin(tensor_count=len(specs), tensors=chunks[0], **begin_fields))]
    reqs += [pb.PublishRequest(tensors=pb.PublishTensors(tensors=c)) for c in chunks[1:]]
    return reqs


def _host_bytes(src) -> memoryview:
    """The bytes of the 1-D uint8 tensor src, copied to the host first when
    it lives on a device."""
    if src.device.type != "cpu":
        src = src.cpu()
    return memoryview(src.numpy()).cast("B")


class _WritableShm:
    """A posix-shm (or, given its writable descriptor, memfd) handle of a
    publish plan, mapped for writing."""

    def __init__(self, index: int, handle: HandleSpec, fd: Optional[int] = None):
        if fd is None:
            self.buffer = map_shm(index, handle, writable=True).buffer
        else:
            self.buffer = map_memfd(index, handle, fd, writable=True).buffer

    def write(self, torch, src, offset: int, nbytes: int) -> None:
        """Copy the 1-D uint8 tensor src (nbytes long) to [offset, offset+nbytes)."""
        self.buffer[offset:offset + nbytes] = _host_bytes(src)

    def close(self) -> None:
        if self.buffer is not None:
            self.buffer.close()


class _WritableIpc:
    """A cuda-ipc/hip-ipc handle of a publish plan, opened through PyTorch."""

    def __init__(self, index: int, handle: HandleSpec, uuid: str, torch, device_index: Optional[int]):
        from ._ipc import TorchIpcRegion, torch_device_index  # noqa: PLC0415

        if not torch.cuda.is_available():
            raise WcacheError(f"plan handle {index} ({handle.kind}): PyTorch sees no GPU")
        self.region = TorchIpcRegion(index, handle, torch_device_index(torch, uuid, device_index), torch)

    def write(self, torch, src, offset: int, nbytes: int) -> None:
        dst = torch.empty((0,), dtype=torch.uint8, device=self.region.storage.device).set_(
            self.region.storage, offset, (nbytes,), (1,))
        dst.copy_(src)

    def close(self) -> None:
        self.region = None


def _plan_descriptors(socket_path: str, plan) -> dict:
    """The writable descriptors of the plan's memfd handles: index → fd (the caller closes them)."""
    wanted = {i: int(h.size) for i, h in enumerate(plan.handles) if h.kind == HANDLE_MEMFD}
    if not wanted:
        return {}
    got = fdchannel.fetch(socket_path, fdchannel.OP_PUBLISH, int(plan.publish_id), bytes(plan.fd_token))
    bad = sorted(set(got) ^ set(wanted)) or [i for i in got if got[i][0] != wanted[i]]
    if bad:
        for _, fd in got.values():
            os.close(fd)
        raise ProtocolError(f"descriptor channel of {socket_path} sent descriptors for plan handles {sorted(got)}, "
                            f"the plan's memfd handles are {sorted(wanted)} (mismatch at {bad})")
    return {i: fd for i, (_, fd) in got.items()}


def _open_writable(torch, plan, device_index: Optional[int], socket_path: str) -> List[object]:
    regions: List[object] = []
    fds = _plan_descriptors(socket_path, plan)
    try:
        for i, h in enumerate(plan.handles):
            spec = HandleSpec(h.kind, bytes(h.data), int(h.size))
            if h.kind == HANDLE_POSIX_SHM:
                regions.append(_WritableShm(i, spec))
            elif h.kind == HANDLE_MEMFD:
                regions.append(_WritableShm(i, spec, fds[i]))
            elif h.kind in (HANDLE_CUDA_IPC, HANDLE_HIP_IPC):
                regions.append(_WritableIpc(i, spec, plan.device_uuid, torch, device_index))
            else:
                raise ProtocolError(f"plan handle {i}: unknown kind {h.kind!r}")
    except BaseException:
        for r in regions:
            r.close()
        raise
    finally:
        for fd in fds.values():  # a mapping outlives its descriptor
            os.close(fd)
    return regions


# Bytes copied between two progress reports (and hashed in one update).
_COPY_CHUNK = 64 << 20


def _fill(torch, plan, storages: List[_Storage], n_entries: int, device_index: Optional[int],
          want_sha256: bool, socket_path: str, progress: Callable[[int, int], None]) -> List[bytes]:
    """Copy every storage's span to its place in plan, reporting
    progress(done, total) in bytes after each chunk; return one SHA-256 per
    entry (an empty list, and nothing hashed, unless want_sha256)."""
    if len(plan.tensors) != n_entries:
        raise ProtocolError(f"the plan has {len(plan.tensors)} places for {n_entries} tensors")
    for s in storages:  # check every place before anything is opened or copied
        place = plan.tensors[s.entries[0]]
        if place.handle_index >= len(plan.handles) or place.length != s.nbytes or \
                place.offset + place.length > plan.handles[place.handle_index].size:
            raise ProtocolError(f"plan place of tensor {place.name!r} does not fit its {s.nbytes} bytes")
        for i in s.entries[1:]:
            other = plan.tensors[i]
            if (other.handle_index, other.offset, other.length) != (place.handle_index, place.offset, place.length):
                raise ProtocolError(f"tensors {place.name!r} and {other.name!r} share a storage "
                                    "but the plan places them apart")
    regions = _open_writable(torch, plan, device_index, socket_path)
    sums: List[bytes] = [hashlib.sha256(b"").digest()] * n_entries if want_sha256 else []
    total, done = sum(s.nbytes for s in storages), 0
    try:
        for s in storages:
            place = plan.tensors[s.entries[0]]
            h = hashlib.sha256() if want_sha256 else None
            for at in range(0, s.nbytes, _COPY_CHUNK):
                n = min(_COPY_CHUNK, s.nbytes - at)
                piece = _byte_view(torch, s.storage, s.base + at, n)
                regions[place.handle_index].write(torch, piece, int(place.offset) + at, n)
                if h is not None:
                    h.update(_host_bytes(piece))
                done += n
                progress(done, total)
            if h is not None:
                for i in s.entries:
                    sums[i] = h.digest()
        if torch.cuda.is_available() and any(isinstance(r, _WritableIpc) for r in regions):
            torch.cuda.synchronize()
    finally:
        for r in regions:
            r.close()
    return sums if want_sha256 else []


class _LogProgress:
    """Publish progress as the CLI shows it without a terminal: one info
    line per 10 % of the bytes (and the last), through the "wcache" logger."""

    def __init__(self):
        self.step = -1

    def __call__(self, done: int, total: int) -> None:
        if total <= 0:
            return
        step = done * 10 // total
        if step > self.step:
            self.step = step
            log.info("wcache: publishing %d%% (%d of %d bytes)", done * 100 // total, done, total)


def _receive(call, target, want: str, answering: str):
    """The daemon's next message, which must be want ("plan" or "done")."""
    try:
        msg = next(call)
    except StopIteration:
        raise ProtocolError(f"wcache daemon at {target.socket} ended the publish without answering "
                            f"{answering}") from None
    except grpc.RpcError as err:
        raise _translate("publish", target, err) from None
    if msg.WhichOneof("msg") != want:
        raise ProtocolError(f"wcache daemon at {target.socket} answered {answering} with "
                            f"{msg.WhichOneof('msg')!r} instead of {want}")
    return getattr(msg, want)


def publish(config: Union[CacheConfig, "pb.CacheConfig"], tensors: Mapping[str, object],
            device_index: Optional[int] = None, metadata: Optional[Mapping[str, str]] = None,
            socket: Optional[str] = None, device_uuid: Optional[str] = None, client_name: Optional[str] = None,
            sha256: bool = False, before_commit: Optional[Callable[[], None]] = None,
            timeout: float = 600.0, getenv: Getenv = None, allow_owners: Iterable[int] = (),
            progress: Optional[Callable[[int, int], None]] = None,
            files: Union[Sequence[str], content.SourceFiles, None] = None,
            digest_cache: Optional[content.DigestCache] = None,
            on_hash_progress: Optional[Callable[[str, int, int], None]] = None) -> PublishResult:
    """Publish tensors into the (empty) daemon of this process's GPU.

    config: the identity of the published weights (set engine_name and
    engine_version: the bytes are the engine's post-processing). tensors:
    name → torch.Tensor, any dtype (a dtype without a safetensors spelling
    travels as "torch.<name>"). metadata: a small map of strings returned with
    every attach. Discovery (socket, device_uuid, device_index, getenv,
    allow_owners) as wcache.attach. sha256: send a SHA-256 of every entry
    (required by a daemon run with --verify-publish); without it nothing is
    hashed. progress: called with (bytes copied, bytes to copy) after each
    chunk of at most 64 MiB; None logs an info line per 10 % through the
    "wcache" logger, as `wcache publish` does without a terminal. Each
    storage is published as the span of it that its tensors reach, not
    whole (a view of a larger buffer publishes its own bytes, strides and
    storage offsets relative to that span). before_commit: called
    after every byte is in place and before the commit; an exception from it
    aborts the publish. timeout: seconds for the whole publish.

    files: the checkpoint files the tensors were loaded from (paths, or a
    wcache.content.SourceFiles made before the load, which load_or_publish
    does); None (the default): those config.model names
    (wcache.checkpoint.model_files), when it names a local checkpoint. The
    publish then carries their content (each file's digest from
    the per-user digest_cache, or hashed once and cached, reporting
    on_hash_progress(name, done, total); and the identity, checked to hold
    since the files were named), and the daemon's clients prove their own
    files against it (wcache.attach(files=…)): an engine naming changed
    files never attaches to these weights. Without files (none named, none
    found), no client can prove its files: only a daemon that allows
    "headers" answers attaches to the publication.

    Anything that ends the call before the commit (an exception, the process
    dying) leaves the daemon empty, its allocations freed. Raises
    NoDaemonError (no socket), PublishInProgressError (another client is
    publishing: load on your own), HoldsWeightsError (the daemon serves
    weights: attach, or evict first), PublishConflictError (draining or
    stopping), IncompatibleConfigError (the daemon was started with
    another parallel layout: ``diffs`` names the fields), DaemonError (e.g.
    INVALID_ARGUMENT for a bad table,
    DATA_LOSS for a digest the daemon's check refused, PERMISSION_DENIED),
    ProtocolError, and the errors of discovery.
    """
    torch = _import_torch()
    specs, storages = _table(torch, tensors)
    if not specs:
        raise ValueError("nothing to publish: tensors is empty")
    begin = {"config": _config_message(config),
             "client_name": client_name if client_name is not None else default_client_name(),
             "metadata": {str(k): str(v) for k, v in (metadata or {}).items()}}
    if files is None:
        files = model_files(begin["config"].model)
    if files is not None:
        source = files if isinstance(files, content.SourceFiles) else content.SourceFiles(files)
        begin["files"] = content.files_to_proto(source.records(cache=digest_cache, progress=on_hash_progress))
    target = resolve(socket=socket, device_uuid=device_uuid, device_index=device_index, getenv=getenv)
    check_socket(target, allow_owners)
    probe(target, timeout=min(timeout, 5.0))

    requests: "queue.Queue[object]" = queue.Queue()

    def outgoing():
        while True:
            item = requests.get()
            if item is None:
                return
            yield item

    channel = _channel(target.socket)
    call = None
    try:
        rpc = channel.stream_stream(pb.METHOD_PUBLISH, request_serializer=pb.PublishRequest.SerializeToString,
                                    response_deserializer=pb.PublishResponse.FromString)
        call = rpc(outgoing(), timeout=timeout)
        for r in _requests(begin, specs):
            requests.put(r)
        plan = _receive(call, target, "plan", "the table")
        if target.device_uuid is not None and plan.device_uuid != target.device_uuid:
            raise ProtocolError(f"wcache daemon at {target.socket} serves device {plan.device_uuid!r}, "
                                f"not {target.device_uuid!r}: refusing to publish into another GPU")
        sums = _fill(torch, plan, storages, len(specs), device_index, sha256, target.socket,
                     progress if progress is not None else _LogProgress())
        if before_commit is not None:
            before_commit()
        requests.put(pb.PublishRequest(commit=pb.PublishCommit(sha256=sums)))
        d = _receive(call, target, "done", "the commit")
        return PublishResult(int(d.generation), d.config_digest, int(d.bytes), int(d.tensors), bool(d.verified))
    finally:
        requests.put(None)
        if call is not None:
            call.cancel()
        channel.close()


def _split(result) -> Tuple[Mapping[str, object], Dict[str, str]]:
    """load()'s result: a mapping of tensors, or (tensors, metadata)."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Mapping):
        return result[0], dict(result[1] or {})
    if isinstance(result, Mapping):
        return result, {}
    raise TypeError("load() must return a mapping of name to torch.Tensor, or (tensors, metadata), "
                    f"not {type(result).__name__}")


def _another_model(exc: IncompatibleConfigError) -> bool:
    """Whether a mismatch says the daemon holds other models only: even the
    nearest generation differs in model or checkpoint digest."""
    return any(d.field in ("model", "checkpoint_digest") for d in exc.diffs)


def load_or_publish(config: Union[CacheConfig, "pb.CacheConfig"], load: Callable[[], object],
                    device_index: Optional[int] = None, wait: float = 60.0,
                    files: Optional[Sequence[str]] = None, **kwargs) -> Weights:
    """Attach when the daemon holds weights for config; publish load()'s
    result into an empty daemon; without a daemon, return load()'s tensors.

    load() is the engine's own loader and post-processing; it returns a
    mapping of name → torch.Tensor on the engine's device, or a pair
    (tensors, metadata) where metadata is a small map of strings the engine
    needs to rebuild what tensors cannot carry. It is called at most once.

    One action per daemon state (docs/python-client.md, "Publish mode"):

    - absent (NoDaemonError): load, "loaded";
    - empty: load, publish, attach to what was published, "published";
    - publishing (another client): load, then publish: still in progress,
      "loaded" (PublishInProgressError in ``reason``); committed meanwhile,
      as "serving" below;
    - draining or stopping (DaemonBusyError): wait up to ``wait`` seconds
      (polling) for the daemon to be empty, serving or gone, then act on
      that state; still draining after ``wait``: load, "loaded";
    - serving a match: attach, "attached" (load() is not called);
    - serving other models only (even the nearest generation differs in
      model or checkpoint digest: another model, a target beside this
      draft): load, publish a generation of its own beside them,
      "published"; a daemon whose memory cap or free memory cannot take it
      (RESOURCE_EXHAUSTED, nothing is evicted) or an older daemon that holds
      one generation only: "loaded" with the reason. A daemon started with
      another parallel layout refuses the publish: IncompatibleConfigError;
    - serving this model with other settings (dtype, layout, engine…):
      IncompatibleConfigError (a deployment error, never a silent reload).
      A race lost to an engine with the same config attaches to its
      weights, "attached".

    Returns Weights (a dict with ``source``, ``metadata``, ``attachment``,
    ``reason``): "attached" or "published" tensors live in the daemon's
    memory (the engine may drop its own copies); "loaded" are load()'s own
    tensors, unchanged (``reason`` says why).

    files (the checkpoint files load() reads; None, the default: those
    config.model names, wcache.checkpoint.model_files): attaches prove them
    (content_policy, default "identity": the files the publisher named
    attach by one stat each; files that are not proven without reading them
    are a miss, "loaded"; other content is ContentMismatchError, like a
    config mismatch an error), and a publish carries their content, their
    identities taken before load() runs (wcache.publish, files).

    kwargs go to attach and publish where they apply (socket, device_uuid,
    client_name, getenv, allow_owners, timeout, digest_cache,
    on_hash_progress; sha256, before_commit and progress to publish;
    library, mappers, copy, handle_kinds, content_policy and
    on_daemon_gone/on_notice to attach). Raises IncompatibleConfigError
    and ContentMismatchError (above), and every error of attach and publish
    other than the cases above.
    """
    publish_only = {"sha256", "before_commit", "progress"}
    attach_only = {"library", "on_daemon_gone", "on_notice", "mappers", "copy", "handle_kinds", "content_policy"}
    attach_kw = {k: v for k, v in kwargs.items() if k not in publish_only}
    publish_kw = {k: v for k, v in kwargs.items() if k not in attach_only}
    if files is None:
        files = model_files(_config_message(config).model)
    if files is not None:
        files = [os.fspath(f) for f in files]
        attach_kw["files"] = files

    def own(reason: str) -> Weights:
        tensors, metadata = _split(load())
        return Weights(tensors, "loaded", metadata, reason=reason)

    deadline = time.monotonic() + max(wait, 0.0)
    pause = 0.05
    beside = None
    while True:
        try:
            att = attach(config, device_index=device_index, **attach_kw)
        except EmptyDaemonError as exc:
            log.info("wcache: %s; loading and publishing", exc)
            break
        except IncompatibleConfigError as exc:
            if not _another_model(exc):
                raise  # this model with other settings: a deployment error, never a silent reload
            # The daemon holds other models only: ours becomes a generation
            # of its own beside them.
            log.info("wcache: the daemon holds other models (%s); loading and publishing ours beside them", exc)
            beside = exc
            break
        except NoDaemonError as exc:
            log.info("wcache: %s; loading on our own", exc)
            return own(str(exc))
        except DaemonBusyError as exc:
            if pause == 0.05:
                log.info("wcache: %s; waiting up to %g s for it to be empty or serving", exc, wait)
            if time.monotonic() >= deadline:
                reason = f"{exc} (still {exc.state} after waiting {wait:g} s)"
                log.warning("wcache: %s; loading on our own", reason)
                return own(reason)
            time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 2, 1.0)
            continue
        return Weights(att.tensors(), "attached", att.metadata, att)

    # The identities the files have before load() reads them: the publish
    # checks they still hold when it records the files' content.
    source = content.SourceFiles(files) if files is not None else None
    tensors, metadata = _split(load())
    try:
        publish(config, tensors, device_index=device_index, metadata=metadata, files=source, **publish_kw)
    except IncompatibleConfigError:
        raise  # a daemon kept for another parallel layout: a deployment error
    except DaemonError as exc:
        if getattr(exc.code, "name", "") != "RESOURCE_EXHAUSTED":
            raise
        # No room beside what the daemon holds; nothing is evicted for us.
        log.warning("wcache: %s; using our own tensors", exc)
        return Weights(tensors, "loaded", metadata, reason=str(exc))
    except PublishInProgressError as exc:
        log.warning("wcache: %s; using our own tensors", exc)
        return Weights(tensors, "loaded", metadata, reason=str(exc))
    except HoldsWeightsError as exc:
        # Another engine published while load() ran: its weights, when
        # they are ours, are as good as ours and already shared.
        try:
            att = attach(config, device_index=device_index, **attach_kw)
        except (IncompatibleConfigError, content.ContentMismatchError, NoDaemonError, DaemonBusyError) as lost:
            if beside is not None:  # a daemon that holds one generation only
                reason = f"the daemon holds other weights and no room for ours: {beside}"
            else:
                reason = f"lost the publish race ({exc}) and cannot attach: {lost}"
            log.warning("wcache: %s; using our own tensors", reason)
            return Weights(tensors, "loaded", metadata, reason=reason)
        log.info("wcache: %s; attached to the weights another client published", exc)
        return Weights(att.tensors(), "attached", att.metadata, att, reason=str(exc))
    except PublishConflictError as exc:  # draining or stopping: our tensors are loaded already
        log.warning("wcache: %s; using our own tensors", exc)
        return Weights(tensors, "loaded", metadata, reason=str(exc))
    att = attach(config, device_index=device_index, **attach_kw)
    return Weights(att.tensors(), "published", att.metadata, att)
