"""Vendor handle kinds: the naming rule, the registry, and the error when no mapper is registered."""

from __future__ import annotations

import json
import mmap
import os

import numpy as np
import pytest

import arena
import st_writer
import wcache
from fake_daemon import FakeDaemon
from wcache import HandleMappers, ProtocolError, UnknownHandleKindError
from wcache._tensors import materialize

# The vectors shared with sdk/names/names_test.go.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
with open(os.path.join(REPO, "sdk", "names", "testdata", "handle-kinds.json"), encoding="utf-8") as _f:
    _VECTORS = json.load(_f)
GOOD_KINDS = _VECTORS["good"]
BAD_KINDS = _VECTORS["bad"]

ACME = "x-acme-buf"
PREFIX = b"acme-buf:v1:"


@pytest.mark.parametrize("kind", GOOD_KINDS)
def test_good_kinds(kind):
    wcache.validate_handle_kind(kind)


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_kinds(kind):
    with pytest.raises(ValueError, match="x-VENDOR-NAME"):
        wcache.validate_handle_kind(kind)


def test_core_kinds_are_in_the_vectors():
    assert set(wcache._mappers.CORE_KINDS) <= set(GOOD_KINDS)


def test_register_refuses_core_bad_and_twice():
    m = HandleMappers()
    with pytest.raises(ValueError, match="core"):
        m.register("posix-shm", lambda *a: None)
    with pytest.raises(ValueError, match="x-VENDOR-NAME"):
        m.register("acme-buf", lambda *a: None)
    with pytest.raises(TypeError):
        m.register(ACME, "not callable")
    m.register(ACME, lambda *a: None)
    with pytest.raises(ValueError, match="already registered"):
        m.register(ACME, lambda *a: None)
    assert m.kinds() == [ACME]


class AcmeRegion:
    """The vendor's region: a read-only mapping of the buffer file."""

    def __init__(self, path: str, size: int):
        with open(path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
        self.closed = False

    def tensor(self, spec):
        return np.frombuffer(self.map, dtype=np.uint8, count=spec.length, offset=spec.offset)


def acme_manifest(short_tmp, tensors):
    """A manifest whose handles are acme buffers (the arena's files, renamed in the vendor's format)."""
    manifest, where = arena.build(short_tmp, tensors)
    for h in manifest.handles:
        h.kind, h.data = ACME, PREFIX + h.data
    return manifest, where


@pytest.fixture
def tensors():
    rng = np.random.default_rng(11)
    return [st_writer.random_tensor(rng, f"w{i}", "F32", (3, 5 + i)) for i in range(6)]


def test_unknown_vendor_kind_names_the_kind_and_how_to_register(short_tmp, tensors):
    manifest, _ = acme_manifest(short_tmp, tensors)
    with pytest.raises(UnknownHandleKindError) as exc:
        materialize(manifest, library="numpy")
    err = exc.value
    assert isinstance(err, ProtocolError) and err.kind == ACME and err.index == 0
    assert repr(ACME) in str(err) and "register" in str(err) and "HandleMappers" in str(err)
    # With another vendor's mapper registered, the error lists it and still names the kind.
    other = HandleMappers()
    other.register("x-other-thing", lambda *a: None)
    with pytest.raises(UnknownHandleKindError, match="x-other-thing") as exc:
        materialize(manifest, library="numpy", mappers=other)
    assert exc.value.kind == ACME


def test_a_kind_outside_the_rule_is_named_as_such(short_tmp, tensors):
    manifest, _ = arena.build(short_tmp, tensors)
    manifest.handles[1].kind = "shiny"
    with pytest.raises(UnknownHandleKindError, match="not a vendor kind") as exc:
        materialize(manifest, library="numpy")
    assert exc.value.kind == "shiny" and exc.value.index == 1


def test_registered_mapper_maps_its_kind(short_tmp, tensors):
    manifest, _ = acme_manifest(short_tmp, tensors)
    calls = []

    def acme_mapper(index, handle, ctx):
        calls.append((index, handle.kind, ctx.device_uuid, ctx.torch is None))
        assert handle.data.startswith(PREFIX)
        return AcmeRegion(handle.data[len(PREFIX):].decode(), handle.size)

    mappers = HandleMappers()
    mappers.register(ACME, acme_mapper)
    mat = materialize(manifest, library="numpy", mappers=mappers)
    assert calls == [(0, ACME, "GPU-fake-0", True), (1, ACME, "GPU-fake-0", True)]  # each handle once
    for name, _dtype, _shape, data in tensors:
        got = mat.tensors[name]
        assert bytes(got) == data


def test_a_mapper_without_tensor_is_refused(short_tmp, tensors):
    manifest, _ = acme_manifest(short_tmp, tensors)
    mappers = HandleMappers()
    mappers.register(ACME, lambda *a: object())
    with pytest.raises(wcache.WcacheError, match="no tensor"):
        materialize(manifest, library="numpy", mappers=mappers)


def test_attach_maps_a_vendor_kind_with_the_registered_mapper(short_tmp, tensors):
    manifest, _ = acme_manifest(short_tmp, tensors)
    sock = short_tmp + "/d.sock"
    mappers = HandleMappers()
    mappers.register(ACME, lambda i, h, ctx: AcmeRegion(h.data[len(PREFIX):].decode(), h.size))
    with FakeDaemon(sock, manifest):
        with wcache.attach(wcache.CacheConfig(model="/m"), socket=sock, library="numpy", mappers=mappers) as att:
            ts = att.tensors()
            for name, _dtype, _shape, data in tensors:
                assert bytes(ts[name]) == data
            assert all(isinstance(r, AcmeRegion) for r in att.regions)
        # Without the mapper the same attach names the kind when tensors are asked for.
        with wcache.attach(wcache.CacheConfig(model="/m"), socket=sock, library="numpy") as att:
            with pytest.raises(UnknownHandleKindError, match=ACME):
                att.tensors()
