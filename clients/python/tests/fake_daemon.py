"""A scriptable in-process stand-in for the Go daemon's gRPC service, for client unit tests.

It speaks wcache.daemon.v1 over a Unix socket with grpcio's generic handlers,
so the client's wire handling (manifest, notices, mismatch trailers, stream
end, cancellation) is tested without the Go binaries. Interop with the real
daemon is tested in test_interop.py.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent import futures
from typing import List, Optional

import grpc

from wcache import pb


_END = object()


class FakeDaemon:
    def __init__(self, socket_path: str, manifest, mismatch: Optional[List[tuple]] = None,
                 manifest_delay: float = 0.0, first_event=None):
        self.socket_path = socket_path
        self.manifest = manifest
        self.mismatch = mismatch
        self.mismatch_omitted = 0
        self.manifest_delay = manifest_delay
        self.first_event = first_event
        # pb.ContentRefused details to refuse the next attaches with, in order.
        self.content_refusals: List[object] = []
        self.requests: List[object] = []
        self.attached = threading.Event()
        self.lease_cancelled = threading.Event()
        self._events: "queue.Queue[object]" = queue.Queue()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "Attach": grpc.unary_stream_rpc_method_handler(
                self._attach, request_deserializer=pb.AttachRequest.FromString,
                response_serializer=pb.AttachEvent.SerializeToString),
            "Status": grpc.unary_unary_rpc_method_handler(
                self._status, request_deserializer=pb.StatusRequest.FromString,
                response_serializer=pb.StatusResponse.SerializeToString),
        }
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(pb.DAEMON_SERVICE, handlers),))
        self._server.add_insecure_port("unix://" + socket_path)

    def __enter__(self) -> "FakeDaemon":
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._events.put(_END)
        self._server.stop(grace=None).wait()

    def notice(self, kind: int, message: str = "", deadline_unix_ms: int = 0) -> None:
        self._events.put(pb.AttachEvent(notice=pb.Notice(kind=kind, message=message,
                                                         deadline_unix_ms=deadline_unix_ms)))

    def end_lease(self, code: Optional[grpc.StatusCode] = None, details: str = "") -> None:
        """End the Attach stream: cleanly (code None) or with an error status."""
        self._events.put((code, details))

    def _status(self, request, context):
        return pb.StatusResponse(pid=1, device_uuid=self.manifest.device_uuid, state="serving")

    def _attach(self, request, context):
        self.requests.append(request)
        context.add_callback(self.lease_cancelled.set)
        if self.mismatch is not None:
            mismatch = pb.ConfigMismatch(diffs=[pb.FieldDiff(field=f, daemon_value=d or "", client_value=c or "",
                                                             daemon_absent=d is None, client_absent=c is None)
                                                for f, d, c in self.mismatch], omitted=self.mismatch_omitted)
            status = pb.RpcStatus(code=grpc.StatusCode.FAILED_PRECONDITION.value[0],
                                  message="config mismatch")
            detail = status.details.add()
            detail.type_url = pb.CONFIG_MISMATCH_TYPE_URL
            detail.value = mismatch.SerializeToString()
            context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "config mismatch")
        if self.content_refusals:
            refused = self.content_refusals.pop(0)
            status = pb.RpcStatus(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="content refused")
            detail = status.details.add()
            detail.type_url = "type.googleapis.com/" + refused.DESCRIPTOR.full_name
            detail.value = refused.SerializeToString()
            context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "content refused")
        if self.manifest_delay:
            time.sleep(self.manifest_delay)
        yield self.first_event if self.first_event is not None else pb.AttachEvent(manifest=self.manifest)
        self.attached.set()
        while context.is_active():
            try:
                item = self._events.get(timeout=0.02)
            except queue.Empty:
                continue
            if item is _END:
                return
            if isinstance(item, tuple):
                code, details = item
                if code is not None:
                    context.abort(code, details)
                return
            yield item
