"""Manifest → zero-copy tensors over posix-shm handles (torch and numpy)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import arena
import st_writer
from wcache import ProtocolError, WcacheError, pb
from wcache._shm import ShmRegion
from wcache._tensors import materialize


def expected_values(dtype: str, shape, data: bytes) -> np.ndarray:
    if dtype == "F32":
        arr = np.frombuffer(data, "<f4")
    elif dtype == "F16":
        arr = np.frombuffer(data, "<f2").astype(np.float32)
    elif dtype == "BF16":
        arr = (np.frombuffer(data, "<u2").astype("<u4") << 16).view("<f4")
    else:
        raise AssertionError(dtype)
    return arr.reshape(shape)


@pytest.fixture
def tensors():
    rng = np.random.default_rng(5)
    out = [st_writer.random_tensor(rng, "scalar", "F32", ()),
           st_writer.random_tensor(rng, "empty", "BF16", (0, 3))]
    for i in range(60):
        dtype = ("BF16", "F16", "F32")[i % 3]
        shape = tuple(int(d) for d in rng.integers(1, 20, size=1 + i % 3))
        out.append(st_writer.random_tensor(rng, f"layer.{i}.{dtype}", dtype, shape))
    return out


def region_of(mat, name):
    return mat.regions[mat.specs[name].handle_index]


def test_torch_tensors_alias_the_mapping_and_equal_the_bytes(short_tmp, tensors):
    manifest, where = arena.build(short_tmp, tensors)
    mat = materialize(manifest, library="torch")
    assert list(mat.tensors) == [t[0] for t in tensors]
    ranges = {r.path: arena.mapped_ranges(r.path) for r in mat.regions}
    for name, dtype, shape, data in tensors:
        t = mat.tensors[name]
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
        assert tuple(t.shape) == tuple(shape)
        assert t.dtype == {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
        if not data:
            assert t.numel() == 0
            continue
        region = region_of(mat, name)
        ptr = t.data_ptr()
        # Zero-copy: the tensor's memory is the daemon's file, mapped into this process.
        assert region.contains(ptr, len(data)), name
        assert any(lo <= ptr and ptr + len(data) <= hi for lo, hi in ranges[region.path]), name
        assert ptr - region.address == where[name][1]
        assert region.buffer[ptr - region.address:ptr - region.address + len(data)] == data
        np.testing.assert_array_equal(t.to(torch.float32).numpy(), expected_values(dtype, shape, data))


def test_each_handle_is_mapped_once(short_tmp, tensors):
    manifest, _ = arena.build(short_tmp, tensors, n_handles=3)
    mat = materialize(manifest, library="torch")
    assert len(mat.regions) == 3 and all(isinstance(r, ShmRegion) for r in mat.regions)
    for r in mat.regions:
        assert len(arena.mapped_ranges(r.path)) == 1


def test_host_tensors_are_views_of_one_base_per_handle_and_dtype(short_tmp, tensors):
    """What the one-call construction (as_strided on a base per handle and
    dtype) makes visible: each tensor's storage is its handle's whole
    mapping (as before), and tensors of one handle and dtype are autograd
    views of one base, so they share its version counter; a write stays
    the writer's values."""
    import gc  # noqa: PLC0415

    manifest, where = arena.build(short_tmp, tensors, n_handles=2)
    gc.disable()
    try:
        mat = materialize(manifest, library="torch")
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
    mat = materialize(manifest, library="torch")
    assert gc.isenabled()
    bases = {}
    for name, dtype, shape, data in tensors:
        if not data:
            continue
        t, region = mat.tensors[name], region_of(mat, name)
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()
        assert st.data_ptr() == region.address and st.nbytes() == len(region.buffer)
        assert t.storage_offset() * t.element_size() == where[name][1]
        assert t._is_view() and t._base is not None
        assert bases.setdefault((mat.specs[name].handle_index, dtype), t._base) is t._base
    assert len(bases) == 6  # 2 handles x 3 dtypes
    a, b = mat.tensors["layer.0.BF16"], mat.tensors["layer.6.BF16"]
    assert region_of(mat, "layer.0.BF16") is region_of(mat, "layer.6.BF16")
    before, version = b.clone(), b._version
    a.fill_(1.0)
    assert b._version > version and torch.equal(b, before)


