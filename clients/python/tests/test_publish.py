"""Publish mode through the real Go daemon: `wcache serve --backend mock` without --model,
and Python engine processes (publish_child.py) that publish into it and attach to it.

Needs bin/wcache and bin/wcache-backend-mock (`make build`), like test_interop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import st_writer
import wcache

pytestmark = pytest.mark.interop

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "publish_child.py")


def child(world, *args, stdin=None, timeout=120):
    """Run publish_child.py to completion and return its JSON."""
    proc = subprocess.run([sys.executable, CHILD, *args, "--uuid", world.uuids[0]], env=world.env,
                          capture_output=True, text=True, timeout=timeout, input=stdin)
    assert proc.returncode == 0, f"child {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def start_holder(world):
    """A publish-layout child blocked between its fill and its commit."""
    proc = subprocess.Popen([sys.executable, CHILD, "publish-layout", "--hold", "--uuid", world.uuids[0]],
                            env=world.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()
    if line.strip() != "filled":
        proc.kill()
        raise AssertionError(f"holder: {line!r}\n{proc.stderr.read()}")
    return proc


def status(world):
    return world.wcache_json("status", "--json")[0]


# Tests that count the allocation files in the mock's folder pin the
# posix-shm handles (memfds, the default, are named nowhere; test_memfd.py
# checks their release through the descriptor tables instead).
POSIX_SHM = ("--backend-opt", "handle=posix-shm")


def shm_files(world):
    return sorted(f for f in os.listdir(world.mock_dir) if not f.startswith("."))


def wait_state(world, state, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        s = status(world)
        if s.get("state") == state:
            return s
        if time.monotonic() > deadline:
            raise AssertionError(f"daemon state {s.get('state')!r}, want {state!r}: {s}")
        time.sleep(0.05)


def wait_no_leases(world, timeout=10.0):
    """Waits until the daemon holds no lease: Attachment.release cancels the
    lease's stream, and the daemon ends the lease when it sees the cancel."""
    deadline = time.monotonic() + timeout
    while True:
        s = status(world)
        if not s.get("leases"):
            return s
        if time.monotonic() > deadline:
            raise AssertionError(f"daemon still holds leases: {s.get('leases')}")
        time.sleep(0.05)


def expected(model):
    """What the first engine's loader produces, computed here independently."""
    import publish_child  # noqa: PLC0415

    return publish_child.describe(publish_child.transformed(model))


def test_load_or_publish_across_two_processes(world):
    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=60, n_shards=2)
    world.serve(0, None)
    assert status(world)["state"] == "empty"

    first = child(world, "load-or-publish", "--model", model)
    assert first.get("error") is None, first
    assert first["source"] == "published" and first["loads"] == 1
    assert status(world)["state"] == "serving"

    second = child(world, "load-or-publish", "--model", model, "--fail-load")
    assert second.get("error") is None, second
    assert second["source"] == "attached" and second["loads"] == 0
    assert second["metadata"] == {"layout": "transposed", "scale": "2"}

    want = expected(model)
    assert set(second["tensors"]) == set(want)
    for name, w in want.items():
        got = second["tensors"][name]
        assert got["sha256"] == w["sha256"], name
        assert got["shape"] == w["shape"], name
        if 0 not in w["shape"]:
            assert (got["stride"], got["offset"]) == (w["stride"], w["offset"]), name
    # The transposed views came back transposed, not as contiguous copies.
    two_d = [n for n, w in want.items() if len(w["shape"]) == 2 and min(w["shape"]) > 1]
    assert two_d and all(second["tensors"][n]["stride"][0] == 1 for n in two_d)


def test_writes_to_attached_weights_stay_private_and_never_crash(world):
    """An engine's in-place fix-up of the tensors load_or_publish returned
    (issue 27, item 5) — by the publishing start itself, by a later start,
    and by a start that asked for copy=True — neither crashes it (it was a
    SIGSEGV on read-only mappings) nor changes what the next start attaches."""
    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=12, n_shards=1)
    world.serve(0, None)
    want = expected(model)

    first = child(world, "load-or-publish", "--model", model, "--mutate")
    assert first.get("error") is None and first["source"] == "published", first
    changed = [n for n, w in want.items() if first["tensors"][n]["sha256"] != w["sha256"]]
    assert changed, "the in-place write was lost in the writing process"

    for extra in ([], ["--mutate"], ["--mutate", "--copy"]):
        got = child(world, "load-or-publish", "--model", model, "--fail-load", *extra)
        assert got.get("error") is None and got["source"] == "attached", (extra, got)
        same = [n for n, w in want.items() if got["tensors"][n]["sha256"] == w["sha256"]]
        if extra:
            assert set(same) == set(want) - set(changed), (extra, "its own writes were lost")
    after = child(world, "load-or-publish", "--model", model, "--fail-load")
    for name, w in want.items():
        assert after["tensors"][name]["sha256"] == w["sha256"], f"{name}: another engine's write reached the daemon"


