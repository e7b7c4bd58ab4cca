"""load_or_publish and publish at their edges, through the real Go daemon
(`wcache serve --backend mock` without --model) and engine processes
(publish_child.py): a publish race lost, a daemon draining, published
identities (model, dtype), a launcher's layout, evict from Python, no hashing
unless asked, and views that publish only the span they reach.

Needs bin/wcache and bin/wcache-backend-mock (`make build`), like test_publish.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import threading

import pytest
import torch

import harness
import st_writer
import wcache
from test_publish import CHILD, POSIX_SHM, child, expected, shm_files, status, wait_no_leases, wait_state

pytestmark = pytest.mark.interop


def start_child(world, *args, gate=False):
    """A load-or-publish child, running; with gate, blocked inside its load()."""
    argv = [sys.executable, CHILD, "load-or-publish", *args, "--uuid", world.uuids[0]]
    if gate:
        argv.append("--gate")
    proc = subprocess.Popen(argv, env=world.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if gate:
        line = proc.stdout.readline()
        if line.strip() != "loading":
            proc.kill()
            raise AssertionError(f"gated child: {line!r}\n{proc.stderr.read()}")
    return proc


def finish(proc, stdin="go\n"):
    out, err = proc.communicate(input=stdin, timeout=120)
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def wait_stderr(proc, needle):
    """Read proc's stderr lines until one contains needle."""
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"child ended without logging {needle!r}:\n{''.join(seen)}")


def publisher_config(**changes):
    import publish_child  # noqa: PLC0415

    return dataclasses.replace(publish_child.config(), **changes)


# --- item 1: a publish race lost to another engine ---------------------------


def lose_a_publish_race(world, *winner_args):
    """Serve an empty daemon; start a load_or_publish of a new checkpoint that
    finds it empty and waits in its load; let another child publish first
    (winner_args added to its command line); return (checkpoint, the loser's
    JSON)."""
    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=12, n_shards=1)
    world.serve(0, None)
    loser = start_child(world, "--model", model, gate=True)  # found the daemon empty, is loading
    try:
        winner = child(world, "load-or-publish", "--model", model, *winner_args)
        assert winner.get("error") is None and winner["source"] == "published", winner
        return model, finish(loser)
    finally:
        loser.kill()


def test_a_lost_publish_race_attaches_to_the_winners_weights(world):
    model, got = lose_a_publish_race(world)
    assert got.get("error") is None, got
    assert got["source"] == "attached" and got["loads"] == 1, got
    assert "already holds weights" in got["reason"], got
    assert got["metadata"] == {"layout": "transposed", "scale": "2"}
    want = expected(model)
    assert {n: t["sha256"] for n, t in got["tensors"].items()} == {n: t["sha256"] for n, t in want.items()}
    assert status(world)["state"] == "serving"


def test_a_publish_race_lost_to_other_weights_publishes_beside_them(world):
    # Issue 25: the daemon holds several generations, so the loser's own
    # config becomes a generation of its own instead of its tensors alone.
    model, got = lose_a_publish_race(world, "--engine-version", "2")
    assert got.get("error") is None, got
    assert got["source"] == "published" and got["loads"] == 1, got
    want = expected(model)
    assert {n: t["sha256"] for n, t in got["tensors"].items()} == {n: t["sha256"] for n, t in want.items()}
    assert len(status(world)["generations"]) == 2


# --- issue 25: a daemon that already holds another model ----------------------


