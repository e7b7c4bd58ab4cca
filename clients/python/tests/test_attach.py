"""attach() against an in-process fake of the daemon's gRPC service: the wire behaviour
of the lease (manifest, mismatch details, notices, stream end, release)."""

from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest
import torch

import arena
import st_writer
import wcache
from fake_daemon import FakeDaemon
from wcache import DaemonError, IncompatibleConfigError, ProtocolError, WcacheError, pb


CFG = wcache.CacheConfig(model="/m")
UUID = "GPU-fake-0"


@pytest.fixture
def setup(short_tmp):
    rng = np.random.default_rng(9)
    tensors = [st_writer.random_tensor(rng, f"w{i}", ("BF16", "F32")[i % 2], (3, 5)) for i in range(10)]
    manifest, _ = arena.build(short_tmp, tensors, device_uuid=UUID)
    return short_tmp + "/d.sock", manifest, tensors


def test_attach_gets_the_manifest_and_zero_copy_tensors(setup):
    sock, manifest, tensors = setup
    with FakeDaemon(sock, manifest) as d:
        cfg = wcache.CacheConfig(model="/m", tp_size=2, tp_rank=1, extra={"k": "v"})
        with wcache.attach(cfg, socket=sock, client_name="unit") as att:
            assert d.requests[0].client_name == "unit"
            assert wcache.CacheConfig.from_proto(d.requests[0].config) == cfg
            assert (att.device_uuid, att.lease_id, att.generation) == (UUID, 7, 3)
            assert att.config.model == "m"
            ts = att.tensors()
            assert ts is att.tensors()  # handles opened once
            for name, dtype, shape, data in tensors:
                t = ts[name]
                assert isinstance(t, torch.Tensor) and tuple(t.shape) == shape
                region = att.regions[att.specs[name].handle_index]
                assert region.contains(t.data_ptr(), len(data))
                assert region.buffer[t.data_ptr() - region.address:][:len(data)] == data
            assert att.active
        assert d.lease_cancelled.wait(5), "release did not end the stream on the daemon's side"
        assert not att.active and att.gone.is_set() and att.gone_reason is None
        with pytest.raises(WcacheError, match="released"):
            att.tensors()


def test_mismatch_trailer_becomes_incompatible_config_error(setup):
    sock, manifest, _ = setup
    diffs = [("tp_size", "2", "1"), ("checkpoint_digest", "sha256:aa", "sha256:bb")]
    with FakeDaemon(sock, manifest, mismatch=diffs):
        with pytest.raises(IncompatibleConfigError) as e:
            wcache.attach(CFG, socket=sock)
    assert e.value.diffs == [wcache.FieldDiff(*d) for d in diffs]
    assert e.value.diffs[0].field == "tp_size" and e.value.diffs[0].daemon == "2"
    assert "tp_size: daemon='2' client='1'" in str(e.value)


def test_mismatch_absent_sides_and_omitted_count(setup):
    sock, manifest, _ = setup
    diffs = [("extra.a", None, "1"), ("extra.b", "", None)]
    with FakeDaemon(sock, manifest, mismatch=diffs) as fake:
        fake.mismatch_omitted = 7
        with pytest.raises(IncompatibleConfigError) as e:
            wcache.attach(CFG, socket=sock)
    assert e.value.diffs == [wcache.FieldDiff("extra.a", None, "1"), wcache.FieldDiff("extra.b", "", None)]
    assert e.value.omitted == 7
    assert "extra.a: daemon=<absent> client='1'; extra.b: daemon='' client=<absent>; +7 more" in str(e.value)


def test_draining_notice_and_daemon_gone_callbacks(setup):
    sock, manifest, _ = setup
    notices, gone = [], []
    fired = threading.Event()

    def on_gone(g):
        gone.append(g)
        fired.set()

    with FakeDaemon(sock, manifest) as d:
        att = wcache.attach(CFG, socket=sock, on_notice=notices.append, on_daemon_gone=on_gone)
        d.notice(pb.NOTICE_KIND_DRAINING, "stopping", 1234)
        assert att.draining.wait(5)
        assert notices[0].kind == wcache.NOTICE_DRAINING and notices[0].deadline_unix_ms == 1234
        d.end_lease()
        assert fired.wait(5)
    assert gone[0].code == grpc.StatusCode.OK
    assert att.gone_reason == gone[0] and not att.active
    att.release()  # idempotent after the daemon went away


def test_daemon_killed_mid_lease_fires_on_daemon_gone(setup):
    sock, manifest, _ = setup
    fired = threading.Event()
    got = []
    d = FakeDaemon(sock, manifest).__enter__()
    att = wcache.attach(CFG, socket=sock, on_daemon_gone=lambda g: (got.append(g), fired.set()))
    d.end_lease(grpc.StatusCode.UNAVAILABLE, "shutting down")
    assert fired.wait(5)
    assert got[0].code == grpc.StatusCode.UNAVAILABLE and got[0].details == "shutting down"
    d.stop()
    att.release()


def test_a_raising_callback_does_not_break_the_lease_thread(setup):
    sock, manifest, _ = setup

    def bad(_):
        raise RuntimeError("boom")

    with FakeDaemon(sock, manifest) as d:
        att = wcache.attach(CFG, socket=sock, on_notice=bad, on_daemon_gone=bad)
        d.notice(pb.NOTICE_KIND_DRAINING)
        d.end_lease()
        assert att.wait_gone(5)


def test_daemon_serving_another_gpu_is_refused(setup):
    sock, manifest, _ = setup
    with FakeDaemon(sock, manifest):
        with pytest.raises(ProtocolError, match="serves device 'GPU-fake-0', not 'GPU-other'"):
            wcache.attach(CFG, socket=sock, device_uuid="GPU-other")


def test_first_message_must_be_a_manifest(setup):
    sock, manifest, _ = setup
    with FakeDaemon(sock, manifest, first_event=pb.AttachEvent(notice=pb.Notice(kind=1))):
        with pytest.raises(ProtocolError, match="instead of a manifest"):
            wcache.attach(CFG, socket=sock)


def test_manifest_timeout(setup):
    sock, manifest, _ = setup
    with FakeDaemon(sock, manifest, manifest_delay=2.0):
        with pytest.raises(WcacheError, match="no manifest within 0.3s"):
            wcache.attach(CFG, socket=sock, timeout=0.3)


def test_status_and_unknown_method_errors(setup):
    sock, manifest, _ = setup
    with FakeDaemon(sock, manifest):
        st = wcache.status(socket=sock)
        assert st.device_uuid == UUID and st.state == "serving"
        channel = grpc.insecure_channel("unix://" + sock)
        stop = channel.unary_unary(pb.METHOD_STOP, request_serializer=pb.StopRequest.SerializeToString,
                                   response_deserializer=pb.StopResponse.FromString)
        with pytest.raises(grpc.RpcError) as e:
            stop(pb.StopRequest())
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        channel.close()


def test_config_type_is_checked(setup):
    sock, _, _ = setup
    with pytest.raises(TypeError, match="CacheConfig"):
        wcache.attach({"model": "x"}, socket=sock)


def test_daemon_error_carries_code():
    err = DaemonError("attach", grpc.StatusCode.RESOURCE_EXHAUSTED, "too many leases")
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "RESOURCE_EXHAUSTED: too many leases" in str(err)
