"""Python client of wcache: attach to the daemon that keeps a model's weights on this GPU.

The public surface is ``__all__``:

* ``CacheConfig`` and ``checkpoint_digest(dir)``: what the engine expects.
* ``attach(config, socket=None, device_uuid=None, device_index=None, ...)`` →
  Attachment (a lease; ``.tensors()`` gives zero-copy tensors, ``.release()``).
* ``load_or_publish(config, load, device_index=None)`` → Weights: attach, or
  publish what the engine's own ``load()`` returns into an empty daemon, or
  (no daemon) return it unchanged; ``publish(config, tensors, ...)``.
* ``status(...)`` and ``evict(...)``: ask and tell a daemon.
* ``device_uuid(index)`` and ``device_capability(index)``: the physical GPU
  daemons are keyed by, and what it can run.
* ``HandleMappers``: where a vendor's mapper for its handle kind
  (``x-VENDOR-NAME``) is registered, passed to ``attach(..., mappers=)``.
* Errors, all WcacheError: NoDaemonError (the only case to load from disk;
  EmptyDaemonError, a daemon without weights, is one), PublishInProgressError,
  HoldsWeightsError, PublishConflictError, DaemonDeadError,
  IncompatibleConfigError (.diffs), DaemonError, ContentMismatchError.

The engine integrations are ``wcache.engines.vllm``, ``.sglang`` and
``.transformers``; ``wcache.checkpoint``, ``wcache.content``, ``wcache.dtypes``
and ``wcache.pb`` are public modules; the ``_``-named modules are private. The
names wcache exported before (``canonical_device_uuid``, ``UnsafeSocketError``,
``resolve_model``, …) still resolve from ``wcache``, outside ``__all__``.

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

from ._client import Attachment, attach, evict, status
from ._config import CacheConfig
from ._device import device_capability, device_uuid
from ._errors import (
    DaemonDeadError,
    DaemonError,
    EmptyDaemonError,
    HoldsWeightsError,
    IncompatibleConfigError,
    NoDaemonError,
    PublishConflictError,
    PublishInProgressError,
    WcacheError,
)
from ._mappers import HandleMappers
from ._publish import Weights, load_or_publish, publish
from ._version import __version__
from .checkpoint import checkpoint_digest
from .content import ContentMismatchError

__all__ = [
    # what the engine expects, and the weights it gets
    "CacheConfig", "checkpoint_digest", "attach", "Attachment", "publish", "load_or_publish", "Weights",
    # the daemon, asked and told
    "status", "evict",
    # the GPU a process loads on
    "device_uuid", "device_capability",
    # a vendor's handle kinds
    "HandleMappers",
    # errors: all are WcacheError
    "WcacheError", "NoDaemonError", "EmptyDaemonError", "DaemonError", "DaemonDeadError", "IncompatibleConfigError",
    "PublishInProgressError", "PublishConflictError", "HoldsWeightsError", "ContentMismatchError",
    "__version__",
]

# Names wcache exported before its surface was cut to __all__: each still
# resolves (``wcache.X`` and ``from wcache import X``), from the module that
# defines it, on first use.
_MORE = {
    "DaemonGone": "_client", "EvictResult": "_client", "ResidentBytes": "_client",
    "default_client_name": "_client", "resident_bytes": "_client", "served_checkpoint_digest": "_client",
    "ModelNotCachedError": "_hub", "resolve_model": "_hub",
    "ContentUnknownError": "content", "DigestCache": "content", "PolicyRefusedError": "content",
    "digest_file": "content", "identities_match": "content", "prove_content": "content",
    "PROTOCOL_VERSION": "_config", "InvalidConfigError": "_config",
    "MOCK_CAPABILITY": "_device", "canonical_device_uuid": "_device", "device_index_for_uuid": "_device",
    "mock_device_uuids": "_device",
    "CheckpointError": "_errors", "DaemonBusyError": "_errors", "FieldDiff": "_errors",
    "HandleKindsError": "_errors", "InvalidUUIDError": "_errors", "ProtocolError": "_errors",
    "SocketPathTooLongError": "_errors", "TemplateError": "_errors", "UnsafeSocketError": "_errors",
    "TensorSpec": "_manifest",
    "MapContext": "_mappers", "UnknownHandleKindError": "_mappers",
    "is_vendor_kind": "_mappers", "validate_handle_kind": "_mappers",
    "Layout": "_paths", "default_dir": "_paths", "parse_template": "_paths", "validate_device_uuid": "_paths",
    "PublishResult": "_publish",
    "normalize_dtype": "_vocab", "normalize_quantization": "_vocab",
}


def __getattr__(name):
    if name == "NOTICE_DRAINING":
        return _importlib.import_module(".pb", __name__).NOTICE_KIND_DRAINING
    if name in ("pb", "content"):
        return _importlib.import_module("." + name, __name__)
    module = _MORE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module("." + module, __name__), name)