def test_load_or_publish_beside_another_model_and_resident_bytes(world):
    target = os.path.join(world.root, "target")
    draft = os.path.join(world.root, "draft")
    st_writer.make_checkpoint(target, n_tensors=12, n_shards=1)
    st_writer.make_checkpoint(draft, n_tensors=4, n_shards=1)
    world.serve(0, None)
    first = child(world, "load-or-publish", "--model", target)
    assert first.get("error") is None and first["source"] == "published", first
    # The daemon serves the target: the draft is loaded and published beside it.
    second = child(world, "load-or-publish", "--model", draft, "--config-model", "publish-test-draft")
    assert second.get("error") is None and second["source"] == "published", second
    assert {n: t["sha256"] for n, t in second["tensors"].items()} == {n: t["sha256"] for n, t in expected(draft).items()}
    # And each attaches to its own again, without loading.
    again = child(world, "load-or-publish", "--model", target)
    assert again["source"] == "attached" and again["loads"] == 0, again
    uuid = world.uuids[0]
    res = wcache.resident_bytes(device_uuid=uuid, getenv=world.getenv)
    st = wcache.status(device_uuid=uuid, getenv=world.getenv)
    assert len(res.by_generation) == 2 and all(b > 0 for b in res.by_generation.values()), res
    assert res.total == sum(res.by_generation.values()) == st.device_bytes_total, (res, st.device_bytes_total)
    # Evicting one by its generation leaves the other.
    with pytest.raises(wcache.DaemonError):  # two generations: name one
        wcache.evict(device_uuid=uuid, getenv=world.getenv)
    gone = st.generations[1].generation
    ev = wcache.evict(device_uuid=uuid, getenv=world.getenv, generation=gone)
    assert ev.generations == (gone,), ev
    left = wcache.resident_bytes(device_uuid=uuid, getenv=world.getenv)
    assert list(left.by_generation) == [st.generations[0].generation] and left.total == res.by_generation[st.generations[0].generation]


# --- item 6: a draining daemon is waited for, up to a bound -------------------


def _serving_with_a_lease(world):
    import publish_child  # noqa: PLC0415

    assert child(world, "publish-layout").get("published") == 5
    att = wcache.attach(publish_child.config(), device_uuid=world.uuids[0], getenv=world.getenv)
    att.tensors()
    result = {}

    def evict():
        try:
            result["evict"] = wcache.evict(device_uuid=world.uuids[0], getenv=world.getenv, timeout=60)
        except wcache.WcacheError as exc:  # reported by the test's asserts
            result["evict"] = exc

    t = threading.Thread(target=evict)
    t.start()
    assert att.draining.wait(10), "the lease was not told about the evict"
    return att, t, result


def test_an_engine_starting_during_an_evict_waits_then_publishes(world):
    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=12, n_shards=1)
    world.serve(0, None)
    att, evictor, result = _serving_with_a_lease(world)
    proc = start_child(world, "--model", model, "--wait", "120")
    try:
        wait_stderr(proc, "draining")  # the child met the draining daemon and waits
        att.release()
        evictor.join(60)
        got = finish(proc, stdin="")
    finally:
        att.release()
        proc.kill()
    assert isinstance(result.get("evict"), wcache.EvictResult), result
    assert got.get("error") is None, got
    assert got["source"] == "published" and got["loads"] == 1, got
    assert status(world)["state"] == "serving"


def test_an_evict_outlasting_the_wait_loads_on_its_own(world):
    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=12, n_shards=1)
    world.serve(0, None)
    att, evictor, result = _serving_with_a_lease(world)
    try:
        got = child(world, "load-or-publish", "--model", model, "--wait", "0.5")
    finally:
        att.release()
        evictor.join(60)
    assert got.get("error") is None, got
    assert got["source"] == "loaded" and got["loads"] == 1, got
    assert "draining" in got["reason"] and "after waiting 0.5 s" in got["reason"], got
    assert isinstance(result.get("evict"), wcache.EvictResult), result
    assert status(world)["state"] == "empty"


def test_an_attach_to_a_draining_daemon_is_typed(world):
    world.serve(0, None)
    att, evictor, _ = _serving_with_a_lease(world)
    try:
        # Even with another config: weights on their way out are no mismatch.
        with pytest.raises(wcache.DaemonBusyError) as exc:
            wcache.attach(publisher_config(engine_version="9"), device_uuid=world.uuids[0], getenv=world.getenv)
        assert exc.value.state == "draining" and isinstance(exc.value, wcache.DaemonError)
    finally:
        att.release()
        evictor.join(60)


# --- item 7: evict from Python ------------------------------------------------


