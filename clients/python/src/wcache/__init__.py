"""Python client of wcache: attach to the daemon that keeps a model's weights on this GPU.

Main entry points:

* ``attach(config, socket=None, device_uuid=None, device_index=None, ...)`` →
  Attachment (a lease; ``.tensors()`` gives zero-copy tensors, ``.release()``).
* ``load_or_publish(config, load, device_index=None)`` → Weights: attach, or
  publish what the engine's own ``load()`` returns into an empty daemon, or
  (no daemon) return it unchanged; ``publish(config, tensors, ...)``.
* ``CacheConfig`` and ``checkpoint_digest(dir)``: what the engine expects.
* ``device_uuid(index)`` / ``canonical_device_uuid(raw, platform)``: the
  physical GPU identity daemons are keyed by.
* ``HandleMappers``: where a vendor's mapper for its handle kind
  (``x-VENDOR-NAME``) is registered, passed to ``attach(..., mappers=)``.
* Errors: NoDaemonError (the only case to load from disk; EmptyDaemonError, a
  daemon without weights, is one), PublishInProgressError, HoldsWeightsError,
  PublishConflictError, UnsafeSocketError,
  DaemonDeadError, IncompatibleConfigError (.diffs), DaemonError,
  ProtocolError (UnknownHandleKindError: no mapper for a handle's kind),
  all WcacheError.

See docs/python-client.md.
"""

import importlib as _importlib

try:  # probe the dependencies, to say what to install rather than "No module named 'google'"
    for _dependency in ("google.protobuf", "grpc"):
        _importlib.import_module(_dependency)
except ImportError as _exc:
    raise ImportError(
        f"wcache needs grpcio (>= 1.51) and protobuf (>= 4.21), and this Python lacks {_exc.name!r}: "
        "pip install grpcio protobuf, or on Debian/Ubuntu apt-get install python3-grpcio python3-protobuf",
        name=_exc.name) from _exc

from . import pb
from .client import Attachment, DaemonGone, EvictResult, ResidentBytes, attach, default_client_name, evict, resident_bytes, status
from .checkpoint import checkpoint_digest
from .hub import ModelNotCachedError, resolve_model
from . import content
from .content import (ContentMismatchError, ContentUnknownError, DigestCache, PolicyRefusedError, digest_file,
                      identities_match, prove_content)
from .config import PROTOCOL_VERSION, CacheConfig, InvalidConfigError
from .device import (MOCK_CAPABILITY, canonical_device_uuid, device_capability, device_index_for_uuid, device_uuid,
                     mock_device_uuids)
from .errors import (
    CheckpointError,
    DaemonBusyError,
    DaemonDeadError,
    DaemonError,
    EmptyDaemonError,
    FieldDiff,
    HandleKindsError,
    HoldsWeightsError,
    IncompatibleConfigError,
    InvalidUUIDError,
    NoDaemonError,
    ProtocolError,
    PublishConflictError,
    PublishInProgressError,
    SocketPathTooLongError,
    TemplateError,
    UnsafeSocketError,
    WcacheError,
)
from .manifest import TensorSpec
from .mappers import HandleMappers, MapContext, UnknownHandleKindError, is_vendor_kind, validate_handle_kind
from .paths import Layout, default_dir, parse_template, validate_device_uuid
from .publish import PublishResult, Weights, load_or_publish, publish
from .vocab import normalize_dtype, normalize_quantization

from ._version import __version__

NOTICE_DRAINING = pb.NOTICE_KIND_DRAINING

__all__ = [
    "Attachment", "CacheConfig", "CheckpointError", "DaemonBusyError", "DaemonDeadError", "DaemonError", "DaemonGone",
    "EmptyDaemonError", "EvictResult", "ResidentBytes", "HoldsWeightsError", "PublishConflictError", "PublishInProgressError", "PublishResult",
    "Weights", "load_or_publish", "publish",
    "FieldDiff", "HandleKindsError", "HandleMappers", "IncompatibleConfigError", "MapContext", "UnknownHandleKindError",
    "is_vendor_kind", "validate_handle_kind", "MOCK_CAPABILITY", "mock_device_uuids", "InvalidConfigError", "InvalidUUIDError", "Layout", "NOTICE_DRAINING", "NoDaemonError",
    "PROTOCOL_VERSION", "ProtocolError", "SocketPathTooLongError", "TemplateError", "TensorSpec",
    "UnsafeSocketError", "WcacheError", "attach", "canonical_device_uuid", "checkpoint_digest", "default_client_name",
    "default_dir", "device_capability", "device_index_for_uuid", "device_uuid", "normalize_dtype",
    "normalize_quantization", "parse_template", "evict", "pb", "resident_bytes", "status", "validate_device_uuid",
    "ModelNotCachedError", "resolve_model", "content", "ContentMismatchError", "ContentUnknownError", "DigestCache",
    "PolicyRefusedError", "digest_file", "identities_match", "prove_content", "__version__",
]