def test_bulk_views_equal_the_one_by_one_path(short_tmp, tensors, monkeypatch):
    """materialize builds host tensors from the manifest's columns
    (wcache._hostviews, one as_strided per tensor called from C); what it
    leaves (empty, misaligned, a dtype torch lacks, a published layout) goes
    one by one. Every tensor equals what the one-by-one path alone builds:
    name order, dtype, shape, strides, storage offset, data pointer, storage
    and base, in both manifest forms."""
    from wcache import _hostviews as hostviews
    rng = np.random.default_rng(11)
    many = list(tensors)
    for i in range(600):  # few shapes, many tensors: an MoE checkpoint's pattern
        dtype = ("BF16", "F32")[i % 2]
        many.append(st_writer.random_tensor(rng, f"experts.{i}.w", dtype, ((4, 8), (8,), (2, 3, 4))[i % 3]))
    many.append(("packed", "F4", (4, 6), bytes(12)))
    manifest, _ = arena.build(short_tmp, many, n_handles=2)
    manifest.tensors[5].offset += 1  # misaligned for its dtype (its handle has room: 4096 bytes of tail)
    layout = manifest.tensors[7]
    layout.layout.storage = layout.name
    layout.layout.strides.extend(dtypes_contiguous(layout.shape))
    real = hostviews.as_strided_views
    for m in (manifest, as_table(manifest)):  # a table carries no layout
        bulk = materialize(m, library="torch")
        calls = []

        def none(shapes, *args):
            calls.append(sum(x is not None for x in real(shapes, *args)))
            return [None] * len(shapes)

        monkeypatch.setattr(hostviews, "as_strided_views", none)
        alone = materialize(m, library="torch")
        monkeypatch.setattr(hostviews, "as_strided_views", real)
        assert calls and calls[0] >= 600  # the bulk path built most of them
        assert list(bulk.tensors) == list(alone.tensors) == [t[0] for t in many]
        for name, t in bulk.tensors.items():
            u = alone.tensors[name]
            assert (t.dtype, t.shape, t.stride(), t.storage_offset()) == \
                (u.dtype, u.shape, u.stride(), u.storage_offset()), name
            if not t.numel():
                continue
            # Each materialize maps the handles anew: pointers relative to the mapping.
            at, au = region_of(bulk, name).address, region_of(alone, name).address
            st, su = (x.untyped_storage() if hasattr(x, "untyped_storage") else x.storage().untyped() for x in (t, u))
            assert (t.data_ptr() - at, st.data_ptr() - at, st.nbytes()) == \
                (u.data_ptr() - au, su.data_ptr() - au, su.nbytes()), name
            assert t._is_view() == u._is_view(), name
            assert torch.equal(t, u), name
        assert bulk.specs == alone.specs


