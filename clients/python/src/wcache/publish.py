"""Publish an engine's own weights into an empty daemon; load_or_publish around its loader.

    import wcache

    weights = wcache.load_or_publish(cfg, load, device_index=local_gpu)
    model.load_state_dict(weights, assign=True)

``load_or_publish`` attaches when the daemon holds weights for ``cfg``; when
the daemon is empty it calls ``load()`` (the engine's own loading and
post-processing), publishes the result and returns tensors that live in the
daemon's memory; when there is no daemon it returns ``load()``'s tensors
unchanged. A config mismatch stays an error (IncompatibleConfigError), never
a silent reload.

``publish`` is the lower-level call: one Publish RPC (see docs/protocol.md,
"Publish"). A tensor is published as the storage it views, not as a
contiguous copy: each distinct storage is placed once, and every tensor
carries its storage key, strides and storage offset, so that after attach a
tensor has the shape, strides and storage offset it was published with, and
tensors that shared a storage share one again (a storage of the attached
process's own over that byte range; see wcache.tensors).

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
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import grpc

import os

from . import dtypes, fdchannel, pb
from .client import _channel, _config_message, _translate, attach, default_client_name
from .config import CacheConfig
from .discovery import check_socket, probe, resolve
from .errors import EmptyDaemonError, NoDaemonError, ProtocolError, PublishInProgressError, WcacheError
from .manifest import HANDLE_CUDA_IPC, HANDLE_HIP_IPC, HANDLE_MEMFD, HANDLE_POSIX_SHM, HandleSpec
from .paths import Getenv
from .shm import map_memfd, map_shm

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
    """One distinct storage of the published tensors and the entries on it."""

    key: str
    storage: object
    nbytes: int
    entries: List[int] = field(default_factory=list)


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


def _byte_view(torch, storage, nbytes: int):
    """A 1-D uint8 tensor over the whole of storage."""
    return torch.empty((0,), dtype=torch.uint8, device=storage.device).set_(storage, 0, (nbytes,), (1,))


def _table(torch, tensors: Mapping[str, object]):
    """The publish table of tensors: TensorSpec messages in order, and the
    storages to copy (each once) with the entries placed on them."""
    specs: List[object] = []
    storages: List[_Storage] = []
    by_ptr: Dict[Tuple[str, int], _Storage] = {}
    for i, (name, t) in enumerate(tensors.items()):
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor names must be non-empty strings, not {name!r}")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensor {name!r} is a {type(t).__name__}, not a torch.Tensor")
        st = _untyped_storage(t)
        dtype = dtypes.safetensors_dtype(t.dtype, torch)
        shape = [int(d) for d in t.shape]
        own = t.element_size() * t.numel()
        specs.append(None)
        k = (str(st.device), st.data_ptr())
        if st.nbytes() == 0:  # no bytes to place
            specs[i] = pb.PublishTensorSpec(name=name, dtype=dtype, shape=shape, length=own)
            continue
        s = by_ptr.get(k)
        if s is None:
            s = by_ptr[k] = _Storage(f"s{len(by_ptr)}", st, st.nbytes())
            storages.append(s)
        s.entries.append(i)
        specs[i] = pb.PublishTensorSpec(name=name, dtype=dtype, shape=shape, length=s.nbytes,
                                        layout=pb.TensorLayout(storage=s.key, strides=list(t.stride()),
                                                               storage_offset=t.storage_offset()))
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


class _WritableShm:
    """A posix-shm (or, given its writable descriptor, memfd) handle of a
    publish plan, mapped for writing."""

    def __init__(self, index: int, handle: HandleSpec, fd: Optional[int] = None):
        if fd is None:
            self.buffer = map_shm(index, handle, writable=True).buffer
        else:
            self.buffer = map_memfd(index, handle, fd, writable=True).buffer

    def write(self, torch, src, offset: int, nbytes: int) -> bytes:
        """Copy the uint8 tensor src to [offset, offset+nbytes); return its SHA-256."""
        if src.device.type != "cpu":
            src = src.cpu()
        data = memoryview(src.numpy()).cast("B")
        self.buffer[offset:offset + nbytes] = data
        return hashlib.sha256(data).digest()

    def close(self) -> None:
        if self.buffer is not None:
            self.buffer.close()


class _WritableIpc:
    """A cuda-ipc/hip-ipc handle of a publish plan, opened through PyTorch."""

    def __init__(self, index: int, handle: HandleSpec, uuid: str, torch, device_index: Optional[int]):
        from .ipc import TorchIpcRegion, torch_device_index  # noqa: PLC0415

        if not torch.cuda.is_available():
            raise WcacheError(f"plan handle {index} ({handle.kind}): PyTorch sees no GPU")
        self.region = TorchIpcRegion(index, handle, torch_device_index(torch, uuid, device_index), torch)

    def write(self, torch, src, offset: int, nbytes: int) -> bytes:
        dst = torch.empty((0,), dtype=torch.uint8, device=self.region.storage.device).set_(
            self.region.storage, offset, (nbytes,), (1,))
        dst.copy_(src)
        return b""  # digests of device memory are taken after the copy, see _fill

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


def _fill(torch, plan, storages: List[_Storage], n_entries: int, device_index: Optional[int],
          want_sha256: bool, socket_path: str) -> List[bytes]:
    """Copy every storage to its place in plan; return one SHA-256 per entry
    (empty list unless want_sha256)."""
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
    sums: List[bytes] = [hashlib.sha256(b"").digest()] * n_entries
    try:
        for s in storages:
            place = plan.tensors[s.entries[0]]
            src = _byte_view(torch, s.storage, s.nbytes)
            digest = regions[place.handle_index].write(torch, src, int(place.offset), s.nbytes)
            if want_sha256:
                if not digest:
                    digest = hashlib.sha256(memoryview(src.cpu().numpy()).cast("B")).digest()
                for i in s.entries:
                    sums[i] = digest
        if torch.cuda.is_available() and any(isinstance(r, _WritableIpc) for r in regions):
            torch.cuda.synchronize()
    finally:
        for r in regions:
            r.close()
    return sums if want_sha256 else []


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
            timeout: float = 600.0, getenv: Getenv = None, allow_owners: Iterable[int] = ()) -> PublishResult:
    """Publish tensors into the (empty) daemon of this process's GPU.

    config: the identity of the published weights (set engine_name and
    engine_version: the bytes are the engine's post-processing). tensors:
    name → torch.Tensor, any dtype (a dtype without a safetensors spelling
    travels as "torch.<name>"). metadata: a small map of strings returned with
    every attach. Discovery (socket, device_uuid, device_index, getenv,
    allow_owners) as wcache.attach. sha256: send a SHA-256 of every entry
    (required by a daemon run with --verify-publish). before_commit: called
    after every byte is in place and before the commit; an exception from it
    aborts the publish. timeout: seconds for the whole publish.

    Anything that ends the call before the commit (an exception, the process
    dying) leaves the daemon empty, its allocations freed. Raises
    NoDaemonError (no socket), PublishInProgressError (another client is
    publishing: load on your own), HoldsWeightsError (the daemon serves
    weights: attach, or evict first), PublishConflictError (draining or
    stopping), DaemonError (e.g. INVALID_ARGUMENT for a bad table,
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
        sums = _fill(torch, plan, storages, len(specs), device_index, sha256, target.socket)
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


def load_or_publish(config: Union[CacheConfig, "pb.CacheConfig"], load: Callable[[], object],
                    device_index: Optional[int] = None, **kwargs) -> Weights:
    """Attach when the daemon holds weights for config; publish load()'s
    result into an empty daemon; without a daemon, return load()'s tensors.

    load() is the engine's own loader and post-processing; it returns a
    mapping of name → torch.Tensor on the engine's device, or a pair
    (tensors, metadata) where metadata is a small map of strings the engine
    needs to rebuild what tensors cannot carry. It is called at most once.

    Returns Weights (a dict with ``source``, ``metadata``, ``attachment``,
    ``reason``): "attached" or "published" tensors live in the daemon's
    memory (the engine may drop its own copies); "loaded" are load()'s own
    tensors, unchanged, when there is no daemon or another client was
    publishing at the same time (``reason`` says so).

    kwargs go to attach and publish where they apply (socket, device_uuid,
    client_name, getenv, allow_owners, timeout; sha256 and before_commit to
    publish; library, mappers, copy and on_daemon_gone/on_notice to attach). Raises
    IncompatibleConfigError when the daemon holds other weights (never a
    silent reload), and every error of attach and publish other than the
    two fallbacks.
    """
    publish_only = {"sha256", "before_commit"}
    attach_only = {"library", "on_daemon_gone", "on_notice", "mappers", "copy", "handle_kinds"}
    attach_kw = {k: v for k, v in kwargs.items() if k not in publish_only}
    publish_kw = {k: v for k, v in kwargs.items() if k not in attach_only}
    try:
        att = attach(config, device_index=device_index, **attach_kw)
    except EmptyDaemonError as exc:
        log.info("wcache: %s; loading and publishing", exc)
    except NoDaemonError as exc:
        log.info("wcache: %s; loading on our own", exc)
        tensors, metadata = _split(load())
        return Weights(tensors, "loaded", metadata, reason=str(exc))
    else:
        return Weights(att.tensors(), "attached", att.metadata, att)
    tensors, metadata = _split(load())
    try:
        publish(config, tensors, device_index=device_index, metadata=metadata, **publish_kw)
    except PublishInProgressError as exc:
        log.warning("wcache: %s; using our own tensors", exc)
        return Weights(tensors, "loaded", metadata, reason=str(exc))
    att = attach(config, device_index=device_index, **attach_kw)
    return Weights(att.tensors(), "published", att.metadata, att)