def test_python_evicts_and_waits_for_leases(world):
    world.serve(0, None, *POSIX_SHM)
    uuid = world.uuids[0]
    assert child(world, "publish-layout").get("published") == 5
    att = wcache.attach(publisher_config(), device_uuid=uuid, getenv=world.getenv)
    with pytest.raises(wcache.DaemonError) as exc:  # a lease outlives the timeout: nothing freed
        wcache.evict(device_uuid=uuid, getenv=world.getenv, timeout=0.3)
    assert "lease" in str(exc.value)
    assert status(world)["state"] == "serving" and shm_files(world)
    att.release()
    wait_no_leases(world)  # the release reaches the daemon asynchronously
    r = wcache.evict(device_uuid=uuid, getenv=world.getenv, timeout=10)
    assert r.leases_at_evict == 0 and r.bytes_freed > 0, r
    assert status(world)["state"] == "empty" and shm_files(world) == []
    assert wcache.evict(device_uuid=uuid, getenv=world.getenv) == wcache.EvictResult(0, 0)
    with pytest.raises(wcache.NoDaemonError):
        wcache.evict(socket=os.path.join(world.root, "absent.sock"))


# --- items 2 and 3: published weights keep their identity ----------------------


def test_published_weights_compare_model_and_dtype(world):
    world.serve(0, None)
    uuid = world.uuids[0]
    digest = "sha256:" + "ab" * 32  # two revisions of the same shapes share a header digest
    v2 = publisher_config(model="org/model-v2", checkpoint_digest=digest, dtype="fp16")
    wcache.publish(v2, {"x": torch.ones(3, dtype=torch.float16)}, device_uuid=uuid, getenv=world.getenv)

    def diffs(cfg):
        with pytest.raises(wcache.IncompatibleConfigError) as exc:
            wcache.attach(cfg, device_uuid=uuid, getenv=world.getenv)
        return [d.field for d in exc.value.diffs]

    assert diffs(dataclasses.replace(v2, model="org/model-v1")) == ["model"]
    assert diffs(dataclasses.replace(v2, dtype="auto")) == ["dtype"]
    assert diffs(dataclasses.replace(v2, dtype="bf16")) == ["dtype"]
    # model is compared after normalisation, dtype after its own.
    wcache.attach(dataclasses.replace(v2, model="org/model-v2/", dtype="float16"), device_uuid=uuid,
                  getenv=world.getenv).release()

    # A publication that states "auto" matches "auto" only.
    wcache.evict(device_uuid=uuid, getenv=world.getenv)
    auto = dataclasses.replace(v2, dtype="auto")
    wcache.publish(auto, {"x": torch.ones(3, dtype=torch.float16)}, device_uuid=uuid, getenv=world.getenv)
    wcache.attach(auto, device_uuid=uuid, getenv=world.getenv).release()
    assert diffs(v2) == ["dtype"]


# --- item 4: an empty daemon keeps the layout it was started with -------------


def test_an_empty_daemon_started_with_a_layout_refuses_another(world):
    world.serve(0, None, "--tp-size", "2", "--tp-rank", "1")
    s = status(world)
    assert s["state"] == "empty" and (s["tp_size"], s["tp_rank"]) == (2, 1), s
    uuid = world.uuids[0]
    with pytest.raises(wcache.IncompatibleConfigError) as exc:
        wcache.publish(publisher_config(tp_rank=0), {"x": torch.ones(3)}, device_uuid=uuid, getenv=world.getenv)
    assert [d.field for d in exc.value.diffs] == ["tp_rank"], exc.value
    assert (exc.value.diffs[0].daemon, exc.value.diffs[0].client) == ("1", "0")
    wait_state(world, "empty")
    wcache.publish(publisher_config(tp_rank=1), {"x": torch.ones(3)}, device_uuid=uuid, getenv=world.getenv)
    assert status(world)["state"] == "serving"
    wcache.evict(device_uuid=uuid, getenv=world.getenv)
    s = status(world)
    assert s["state"] == "empty" and (s["tp_size"], s["tp_rank"]) == (2, 1), s


# --- item 8: sha256=False hashes nothing ---------------------------------------


class _CountingHashlib:
    def __init__(self, real):
        self.real, self.calls = real, 0

    def sha256(self, *args):
        self.calls += 1
        return self.real.sha256(*args)