def test_runs_of_one_shape_are_the_same_views_as_one_by_one():
    """wcache._hostviews.strided builds tensors of one shape whose offsets
    step by a constant as one as_strided + unbind per run: interleaved runs
    (q/k/v/o of a layer), cut runs, repeated and overlapping offsets, an
    unsorted order, and shapes too rare to look for runs all give what
    base.as_strided gives for each tensor alone."""
    from wcache import _hostviews as hostviews
    from wcache.dtypes import contiguous_strides

    rng = np.random.default_rng(3)
    base = torch.zeros(1 << 16, dtype=torch.float16)
    shapes, offsets = [], []

    def add(shape, byte_offsets):
        shapes.extend([shape] * len(byte_offsets))
        offsets.extend(byte_offsets)

    add((4, 8), [1024 + 640 * i + 64 * j for i in range(30) for j in range(4)])  # 4 interleaved runs
    add((8,), [40000 + 96 * i for i in range(100)] + [50000, 50002, 50002]  # a run, cut, resumed
        + [51000 + 96 * i for i in range(100)])
    add((2, 3, 2), [70000 + 8 * i for i in range(25)])  # overlapping (24 bytes each, 8 apart)
    add((3,), sorted(int(x) * 2 for x in rng.integers(0, 30000, 40)))  # no constant step
    add((5, 5), [2 * 7 * i for i in range(3)])  # too few to look for runs
    add((), [100, 100, 102])
    order = rng.permutation(len(shapes))
    shapes, offsets = [shapes[i] for i in order], [offsets[i] for i in order]
    strides_of = {s: contiguous_strides(s) for s in set(shapes)}
    got = hostviews.strided(base, 2, shapes, offsets, strides_of)
    assert len(got) == len(shapes)
    for t, shape, off in zip(got, shapes, offsets):
        want = base.as_strided(shape, contiguous_strides(shape), off // 2)
        assert (t.shape, t.stride(), t.storage_offset(), t.data_ptr()) == \
            (want.shape, want.stride(), want.storage_offset(), want.data_ptr())
        assert t._base is base and want._base is base
    got[0].fill_(1.0)  # views without grad may be written in place (copy-on-write pages)


def dtypes_contiguous(shape):
    from wcache.dtypes import contiguous_strides

    return list(contiguous_strides(tuple(shape)))


def test_numpy_arrays_are_copy_on_write_views(short_tmp, tensors):
    manifest, where = arena.build(short_tmp, tensors)
    mat = materialize(manifest, library="numpy")
    for name, dtype, shape, data in tensors:
        a = mat.tensors[name]
        assert isinstance(a, np.ndarray)
        assert a.flags.writeable or not data  # a write lands in this process's copy of the page
        if dtype == "BF16":  # numpy has no bfloat16: raw bytes
            assert a.dtype == np.uint8 and a.shape == (len(data),)
            assert a.tobytes() == data
            continue
        assert a.shape == tuple(shape)
        assert a.tobytes() == data
        if data:
            region = region_of(mat, name)
            assert a.ctypes.data - region.address == where[name][1]


def test_misaligned_offsets_still_alias(short_tmp, tensors):
    manifest, where = arena.build(short_tmp, tensors, misalign=1)
    mat = materialize(manifest, library="torch")
    for name, dtype, shape, data in tensors:
        t = mat.tensors[name]
        assert tuple(t.shape) == tuple(shape)
        if data:
            assert t.data_ptr() - region_of(mat, name).address == where[name][1]
            np.testing.assert_array_equal(t.to(torch.float32).numpy(), expected_values(dtype, shape, data))


def test_dtypes_without_an_equivalent_are_raw_bytes(short_tmp):
    rng = np.random.default_rng(2)
    f4 = ("packed", "F4", (4, 6), rng.integers(0, 256, 12, dtype=np.uint8).tobytes())
    ints = st_writer.random_tensor(rng, "ints", "I64", (3, 2))
    flags = ("flags", "BOOL", (5,), bytes([0, 1, 1, 0, 1]))
    manifest, _ = arena.build(short_tmp, [f4, ints, flags], n_handles=1)
    mat = materialize(manifest, library="torch")
    raw = mat.tensors["packed"]
    assert raw.dtype == torch.uint8 and tuple(raw.shape) == (12,)
    assert bytes(raw.numpy().tobytes()) == f4[3]
    assert mat.tensors["ints"].dtype == torch.int64
    assert mat.tensors["ints"].numpy().tobytes() == ints[3]
    assert mat.tensors["flags"].tolist() == [False, True, True, False, True]
    if not hasattr(torch, "float8_e4m3fn"):
        fp8 = ("fp8", "F8_E4M3", (2, 2), b"\x01\x02\x03\x04")
        manifest, _ = arena.build(short_tmp, [fp8], n_handles=1)
        t = materialize(manifest, library="torch").tensors["fp8"]
        assert t.dtype == torch.uint8 and tuple(t.shape) == (4,)


def test_writing_through_a_tensor_stays_private_instead_of_corrupting_shared_weights(short_tmp, tensors):
    manifest, _ = arena.build(short_tmp, tensors, n_handles=1)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {src!r})
        from wcache import pb
        from wcache._tensors import materialize
        m = pb.Manifest.FromString({manifest.SerializeToString()!r})
        t = materialize(m, library="torch").tensors["layer.0.BF16"]
        t.fill_(1.0)
        assert bool((t == 1.0).all())
        print("WROTE")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "WROTE" in proc.stdout
    with open(manifest.handles[0].data.decode(), "rb") as f:
        assert b"\x80\x3f\x80\x3f" not in f.read()  # no bf16 1.0s were written


def test_malformed_manifests_are_protocol_errors(short_tmp, tensors):
    good, _ = arena.build(short_tmp, tensors[:5], n_handles=1)

    def broken(mutate):
        m = pb.Manifest()
        m.CopyFrom(good)
        mutate(m)
        return m

    cases = {
        "outside": lambda m: setattr(m.tensors[2], "offset", m.handles[0].size),
        "length": lambda m: setattr(m.tensors[2], "length", m.tensors[2].length + 2),
        "handle index": lambda m: setattr(m.tensors[2], "handle_index", 3),
        "twice": lambda m: setattr(m.tensors[3], "name", m.tensors[2].name),
        "kind": lambda m: setattr(m.handles[0], "kind", "fd-over-scm"),
        "absolute": lambda m: setattr(m.handles[0], "data", b"relative/path"),
        "ipc size": lambda m: (setattr(m.handles[0], "kind", "cuda-ipc"), setattr(m.handles[0], "data", b"x" * 63)),
    }
    for what, mutate in cases.items():
        with pytest.raises(ProtocolError):
            materialize(broken(mutate), library="torch")
        assert what


