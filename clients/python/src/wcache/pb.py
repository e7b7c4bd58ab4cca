"""Protocol message classes, built at import time from the committed descriptor set.

The classes live in a private DescriptorPool (never the process-wide default
pool), so importing wcache cannot clash with another copy of these protos or of
google.rpc.Status that an application may have loaded. They behave like
generated messages: ``pb.AttachRequest(config=..., client_name=...)``,
``SerializeToString()``, ``FromString(data)``.

Works with protobuf's python, cpp and upb implementations from 3.20 (Python
package 4.21, Debian 12) to 6.x: message classes come from
``message_factory.GetMessageClass`` where it exists (protobuf >= 4.22) and from
``MessageFactory.GetPrototype`` before that.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ._descriptors import FILE_DESCRIPTOR_SET

CONFIG_PACKAGE = "wcache.config.v1"
DAEMON_PACKAGE = "wcache.daemon.v1"
DAEMON_SERVICE = DAEMON_PACKAGE + ".Daemon"

# Fully-qualified gRPC method paths of the Daemon service.
METHOD_STATUS = "/" + DAEMON_SERVICE + "/Status"
METHOD_ATTACH = "/" + DAEMON_SERVICE + "/Attach"
METHOD_STOP = "/" + DAEMON_SERVICE + "/Stop"
METHOD_PUBLISH = "/" + DAEMON_SERVICE + "/Publish"
METHOD_EVICT = "/" + DAEMON_SERVICE + "/Evict"

# The type URL grpc-go's status.WithDetails gives a ConfigMismatch detail.
CONFIG_MISMATCH_TYPE_URL = "type.googleapis.com/" + DAEMON_PACKAGE + ".ConfigMismatch"


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    fds = descriptor_pb2.FileDescriptorSet.FromString(FILE_DESCRIPTOR_SET)
    for file_proto in fds.file:  # protoc emits dependencies first
        add_serialized = getattr(pool, "AddSerializedFile", None)
        if add_serialized is not None:
            add_serialized(file_proto.SerializeToString())
        else:  # pragma: no cover - very old pure-python runtimes
            pool.Add(file_proto)
    return pool


def _class_factory(pool: descriptor_pool.DescriptorPool):
    get_message_class = getattr(message_factory, "GetMessageClass", None)
    if get_message_class is not None:
        return lambda name: get_message_class(pool.FindMessageTypeByName(name))
    factory = message_factory.MessageFactory(pool)
    return lambda name: factory.GetPrototype(pool.FindMessageTypeByName(name))


POOL = _build_pool()
_message_class = _class_factory(POOL)

CacheConfig = _message_class(CONFIG_PACKAGE + ".CacheConfig")

StatusRequest = _message_class(DAEMON_PACKAGE + ".StatusRequest")
StatusResponse = _message_class(DAEMON_PACKAGE + ".StatusResponse")
Lease = _message_class(DAEMON_PACKAGE + ".Lease")
AttachRequest = _message_class(DAEMON_PACKAGE + ".AttachRequest")
AttachEvent = _message_class(DAEMON_PACKAGE + ".AttachEvent")
Manifest = _message_class(DAEMON_PACKAGE + ".Manifest")
Handle = _message_class(DAEMON_PACKAGE + ".Handle")
Tensor = _message_class(DAEMON_PACKAGE + ".Tensor")
Notice = _message_class(DAEMON_PACKAGE + ".Notice")
StopRequest = _message_class(DAEMON_PACKAGE + ".StopRequest")
StopResponse = _message_class(DAEMON_PACKAGE + ".StopResponse")
FieldDiff = _message_class(DAEMON_PACKAGE + ".FieldDiff")
ConfigMismatch = _message_class(DAEMON_PACKAGE + ".ConfigMismatch")
TensorLayout = _message_class(DAEMON_PACKAGE + ".TensorLayout")
NoWeights = _message_class(DAEMON_PACKAGE + ".NoWeights")
PublishTensorSpec = _message_class(DAEMON_PACKAGE + ".TensorSpec")
FileContent = _message_class(DAEMON_PACKAGE + ".FileContent")
PublishBegin = _message_class(DAEMON_PACKAGE + ".PublishBegin")
PublishTensors = _message_class(DAEMON_PACKAGE + ".PublishTensors")
PublishCommit = _message_class(DAEMON_PACKAGE + ".PublishCommit")
PublishRequest = _message_class(DAEMON_PACKAGE + ".PublishRequest")
PublishPlan = _message_class(DAEMON_PACKAGE + ".PublishPlan")
PublishDone = _message_class(DAEMON_PACKAGE + ".PublishDone")
PublishResponse = _message_class(DAEMON_PACKAGE + ".PublishResponse")
PublishConflict = _message_class(DAEMON_PACKAGE + ".PublishConflict")
EvictRequest = _message_class(DAEMON_PACKAGE + ".EvictRequest")
EvictResponse = _message_class(DAEMON_PACKAGE + ".EvictResponse")
HandleKindsRefused = _message_class(DAEMON_PACKAGE + ".HandleKindsRefused")
FileSHA256 = _message_class(DAEMON_PACKAGE + ".FileSHA256")
ContentProof = _message_class(DAEMON_PACKAGE + ".ContentProof")
ContentRefused = _message_class(DAEMON_PACKAGE + ".ContentRefused")

RpcStatus = _message_class("google.rpc.Status")

# Notice.Kind values.
NOTICE_KIND_UNSPECIFIED = 0
NOTICE_KIND_DRAINING = 1

# DaemonState values.
DAEMON_STATE_EMPTY = 1
DAEMON_STATE_PUBLISHING = 2
DAEMON_STATE_SERVING = 3
DAEMON_STATE_DRAINING = 4
DAEMON_STATE_STOPPING = 5

# ContentRefused.Reason values.
CONTENT_REFUSED_PROOF_REQUIRED = 1
CONTENT_REFUSED_POLICY = 2
CONTENT_REFUSED_UNKNOWN = 3
CONTENT_REFUSED_MISMATCH = 4

# PublishConflict.Reason values.
PUBLISH_CONFLICT_IN_PROGRESS = 1
PUBLISH_CONFLICT_HOLDS_WEIGHTS = 2
PUBLISH_CONFLICT_BUSY = 3