def test_publish_without_sha256_hashes_nothing(world, monkeypatch):
    world.serve(0, None)
    module = importlib.import_module("wcache._publish")
    counting = _CountingHashlib(module.hashlib)
    monkeypatch.setattr(module, "hashlib", counting)
    tensors = {"a": torch.arange(4096, dtype=torch.float32), "b": torch.ones(7, 9)}
    res = wcache.publish(publisher_config(), tensors, device_uuid=world.uuids[0], getenv=world.getenv)
    assert res.tensors == 2 and counting.calls == 0
    wcache.evict(device_uuid=world.uuids[0], getenv=world.getenv)
    wcache.publish(publisher_config(), tensors, device_uuid=world.uuids[0], getenv=world.getenv, sha256=True)
    assert counting.calls > 0


# --- item 9: a view publishes the span it reaches, with progress -------------


def test_views_publish_the_span_they_reach(world):
    world.serve(0, None, "--verify-publish")
    uuid = world.uuids[0]
    flat = torch.arange(1000, dtype=torch.float32)   # 4000 bytes, 2 views reach bytes [400, 480)
    matrix = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64)  # 16384 bytes
    tensors = {"v": flat[100:110], "w": flat[105:120].view(torch.int16),
               "block_t": matrix[10:20, 5:9].T}     # reaches bytes [2580, 4900) of matrix
    seen = []
    res = wcache.publish(publisher_config(), tensors, device_uuid=uuid, getenv=world.getenv, sha256=True,
                         progress=lambda done, total: seen.append((done, total)))
    # Spans start at a multiple of 16 bytes: [400, 480) and [2576, 4900).
    assert res.verified and res.bytes == 80 + 2324, res
    assert seen and seen[-1] == (res.bytes, res.bytes)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    att = wcache.attach(publisher_config(), device_uuid=uuid, getenv=world.getenv)
    try:
        got = att.tensors()
        for name, t in tensors.items():
            g = got[name]
            assert g.dtype == t.dtype and g.shape == t.shape and g.stride() == t.stride(), name
            assert torch.equal(g, t), name
        assert got["v"].storage_offset() == 0 and got["w"].storage_offset() == 10
        assert got["block_t"].storage_offset() == (10 * 64 + 5) - 2576 // 4
    finally:
        att.release()


# --- issue 26: a data-parallel replica's daemon filled from its sibling's ----


def child_on(world, gpu, *args):
    """publish_child.py load-or-publish against the daemon of mock device gpu."""
    proc = subprocess.run([sys.executable, CHILD, "load-or-publish", *args, "--uuid", world.uuids[gpu]], env=world.env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"child {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def status_of(world, gpu):
    return next(s for s in world.wcache_json("status", "--json") if s["device_uuid"] == world.uuids[gpu])


@pytest.mark.parametrize("peer_fill", ["auto", "off"])
def test_a_second_dp_replica_attaches_to_weights_filled_from_its_sibling(peer_fill):
    """Two empty daemons on the node; DP rank 0 loads and publishes into the
    first. DP rank 1's load_or_publish on the second attaches: that daemon
    copied the first's publication (its load() is never called). With
    --peer-fill=off it loads and publishes as before."""
    harness.require_binaries()
    with harness.World(devices=2) as world:
        dp_replicas(world, peer_fill)


def dp_replicas(world, peer_fill):
    model = os.path.join(world.root, "model")
    st_writer.make_checkpoint(model, n_tensors=12, n_shards=1)
    world.serve(0, None)
    world.serve(1, None, "--peer-fill", peer_fill)
    first = child_on(world, 0, "--model", model, "--dp-rank", "0")
    assert first.get("error") is None and first["source"] == "published", first
    second = child_on(world, 1, "--model", model, "--dp-rank", "1", *(["--fail-load"] if peer_fill == "auto" else []))
    assert second.get("error") is None, second
    want = {n: t["sha256"] for n, t in expected(model).items()}
    assert {n: t["sha256"] for n, t in second["tensors"].items()} == want
    assert second["metadata"] == {"layout": "transposed", "scale": "2"}
    st = status_of(world, 1)
    if peer_fill == "auto":
        assert second["source"] == "attached" and second["loads"] == 0, second
        assert st.get("filled_from") == "peer " + world.uuids[0], st
    else:
        assert second["source"] == "published" and second["loads"] == 1, second
        assert not st.get("filled_from") and not st.get("fill_fallback"), st
    assert [g["state"] for g in st["generations"]] == ["serving"]