def as_table(m) -> "pb.Manifest":
    """m with its tensors moved into the compact tensor_table (front-coded
    names), as a daemon sends them to a client that asks for it."""
    out = pb.Manifest()
    out.CopyFrom(m)
    del out.tensors[:]
    table, prev = out.tensor_table, b""
    for t in m.tensors:
        name = t.name.encode()
        keep = 0
        while keep < min(len(prev), len(name)) and prev[keep] == name[keep]:
            keep += 1
        table.name_shared.append(keep)
        table.name_suffix_len.append(len(name) - keep)
        table.name_suffixes += name[keep:]
        if t.dtype not in table.dtypes:
            table.dtypes.append(t.dtype)
        table.dtype.append(list(table.dtypes).index(t.dtype))
        table.ndim.append(len(t.shape))
        table.dims.extend(t.shape)
        table.handle_index.append(t.handle_index)
        table.offset.append(t.offset)
        table.length.append(t.length)
        prev = name
    return out


def test_tensor_table_manifests_equal_their_tensors(short_tmp, tensors):
    """The compact tensor table (what attach asks for) gives the same specs
    and tensors as Manifest.tensors, non-ASCII names included, and each
    malformed case is refused with the same error."""
    from wcache._manifest import parse_manifest

    named = [(f"layer.{i}.wé" if i % 2 else f"layer.{i}.w", *t[1:]) for i, t in enumerate(tensors[:6])]
    for chosen in (tensors[:6], named):
        good, _ = arena.build(short_tmp, chosen, n_handles=2)
        table = as_table(good)
        assert len(table.tensors) == 0 and len(table.tensor_table.name_shared) == len(good.tensors)
        assert parse_manifest(table) == parse_manifest(good)
        a, b = materialize(good, library="torch"), materialize(table, library="torch")
        assert list(a.tensors) == list(b.tensors) == [t[0] for t in chosen]
        for name, t in a.tensors.items():
            u = b.tensors[name]
            assert (t.dtype, t.shape, t.stride(), t.storage_offset()) == (u.dtype, u.shape, u.stride(),
                                                                          u.storage_offset())
            assert torch.equal(t, u)

    good, _ = arena.build(short_tmp, tensors[:5], n_handles=1)
    cases = {
        "outside": lambda m: setattr(m.tensors[2], "offset", m.handles[0].size),
        "length": lambda m: setattr(m.tensors[2], "length", m.tensors[2].length + 2),
        "handle index": lambda m: setattr(m.tensors[2], "handle_index", 3),
        "twice": lambda m: setattr(m.tensors[3], "name", m.tensors[2].name),
    }
    for what, mutate in cases.items():
        m = pb.Manifest()
        m.CopyFrom(good)
        mutate(m)
        with pytest.raises(ProtocolError) as want:
            parse_manifest(m)
        with pytest.raises(ProtocolError) as got:
            parse_manifest(as_table(m))
        assert str(got.value) == str(want.value), what
    torn = as_table(good)
    torn.tensor_table.ndim.append(1)
    both = as_table(good)
    both.tensors.add().CopyFrom(good.tensors[0])
    overshare = as_table(good)
    overshare.tensor_table.name_shared[1] = 1000
    for m, message in ((torn, "columns of different lengths"), (both, "both tensors and a tensor table"),
                       (overshare, "shares 1000 bytes")):
        with pytest.raises(ProtocolError, match=message):
            parse_manifest(m)


def test_published_views_never_reach_outside_their_entry(short_tmp, tensors):
    """A manifest whose view (shape, strides, storage offset) reaches past its
    entry is refused before any view is built, for every dtype torch could
    view — "torch.<name>" dtypes included (a 3,200-byte view over a 16-byte
    entry, issue 28 item 3); a torch dtype outside the vocabulary is raw bytes."""
    good, _ = arena.build(short_tmp, tensors[:5], n_handles=1)

    def published(dtype, shape, strides=(), storage_offset=0, length=16):
        m = pb.Manifest()
        m.CopyFrom(good)
        t = m.tensors[0]
        t.dtype, t.length = dtype, length
        del t.shape[:]
        t.shape.extend(shape)
        t.layout.storage = "s0"
        t.layout.strides.extend(strides)
        t.layout.storage_offset = storage_offset
        return m

    for m in (published("torch.complex128", [200]), published("F32", [800], [1]),
              published("torch.qint32", [2, 2], [1, 1], storage_offset=2),
              published("F32", [4], [-1])):
        with pytest.raises(ProtocolError):
            materialize(m, library="torch")
    raw = materialize(published("torch.float32", [800], [1]), library="torch").tensors
    t = raw[good.tensors[0].name]
    assert t.dtype == torch.uint8 and tuple(t.shape) == (16,)
    ok = materialize(published("torch.complex128", [1], [1]), library="torch").tensors[good.tensors[0].name]
    assert ok.dtype == torch.complex128 and tuple(ok.shape) == (1,)


