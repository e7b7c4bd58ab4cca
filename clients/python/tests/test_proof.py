"""The content proof an attach carries (wcache.content.ContentProof) against an
in-process fake daemon: what is sent, how the daemon's ContentRefused is
raised, the "hash" retry, and the client's own check for older daemons."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import arena
import st_writer
import wcache
from fake_daemon import FakeDaemon
from wcache import content, pb


@pytest.fixture
def served(short_tmp):
    ck = os.path.join(short_tmp, "ck")
    tensors = st_writer.make_checkpoint(ck, n_tensors=12, n_shards=2)
    manifest, _ = arena.build(short_tmp, list(tensors.values()))
    del manifest.content_policies[:]  # the default policies: identity, hash
    arena.loaded_from(manifest, ck)
    return ck, short_tmp + "/d.sock", manifest


def test_attach_derives_the_files_and_leaves_out_what_the_daemon_did_not_load(served):
    ck, sock, manifest = served
    rank1 = os.path.join(ck, "model-rank-1-part-0.safetensors")  # another rank's file beside them
    rng = np.random.default_rng(3)
    st_writer.write(rank1, [st_writer.random_tensor(rng, "x", "F32", (2,))])
    os.remove(os.path.join(ck, "model.safetensors.index.json"))  # every *.safetensors counts
    cfg = wcache.CacheConfig(model=ck)
    with FakeDaemon(sock, manifest) as d:
        with wcache.attach(cfg, socket=sock, digest_cache=content.DigestCache(os.path.join(ck, "..", "dc"))):
            pass
        sent = d.requests[-1].content
        assert sent.derived and sent.policy == "identity"
        assert sorted(f.name for f in sent.files) == sorted(n for n in os.listdir(ck) if n.endswith(".safetensors"))
        assert all(f.ino and f.size for f in sent.files)
        # Named files are compared as named: an extra one is a mismatch.
        files = wcache.checkpoint.model_files(ck)
        with pytest.raises(content.ContentMismatchError, match="model-rank-1-part-0"):
            wcache.attach(cfg, socket=sock, files=files)
        assert not d.requests[-1].content.derived


def test_daemon_refusals_are_typed_and_hash_retries_once(served):
    ck, sock, manifest = served
    files = wcache.checkpoint.model_files(ck)
    named = os.path.basename(files[1])
    unknown = pb.ContentRefused(reason=pb.CONTENT_REFUSED_UNKNOWN, name=named, unproven=[named], generation=3,
                                policies=["identity", "hash"])
    cache = content.DigestCache(os.path.join(ck, "..", "dc"))
    with FakeDaemon(sock, manifest) as d:
        d.content_refusals = [unknown]
        with pytest.raises(content.ContentUnknownError) as e:
            wcache.attach(wcache.CacheConfig(model=ck), socket=sock, digest_cache=cache)
        assert isinstance(e.value, wcache.NoDaemonError) and e.value.unproven == [named] and e.value.generation == 3
        d.content_refusals = [unknown]
        with wcache.attach(wcache.CacheConfig(model=ck), socket=sock, content_policy="hash", digest_cache=cache):
            pass
        first, second = d.requests[-2].content, d.requests[-1].content
        assert not any(f.digest for f in first.files)
        assert {f.name: bool(f.digest) for f in second.files} == {os.path.basename(p): os.path.basename(p) == named
                                                                    for p in files}
        d.content_refusals = [pb.ContentRefused(reason=pb.CONTENT_REFUSED_MISMATCH, name=named, daemon_digest="a",
                                                client_digest="b", client_path=files[1])]
        with pytest.raises(content.ContentMismatchError, match=named):
            wcache.attach(wcache.CacheConfig(model=ck), socket=sock, digest_cache=cache)
        d.content_refusals = [pb.ContentRefused(reason=pb.CONTENT_REFUSED_PROOF_REQUIRED, policies=["identity", "hash"])]
        with pytest.raises(content.ContentUnknownError):
            wcache.attach(wcache.CacheConfig(model="acme/not-here"), socket=sock)
        assert len(d.requests[-1].content.files) == 0


def test_an_older_daemon_that_ignores_the_proof_is_checked_here(served, short_tmp):
    ck, sock, manifest = served
    copy = os.path.join(short_tmp, "copy")
    shutil.copytree(ck, copy)  # other identities; unproven without a digest
    with FakeDaemon(sock, manifest):
        with pytest.raises(content.ContentUnknownError):
            wcache.attach(wcache.CacheConfig(model=copy), socket=sock, digest_cache=content.DigestCache(short_tmp + "/dc"))
        with pytest.raises(content.ContentUnknownError, match="headers"):
            wcache.attach(wcache.CacheConfig(model="acme/not-here"), socket=sock)