def test_copy_keeps_views_and_is_the_engines_own(world):
    """attach(copy=True): every storage copied once, views kept, writable."""
    import publish_child  # noqa: PLC0415

    world.serve(0, None)
    assert child(world, "publish-layout").get("error") is None
    att = wcache.attach(publish_child.config(), device_uuid=world.uuids[0], getenv=world.getenv, copy=True)
    try:
        t = att.tensors()
        shared = wcache.attach(publish_child.config(), device_uuid=world.uuids[0], getenv=world.getenv)
        try:
            s = shared.tensors()
            want = publish_child.describe(publish_child.layout_tensors())
            want["tail"]["offset"] = 10 - 32 // 4  # published as the span it reaches (see below)
            got = publish_child.describe(t)
            for name in want:
                assert (got[name]["shape"], got[name]["stride"], got[name]["offset"], got[name]["sha256"]) == \
                    (want[name]["shape"], want[name]["stride"], want[name]["offset"], want[name]["sha256"]), name
                assert got[name]["storage"] != publish_child.describe(s)[name]["storage"], name
            assert got["q"]["storage"] == got["k"]["storage"]  # one fused storage, copied once
            t["q"].zero_()
            assert publish_child.describe(s)["q"]["sha256"] == want["q"]["sha256"]
        finally:
            shared.release()
    finally:
        att.release()


def test_layout_strides_offsets_and_shared_storages(world):
    world.serve(0, None, "--verify-publish")
    pub = child(world, "publish-layout")
    assert pub.get("error") is None, pub
    assert pub["published"] == 5 and pub["verified"] is True

    got = child(world, "attach-layout")
    assert got.get("error") is None, got
    assert got["metadata"] == {"k": "v"}
    import publish_child  # noqa: PLC0415

    want = publish_child.describe(publish_child.layout_tensors())
    # tail[10:] of 30 int32s is published as the span it reaches, bytes
    # [32, 120) (spans start at a multiple of 16): its offset is relative.
    want["tail"]["offset"] = 10 - 32 // 4
    for name, w in want.items():
        g = got["tensors"][name]
        assert (g["shape"], g["stride"], g["offset"], g["sha256"]) == \
            (w["shape"], w["stride"], w["offset"], w["sha256"]), name
    t = got["tensors"]
    assert t["q"]["storage"] == t["k"]["storage"], "views of one storage no longer share it"
    assert t["transposed"]["stride"] == [1, 6] and t["tail"]["offset"] == 2


def test_publisher_killed_mid_publish_leaves_the_daemon_empty(world):
    world.serve(0, None, *POSIX_SHM)
    holder = start_holder(world)
    try:
        s = status(world)
        assert s["state"] == "publishing", s
        assert len(shm_files(world)) == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    finally:
        holder.kill()
        holder.wait()
    wait_state(world, "empty")
    assert shm_files(world) == [], "the killed publisher's allocation is still there"
    pub = child(world, "publish-layout")
    assert pub.get("error") is None and pub["published"] == 5, pub
    assert status(world)["state"] == "serving"


def test_two_publishers_one_wins_and_another_rank_is_refused(world):
    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=12, n_shards=1)
    world.serve(0, None)
    holder = start_holder(world)
    try:
        loser = child(world, "load-or-publish", "--model", model)
        assert loser.get("error") is None, loser
        assert loser["source"] == "loaded" and loser["loads"] == 1
        assert f"publish in progress by pid {holder.pid}" in loser["reason"]
        assert loser["tensors"].keys() == expected(model).keys()
        holder.stdin.write("commit\n")
        holder.stdin.flush()
        out, err = holder.communicate(timeout=30)
        assert holder.returncode == 0, err
        done = json.loads(out.strip().splitlines()[-1])
        assert done.get("published") == 5, done
    finally:
        holder.kill()
    assert status(world)["state"] == "serving"
    other = child(world, "load-or-publish", "--model", model, "--tp-rank", "1", "--fail-load")
    assert other.get("error") == "IncompatibleConfigError", other
    assert "tp_rank" in other["diffs"], other