def test_short_or_missing_shm_file(short_tmp, tensors):
    m, _ = arena.build(short_tmp, tensors[:5], n_handles=1)
    m.handles[0].size += 1 << 20
    with pytest.raises(ProtocolError, match="has .* bytes"):
        materialize(m, library="torch")
    m.handles[0].data = os.path.join(short_tmp, "gone").encode()
    with pytest.raises(WcacheError, match="No such file"):
        materialize(m, library="torch")
    m.handles[0].data = short_tmp.encode()
    with pytest.raises(ProtocolError, match="not a regular file"):
        materialize(m, library="torch")


def test_without_torch_auto_gives_numpy(short_tmp, tensors):
    manifest, _ = arena.build(short_tmp, tensors, n_handles=1)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {src!r})
        sys.modules["torch"] = None  # import torch now raises ImportError
        import numpy
        import wcache
        from wcache._tensors import materialize
        m = wcache.pb.Manifest.FromString({manifest.SerializeToString()!r})
        ts = materialize(m).tensors
        assert all(isinstance(a, numpy.ndarray) for a in ts.values())
        assert ts["layer.2.F32"].dtype == numpy.float32 and ts["layer.1.F16"].dtype == numpy.float16
        print("OK")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_materialize_leaves_its_objects_to_the_oldest_generation_and_frozen_ones_frozen(short_tmp, tensors):
    """materialize collects nothing while it builds (100k tensors) and hands
    what it built to the collector's oldest generation, not to the youngest
    (whose next collection would traverse it all); objects the program
    froze stay frozen (then the objects stay young)."""
    import gc  # noqa: PLC0415

    manifest, _ = arena.build(short_tmp, tensors)
    gc.collect()
    mat = materialize(manifest, library="torch")
    young = gc.get_count()[0]
    assert young < 50, f"{young} objects left in the youngest generation"
    assert any(t is mat.tensors["layer.0.BF16"] for t in gc.get_objects(generation=2))
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        mat2 = materialize(manifest, library="torch")
        assert gc.get_freeze_count() == frozen
        assert all(t is not mat2.tensors["layer.0.BF16"] for t in gc.get_objects(generation=2))
    finally:
        gc.unfreeze()


def test_device_handles_opened_by_torch_take_the_bulk_path(short_tmp, tensors, monkeypatch):
    """cuda-ipc handles opened through torch (and hip-ipc, cuda-vmm-fd: the
    same region types) are viewed in bulk as host memory is: every tensor
    equals the one-by-one region.tensor() — bytes, dtype, shape, storage and
    its offset — and is a view of one base per handle and dtype. A CPU
    storage of the allocation's bytes stands in for device memory (no GPU
    here; on one, the base is made on the storage's device)."""
    import ctypes  # noqa: PLC0415

    from wcache import _tensors
    from wcache._ipc import TorchIpcRegion

    manifest, where = arena.build(short_tmp, tensors, n_handles=2)
    storages = {}
    for h in manifest.handles:
        with open(h.data.decode(), "rb") as f:
            storages[h.data.decode()] = _tensors._untyped(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
        h.kind, h.data = "cuda-ipc", h.data.ljust(64, b"\0")

    def open_ipc(index, handle, uuid, torch_, device_index, cuda_library, driver):
        region = TorchIpcRegion.__new__(TorchIpcRegion)
        region.index, region.size, region.device_index = index, handle.size, 0
        region.storage = storages[handle.data.rstrip(b"\0").decode()]
        region.address = region.storage.data_ptr()
        return region

    monkeypatch.setattr(_tensors, "_open_ipc", open_ipc)
    mat = materialize(manifest, library="torch")
    bases = {}
    for name, dtype, shape, data in tensors:
        t, region = mat.tensors[name], region_of(mat, name)
        one = region.tensor(torch, mat.specs[name])
        assert (t.dtype, tuple(t.shape), t.storage_offset()) == (one.dtype, tuple(one.shape), one.storage_offset())
        if not data:
            continue
        assert _tensors._untyped(t).data_ptr() == region.address and t.data_ptr() == one.data_ptr()
        assert ctypes.string_at(t.data_ptr(), len(data)) == data
        assert t._is_view() and bases.setdefault((mat.specs[name].handle_index, dtype), t._base) is t._base
    assert len(bases) == 6  # 2 handles x 3 dtypes
