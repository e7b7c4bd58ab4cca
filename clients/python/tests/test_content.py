"""Content identity (wcache.content): the digest matches the Go vectors, the digest
cache trusts only its own user's private entries, and against the real Go daemon a
copy of the served checkpoint with one tensor zeroed is refused (issue 24)."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import time

import pytest

import st_writer
import wcache
from wcache import content


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VECTORS = os.path.join(REPO, "sdk", "filedigest", "testdata", "vectors.json")


def vector_bytes(size: int) -> bytes:
    return bytes((31 * i + (i >> 11)) & 0xFF for i in range(size))


@pytest.mark.parametrize("vector", json.load(open(VECTORS, encoding="utf-8")),
                         ids=lambda v: v["digest"].split(":")[0] + "-" + str(v["size"]))
def test_digest_vectors(vector, tmp_path):
    """Every vector of sdk/filedigest, in the algorithm it names: the SHA-256 tree ones (as
    recorded before BLAKE3) and the BLAKE3 tree ones (needs the blake3 wheel, in the pinned
    environment; Debian's interpreter lacks it)."""
    algorithm = content.algorithm_of(vector["digest"])
    if not content.can_compute(algorithm):
        pytest.skip(f"{algorithm}: the blake3 module is not installed in this interpreter")
    data = vector_bytes(vector["size"])
    assert content.digest_bytes(data, algorithm) == vector["digest"]
    p = tmp_path / "f"
    p.write_bytes(data)
    seen = []
    assert content.digest_file(str(p), workers=3, progress=lambda d, t: seen.append((d, t)),
                               algorithm=algorithm) == vector["digest"]
    assert not data or seen[-1] == (len(data), len(data))


def test_both_algorithms_have_vectors():
    algorithms = {content.algorithm_of(v["digest"]) for v in json.load(open(VECTORS, encoding="utf-8"))}
    assert algorithms == set(content.ALGORITHMS)
    with pytest.raises(ValueError):
        content.algorithm_of("md5-tree-1m:" + "0" * 64)


def test_record_proven_in_its_own_algorithm(tmp_path):
    """A record in SHA-256 (an older daemon's or publish's) is proven by hashing in SHA-256,
    whatever this client's default; a cached digest of the other algorithm proves nothing; an
    entry an older client cached (named by the identity alone) is found."""
    p = tmp_path / "model.safetensors"
    data = vector_bytes(2 * content.LEAF_BYTES + 5)
    p.write_bytes(data)
    ident = content.Identity.of(os.stat(p))
    other = content.Identity(1, 2, ident.size, 3, 4)  # the daemon's file: another identity, same size
    for algorithm in content.ALGORITHMS:
        if not content.can_compute(algorithm):
            continue
        cache = content.DigestCache(str(tmp_path / ("c-" + algorithm)))
        rec = content.FileContent(p.name, content.digest_bytes(data, algorithm), "/elsewhere/" + p.name, other)
        for a in content.ALGORITHMS:
            if a != algorithm and content.can_compute(a):
                cache.store(ident, content.digest_bytes(data, a))
        with pytest.raises(content.ContentUnknownError):
            content.prove_content([rec], [str(p)], content.POLICY_IDENTITY, cache=cache)
        content.prove_content([rec], [str(p)], content.POLICY_HASH, cache=cache)
        assert cache.lookup(ident, algorithm) == rec.digest
        content.prove_content([rec], [str(p)], content.POLICY_IDENTITY, cache=cache)
        bad = rec._replace(digest=content.digest_bytes(b"\1" + data[1:], algorithm))
        with pytest.raises(content.ContentMismatchError):
            content.prove_content([bad], [str(p)], content.POLICY_HASH, cache=content.DigestCache(str(tmp_path / "x")))
    old = content.digest_bytes(data, content.SHA256_TREE)
    d = tmp_path / "old"
    d.mkdir(mode=0o700)
    (d / content.DigestCache.entry_name(ident)).write_text(old + "\n")
    os.chmod(d / content.DigestCache.entry_name(ident), 0o600)
    cache = content.DigestCache(str(d))
    assert cache.lookup(ident) == old
    rec = content.FileContent(p.name, old, "/elsewhere/" + p.name, other)
    content.prove_content([rec], [str(p)], content.POLICY_IDENTITY, cache=cache)


def test_digest_cache_trusts_only_private_entries_of_its_uid(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 10)
    ident = content.Identity.of(os.stat(p))
    d = content.digest_bytes(b"x" * 10)
    cache = content.DigestCache(str(tmp_path / "c"))
    cache.store(ident, d)
    assert cache.lookup(ident) == d
    assert content.DigestCache(str(tmp_path / "c"), uid=os.geteuid() + 1).lookup(ident) is None
    entry = os.path.join(cache.directory, cache.entry_name(ident, content.algorithm_of(d)))
    os.chmod(entry, 0o666)
    assert cache.lookup(ident) is None
    os.chmod(entry, 0o600)
    os.chmod(cache.directory, 0o777)
    assert cache.lookup(ident) is None
    os.chmod(cache.directory, 0o700)
    os.unlink(entry)
    os.symlink(str(p), entry)
    assert cache.lookup(ident) is None


def zero_last_tensor(path: str) -> None:
    with open(path, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        entries = [v for k, v in header.items() if k != "__metadata__"]
        begin, end = max((e["data_offsets"] for e in entries), key=lambda o: o[0])
        f.seek(8 + n + begin)
        f.write(bytes(end - begin))


@pytest.mark.interop
def test_copy_with_a_tensor_zeroed_is_refused(world, tmp_path):
    w = world
    m1 = os.path.join(w.root, "m1")
    st_writer.make_checkpoint(m1, n_tensors=40, n_shards=2)
    w.serve(0, m1)
    files1 = sorted(glob.glob(os.path.join(m1, "*.safetensors")))
    cfg = wcache.CacheConfig(model=m1, checkpoint_digest=wcache.checkpoint_digest(m1), device_capability="mock")
    kw = dict(socket=w.socket_path(w.uuids[0]))
    cache = content.DigestCache(str(tmp_path / "digests"))
    # The daemon's own files: proven by identity, cheaply, and attachable.
    status = wcache.status(**kw)
    assert content.identities_match(content.files_from_proto(status.files), files1)
    wcache.attach(cfg, files=files1, digest_cache=cache, **kw).release()

    m2 = os.path.join(w.root, "m2")
    shutil.copytree(m1, m2)  # copy2 keeps mtimes, like cp -p
    files2 = sorted(glob.glob(os.path.join(m2, "*.safetensors")))
    zero_last_tensor(files2[1])
    assert not content.identities_match(content.files_from_proto(status.files), files2)
    with pytest.raises(wcache.ContentUnknownError):
        wcache.attach(cfg, files=files2, digest_cache=cache, **kw)
    with pytest.raises(wcache.PolicyRefusedError):
        wcache.attach(cfg, files=files2, content_policy="headers", digest_cache=cache, **kw)
    # The daemon records BLAKE3 tree digests: without the blake3 wheel (Debian's
    # interpreter) "hash" cannot prove them, a miss saying why.
    assert all(content.algorithm_of(r.digest) == content.BLAKE3_TREE for r in content.files_from_proto(status.files))
    if not content.can_compute(content.BLAKE3_TREE):
        with pytest.raises(wcache.ContentUnknownError, match="blake3"):
            wcache.attach(cfg, files=files2, content_policy="hash", digest_cache=cache, **kw)
        return
    with pytest.raises(wcache.ContentMismatchError) as e:
        wcache.attach(cfg, files=files2, content_policy="hash", digest_cache=cache, **kw)
    assert e.value.name == os.path.basename(files2[1])

    m3 = os.path.join(w.root, "m3")
    shutil.copytree(m1, m3)
    files3 = sorted(glob.glob(os.path.join(m3, "*.safetensors")))
    hashed = []
    wcache.attach(cfg, files=files3, content_policy="hash", digest_cache=cache,
                  on_hash_progress=lambda n, d, t: hashed.append(n) if d == t else None, **kw).release()
    assert sorted(hashed) == [os.path.basename(p) for p in files3]
    hashed.clear()
    wcache.attach(cfg, files=files3, digest_cache=cache,
                  on_hash_progress=lambda n, d, t: hashed.append(n), **kw).release()
    assert hashed == []


HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _org_name_hub(tmp_path):
    """A Hugging Face cache at tmp_path/hub holding org/name's (empty)
    snapshot HUB_COMMIT, which refs/main names; returns the snapshot's
    folder and an environment whose HF_HUB_CACHE points at the cache."""
    repo = tmp_path / "hub" / "models--org--name"
    snap = repo / "snapshots" / HUB_COMMIT
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(HUB_COMMIT)
    return snap, {"HF_HUB_CACHE": str(tmp_path / "hub")}


def test_hub_ids_resolve_offline(tmp_path):
    snap, env = _org_name_hub(tmp_path)
    for model in ("org/name", "org/name@main", "org/name@" + HUB_COMMIT):
        assert wcache.resolve_model(model, env.get) == str(snap)
    assert wcache.resolve_model("org/name", {"HF_HOME": str(tmp_path)}.get) == str(snap)
    assert wcache.resolve_model(str(tmp_path)) == str(tmp_path)
    with pytest.raises(wcache.ModelNotCachedError) as e:
        wcache.resolve_model("org/absent@v1", env.get)
    assert str(tmp_path / "hub" / "models--org--absent" / "refs" / "v1") in str(e.value)


def test_hub_id_wins_over_a_relative_directory(tmp_path, monkeypatch):
    """As hubcache.Resolve: ./org/name in the working directory (planted in a
    shared /tmp) is never taken for the id org/name; ./org/name names it."""
    snap, env = _org_name_hub(tmp_path)
    work = tmp_path / "work"
    (work / "org" / "name").mkdir(parents=True)
    (work / "org" / "absent").mkdir(parents=True)
    monkeypatch.chdir(work)
    assert wcache.resolve_model("org/name", env.get) == str(snap)
    assert wcache.resolve_model("./org/name", env.get) == "./org/name"
    with pytest.raises(wcache.ModelNotCachedError) as e:
        wcache.resolve_model("org/absent", env.get)
    assert e.value.local_dir == "org/absent" and "pass ./org/absent" in str(e.value)


def test_file_changed_in_place_after_the_load_is_caught(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(b"a" * (LEAF := content.LEAF_BYTES + 7))
    st = os.stat(p)
    rec = [content.FileContent(p.name, content.digest_bytes(b"a" * LEAF), str(p), content.Identity.of(st))]
    cache = content.DigestCache(str(tmp_path / "c"))
    content.prove_content(rec, [str(p)], cache=cache)  # the very file: proven by identity
    with open(p, "r+b") as f:  # same size, mtime put back: only the ctime tells
        f.seek(5)
        f.write(b"b")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(wcache.ContentUnknownError):
        content.prove_content(rec, [str(p)], cache=cache)
    with pytest.raises(wcache.ContentMismatchError) as e:
        content.prove_content(rec, [str(p)], "hash", cache=cache)
    assert e.value.name == p.name


def test_source_files_refuse_a_file_changed_since_it_was_named(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(b"a" * 100)
    cache = content.DigestCache(str(tmp_path / "c"))
    source = content.SourceFiles([str(p)])
    (rec,) = source.records(cache=cache)
    assert rec.name == p.name and rec.digest == content.digest_bytes(b"a" * 100)
    assert cache.lookup(rec.identity) == rec.digest  # hashed once, then cached
    p.write_bytes(b"b" * 100)  # rewritten between the naming and the publish
    with pytest.raises(wcache.WcacheError, match="changed since"):
        source.records(cache=cache)
    with pytest.raises(ValueError, match="two source files"):
        content.SourceFiles([str(p), str(p)])


@pytest.mark.interop
def test_publish_carries_the_source_files_content(world, tmp_path):
    """Publish mode (issue 24): weights published from dir A carry A's content;
    an engine naming A attaches by identity, one naming a copy of A with one
    tensor zeroed never gets them."""
    import torch  # noqa: PLC0415

    w = world
    a = os.path.join(w.root, "a")
    st_writer.make_checkpoint(a, n_tensors=20, n_shards=2)
    files_a = sorted(glob.glob(os.path.join(a, "*.safetensors")))
    w.serve(0, None)
    kw = dict(device_uuid=w.uuids[0], getenv=w.getenv)
    cfg = wcache.CacheConfig(model=a, checkpoint_digest=wcache.checkpoint_digest(a), dtype="fp32",
                             engine_name="test-engine", engine_version="1", device_capability="mock")
    loads = []

    def load():
        loads.append(1)
        return {"x": torch.arange(64, dtype=torch.float32)}

    publisher_cache = content.DigestCache(str(tmp_path / "publisher"))
    got = wcache.load_or_publish(cfg, load, files=files_a, digest_cache=publisher_cache, **kw)
    assert got.source == "published" and loads == [1]
    recorded = content.files_from_proto(wcache.status(**kw).files)
    assert [r.name for r in recorded] == [os.path.basename(p) for p in files_a]
    assert [r.digest for r in recorded] == [content.digest_file(p) for p in files_a]
    got.release()
    # An engine's publication stays compared as published weights, content or
    # not: "auto" does not match the dtype it stated.
    with pytest.raises(wcache.IncompatibleConfigError):
        wcache.attach(dataclasses.replace(cfg, dtype="auto"), files=files_a, digest_cache=publisher_cache, **kw)

    # The very files: one stat each, nothing hashed, no cache needed.
    hashed = []
    cold = content.DigestCache(str(tmp_path / "cold"))
    wcache.attach(cfg, files=files_a, digest_cache=cold, on_hash_progress=lambda *x: hashed.append(x),
                  **kw).release()
    again = wcache.load_or_publish(cfg, load, files=files_a, digest_cache=cold, **kw)
    assert again.source == "attached" and loads == [1] and hashed == []
    again.release()

    b = os.path.join(w.root, "b")
    shutil.copytree(a, b)
    files_b = sorted(glob.glob(os.path.join(b, "*.safetensors")))
    zero_last_tensor(files_b[0])
    cache_b = content.DigestCache(str(tmp_path / "b"))
    with pytest.raises(wcache.ContentUnknownError):  # identity: a miss, load from disk
        wcache.attach(cfg, files=files_b, digest_cache=cache_b, **kw)
    miss = wcache.load_or_publish(cfg, load, files=files_b, digest_cache=cache_b, **kw)
    assert miss.source == "loaded" and "content not proven" in miss.reason and loads == [1, 1]
    with pytest.raises(wcache.ContentMismatchError) as e:
        wcache.attach(cfg, files=files_b, content_policy="hash", digest_cache=cache_b, **kw)
    assert e.value.name == os.path.basename(files_b[0])
    # Now that B's digest is cached, "identity" knows it differs.
    with pytest.raises(wcache.ContentMismatchError):
        wcache.load_or_publish(cfg, load, files=files_b, digest_cache=cache_b, **kw)
    assert loads == [1, 1]


def hub_repo(hub: str, src: str, commit: str = "0123456789abcdef0123456789abcdef01234567") -> str:
    """src's files laid out as a hub cache holds a snapshot (blobs named by
    SHA-256, snapshot symlinks into them); returns the snapshot directory."""
    import hashlib  # noqa: PLC0415

    root = os.path.join(hub, "models--acme--tiny")
    snap = os.path.join(root, "snapshots", commit)
    os.makedirs(os.path.join(root, "blobs"))
    os.makedirs(snap)
    for name in sorted(os.listdir(src)):
        data = open(os.path.join(src, name), "rb").read()
        blob = hashlib.sha256(data).hexdigest()
        with open(os.path.join(root, "blobs", blob), "wb") as f:
            f.write(data)
        os.chmod(os.path.join(root, "blobs", blob), 0o644)
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, name))
    return snap


def test_hub_blob_names_prove_only_trusted_blobs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"w" * 1000)
    snap = hub_repo(str(tmp_path / "hub"), str(src))
    path = os.path.join(snap, "model.safetensors")
    sha, resolved = wcache._hub.blob_sha256(path)
    other = content.FileContent("model.safetensors", content.digest_bytes(b"w" * 1000), "/elsewhere",
                                content.Identity(1, 2, 1000, 3, 4), sha256=sha)
    cache = content.DigestCache(str(tmp_path / "c"))
    content.prove_content([other], [path], cache=cache)  # a trusted blob of the verified name
    os.chmod(resolved, 0o664)
    with pytest.raises(wcache.ContentUnknownError):  # writable by its group: the name proves nothing
        content.prove_content([other], [path], cache=cache)
    os.chmod(resolved, 0o644)
    for d in (os.path.dirname(resolved), os.path.dirname(os.path.dirname(resolved))):
        os.chmod(d, 0o777)  # a folder on the blob's way others can write: they could rename another blob to this name
        with pytest.raises(wcache.ContentUnknownError):
            content.prove_content([other], [path], cache=cache)
        os.chmod(d, 0o755)
    content.prove_content([other], [path], cache=cache)
    with pytest.raises(wcache.ContentUnknownError):  # a name the daemon did not verify
        content.prove_content([other._replace(sha256="")], [path], cache=cache)
    with pytest.raises(wcache.ContentUnknownError):
        content.prove_content([other._replace(sha256="0" * 64)], [path], cache=cache)
    assert wcache._hub.blob_sha256(str(src / "model.safetensors")) is None


@pytest.mark.interop
def test_a_copy_in_another_hub_cache_attaches_without_hashing(world, tmp_path):
    w = world
    m = os.path.join(w.root, "m")
    st_writer.make_checkpoint(m, n_tensors=20, n_shards=2)
    snap_a = hub_repo(os.path.join(w.root, "hubA"), m)
    snap_b = hub_repo(os.path.join(w.root, "hubB"), m)  # other inodes, the same blob names
    w.serve(0, snap_a)
    kw = dict(socket=w.socket_path(w.uuids[0]))
    names = sorted(n for n in os.listdir(m) if n.endswith(".safetensors"))
    deadline = time.monotonic() + 120  # the daemon verifies blob names in the background
    while True:
        st = wcache.status(**kw)
        recorded = {r.name: r.sha256 for r in content.files_from_proto(st.files, st.file_sha256)}
        if all(recorded.get(n) for n in names):
            break
        assert time.monotonic() < deadline, f"blob names not verified: {recorded}"
        time.sleep(0.05)
    for n in names:
        assert recorded[n] == wcache._hub.blob_sha256(os.path.join(snap_a, n))[0]
    cfg = wcache.CacheConfig(model=snap_b, checkpoint_digest=wcache.checkpoint_digest(snap_b),
                             device_capability="mock")
    files_b = [os.path.join(snap_b, n) for n in names]
    hashed = []
    att = wcache.attach(cfg, files=files_b, digest_cache=content.DigestCache(str(tmp_path / "cold")),
                        on_hash_progress=lambda *x: hashed.append(x), **kw)
    att.release()
    assert hashed == []


def test_served_checkpoint_digest_reads_no_header_for_the_daemons_files(world, monkeypatch):
    """The documented config step: for the daemon's own files the digest is
    the daemon's, without checkpoint_digest (no header read); for a copy
    with other bytes, without a daemon, it is checkpoint_digest's."""
    w = world
    m1 = os.path.join(w.root, "m1")
    st_writer.make_checkpoint(m1, n_tensors=40, n_shards=2)
    want = wcache.checkpoint_digest(m1)
    kw = dict(socket=w.socket_path(w.uuids[0]))
    m2 = os.path.join(w.root, "m2")
    shutil.copytree(m1, m2)
    zero_last_tensor(sorted(glob.glob(os.path.join(m2, "*.safetensors")))[1])
    read = []
    real = wcache.checkpoint.checkpoint_digest
    monkeypatch.setattr(wcache.checkpoint, "checkpoint_digest", lambda m: read.append(m) or real(m))
    assert wcache.served_checkpoint_digest(m1, **kw) == want and read == [m1]  # no daemon yet
    w.serve(0, m1)
    read.clear()
    assert wcache.served_checkpoint_digest(m1, **kw) == want and read == []
    assert wcache.served_checkpoint_digest(m2, **kw) == want and read == [m2]  # same headers, other bytes


def test_model_files_follow_the_directory_and_index_identity(tmp_path, monkeypatch):
    """model_files' memo: a listing is reused while the directory and its
    index keep their identity, in this process and (the index's shard list,
    in the per-user digest cache) in a fresh one; a shard added to the
    index, a file added without one, are listed by the next call."""
    monkeypatch.setattr(wcache.checkpoint, "_SETTLE_NS", 0)  # ctimes are now; times set an hour back below
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    past = time.time() - 3600
    indexed, plain = str(tmp_path / "indexed"), str(tmp_path / "plain")
    st_writer.make_checkpoint(indexed, n_tensors=8, n_shards=2)
    st_writer.make_checkpoint(plain, n_tensors=8, n_shards=2, with_index=False)
    index = os.path.join(indexed, wcache.checkpoint.INDEX_FILE_NAME)
    assert os.path.exists(index) and not os.path.exists(os.path.join(plain, wcache.checkpoint.INDEX_FILE_NAME))
    for p in [indexed, plain, index] + glob.glob(os.path.join(indexed, "*")) + glob.glob(os.path.join(plain, "*")):
        os.utime(p, (past, past))
    first = wcache.checkpoint.model_files(indexed)
    assert wcache.checkpoint.model_files(indexed) == first and indexed in wcache.checkpoint._LISTED
    # A fresh process (no memo): the shard list from the digest cache, no index parsed.
    monkeypatch.setattr(wcache.checkpoint, "_LISTED", {})
    parse = wcache.checkpoint.read_index
    monkeypatch.setattr(wcache.checkpoint, "read_index", lambda p: pytest.fail(f"index {p} parsed again"))
    assert wcache.checkpoint.model_files(indexed) == first
    monkeypatch.setattr(wcache.checkpoint, "read_index", parse)

    shutil.copy(first[0], os.path.join(indexed, "extra.safetensors"))
    with open(index) as f:
        doc = json.load(f)
    doc["weight_map"]["extra.w"] = "extra.safetensors"
    with open(index, "w") as f:
        json.dump(doc, f)
    assert wcache.checkpoint.model_files(indexed) == sorted(first + [os.path.join(indexed, "extra.safetensors")])
    monkeypatch.setattr(wcache.checkpoint, "_LISTED", {})
    assert wcache.checkpoint.model_files(indexed) == sorted(first + [os.path.join(indexed, "extra.safetensors")])

    before = wcache.checkpoint.model_files(plain)
    shutil.copy(before[0], os.path.join(plain, "more.safetensors"))
    assert wcache.checkpoint.model_files(plain) == sorted(before + [os.path.join(plain, "more.safetensors")])