def test_evict_waits_for_a_python_lease_then_the_daemon_is_empty(world):
    world.serve(0, None, *POSIX_SHM)
    assert child(world, "publish-layout").get("published") == 5
    import publish_child  # noqa: PLC0415

    att = wcache.attach(publish_child.config(), device_uuid=world.uuids[0], getenv=world.getenv)
    att.tensors()
    result = {}

    def evict():
        result["proc"] = world.wcache("evict", "--gpu-id", "0", "--backend", "mock", "--timeout", "30s",
                                      check=False)

    t = threading.Thread(target=evict)
    begin = time.monotonic()
    t.start()
    assert att.draining.wait(10), "the lease was not told about the evict"
    time.sleep(0.5)
    assert t.is_alive(), "evict did not wait for the lease"
    assert shm_files(world), "weights freed under a live lease"
    att.release()
    t.join(30)
    proc = result["proc"]
    assert proc.returncode == 0 and time.monotonic() - begin >= 0.5, proc.stderr
    assert status(world)["state"] == "empty"
    assert shm_files(world) == []
    with pytest.raises(wcache.EmptyDaemonError) as exc:
        wcache.attach(publish_child.config(), device_uuid=world.uuids[0], getenv=world.getenv)
    assert exc.value.state == "empty" and "load from disk" in str(exc.value)


def test_publish_errors_are_typed(world):
    world.serve(0, None, *POSIX_SHM)
    import publish_child  # noqa: PLC0415

    cfg = publish_child.config()
    with pytest.raises(ValueError):
        wcache.publish(cfg, {}, device_uuid=world.uuids[0], getenv=world.getenv)
    wcache.publish(cfg, {"x": torch.ones(3)}, device_uuid=world.uuids[0], getenv=world.getenv)
    with pytest.raises(wcache.HoldsWeightsError) as exc:
        wcache.publish(cfg, {"x": torch.ones(3)}, device_uuid=world.uuids[0], getenv=world.getenv)
    assert exc.value.reason == "holds-weights" and exc.value.config_digest
    # A failing before_commit aborts: nothing is served, nothing is left.
    world.wcache("evict", "--gpu-id", "0", "--backend", "mock")

    def boom():
        raise RuntimeError("engine changed its mind")

    with pytest.raises(RuntimeError):
        wcache.publish(cfg, {"x": torch.ones(3)}, device_uuid=world.uuids[0], getenv=world.getenv,
                       before_commit=boom)
    wait_state(world, "empty")
    assert shm_files(world) == []


def test_no_daemon_returns_the_loaders_tensors(world):
    import publish_child  # noqa: PLC0415

    mine = {"w": torch.zeros(2)}
    w = wcache.load_or_publish(publish_child.config(), lambda: mine, device_uuid=world.uuids[0],
                               getenv=world.getenv)
    assert w.source == "loaded" and w["w"] is mine["w"] and w.attachment is None


def test_table_publishes_each_storage_once():
    from wcache._publish import _table  # noqa: PLC0415

    fused = torch.zeros(4, 4)
    specs, storages = _table(torch, {"a": fused[:2], "b": fused[2:], "c": torch.ones(3), "e": torch.empty(0)})
    assert [len(s.entries) for s in storages] == [2, 1]
    assert specs[0].layout.storage == specs[1].layout.storage == "s0" and specs[0].length == 64
    assert list(specs[1].layout.strides) == [4, 1] and specs[1].layout.storage_offset == 8
    assert specs[2].layout.storage == "s1" and specs[2].length == 12 and specs[2].dtype == "F32"
    assert list(specs[2].layout.strides) == [1] and specs[2].layout.storage_offset == 0
    assert not specs[3].HasField("layout") and specs[3].length == 0


def test_max_bytes_refuses_a_publish_before_allocating_and_status_reports_device_bytes(world):
    # Issue 25: a publish whose arenas would pass --max-bytes is RESOURCE_EXHAUSTED before any
    # allocation file exists; what the daemon holds is the sum of its arenas' sizes, the same in
    # Status, on the attachment and in the mock's files.
    import grpc  # noqa: PLC0415

    import publish_child  # noqa: PLC0415

    world.serve(0, None, "--max-bytes", "4096", *POSIX_SHM)
    cfg = publish_child.config()
    with pytest.raises(wcache.DaemonError) as exc:
        wcache.publish(cfg, {"x": torch.ones(4096)}, device_uuid=world.uuids[0], getenv=world.getenv)
    assert exc.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, exc.value
    assert "--max-bytes" in str(exc.value) and "4096" in str(exc.value), exc.value
    assert shm_files(world) == []
    st = wcache.status(device_uuid=world.uuids[0], getenv=world.getenv)
    assert (st.state, st.device_bytes, st.device_bytes_total, st.max_bytes) == ("empty", 0, 0, 4096)

    wcache.publish(cfg, {"x": torch.ones(3)}, device_uuid=world.uuids[0], getenv=world.getenv)
    st = wcache.status(device_uuid=world.uuids[0], getenv=world.getenv)
    files = sum(os.path.getsize(os.path.join(world.mock_dir, f)) for f in shm_files(world))
    with wcache.attach(cfg, device_uuid=world.uuids[0], getenv=world.getenv) as att:
        assert st.device_bytes_total == st.device_bytes == att.device_bytes == files > 0
        assert st.bytes <= st.device_bytes <= 4096
