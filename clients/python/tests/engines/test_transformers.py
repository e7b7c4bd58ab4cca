"""wcache.transformers end to end: real engine processes against `wcache serve --backend mock`.

A tiny Llama (random weights, ~14 MB of float32, tied embeddings) written
with save_pretrained; every engine is a fresh process (transformers_child.py):

1. a plain AutoModelForCausalLM.from_pretrained gives the reference logits;
2. without a daemon, wcache.transformers.from_pretrained loads from disk
   (and refuses with fallback="error");
3. into an empty daemon it loads, publishes and continues on the daemon's
   memory;
4. with the checkpoint evicted from the page cache, a fresh process naming
   the very files attaches (proven by one stat per file), its logits equal
   the reference bit for bit and its /proc/self/io read_bytes while loading
   stays far below the checkpoint's size;
5. the checkpoint's tensor bytes are then overwritten (headers, hence the
   checkpoint digest, unchanged): a fresh process does not attach to the
   weights published from the old bytes (content identity, issue 24): under
   the default policy it loads from disk, under "hash" it fails naming the
   file;
6. a different dtype is a config mismatch naming the field.

Needs transformers (clients/python/engines/test.sh transformers runs it in the
pinned environment); skipped without it. Needs bin/wcache (make build).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed in this Python "
                                   "(run clients/python/engines/test.sh transformers)")

import engine_child  # noqa: E402
import wcache  # noqa: E402
from tiny_llama import write_tiny_llama  # noqa: E402

pytestmark = pytest.mark.interop



def drop_page_cache(path: str) -> None:
    """Evict path's pages, so that a later read of them is a read from the device."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def overwrite_tensor_bytes(path: str) -> None:
    """Invert every byte after the safetensors header (the header stays)."""
    with open(path, "r+b") as f:
        n = int.from_bytes(f.read(8), "little")
        f.seek(8 + n)
        data = bytearray(f.read())
        for i in range(len(data)):
            data[i] ^= 0xFF
        f.seek(8 + n)
        f.write(data)


def run_child(env, *args, expect_rc=0):
    return engine_child.run("transformers_child.py", env, *args, timeout=900, expect_rc=expect_rc)[0]


def test_from_pretrained_publishes_then_attaches_without_reading_the_files(world):
    ckpt = tempfile.mkdtemp(prefix="wc-hf-", dir=os.environ.get("WCACHE_TEST_CKPT_DIR", "/var/tmp"))
    try:
        st_file = write_tiny_llama(ckpt)
        size = os.path.getsize(st_file)
        digest = wcache.checkpoint_digest(ckpt)
        env = dict(world.env, WCACHE_BACKEND="mock", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")

        drop_page_cache(st_file)
        ref = run_child(env, "disk", ckpt)
        assert ref["class"] == "LlamaForCausalLM" and ref["tied"] and not ref["training"]
        if os.major(os.stat(st_file).st_dev) != 0:  # a block device: reads are counted
            assert ref["read_bytes"] >= size * 0.9, \
                f"the control read {ref['read_bytes']} bytes of a {size}-byte checkpoint: read_bytes is not counted"

        # No daemon (an empty runtime dir): the plain load, or an error when asked.
        no_daemon = dict(env, XDG_RUNTIME_DIR=os.path.join(ckpt, "no-daemon"))
        os.mkdir(no_daemon["XDG_RUNTIME_DIR"], 0o700)
        refused = run_child(no_daemon, "wcache", ckpt, "--fallback", "error", expect_rc=3)
        assert refused["error"] == "NoDaemonFallbackError", refused
        alone = run_child(no_daemon, "wcache", ckpt)
        assert alone["source"] == "loaded" and "no" in alone["reason"]
        assert alone["logits_sha256"] == ref["logits_sha256"]

        world.serve(0, None)  # an empty daemon
        first = run_child(env, "wcache", ckpt)
        assert first["source"] == "published", first
        assert first["in_attached_memory"], "the publisher still runs on its own copies"
        for key in ("logits_sha256", "tensors_sha256", "class", "tied", "training", "config", "generation_config"):
            assert first[key] == ref[key], key

        drop_page_cache(st_file)
        second = run_child(env, "wcache", ckpt)
        assert second["source"] == "attached", second
        assert second["in_attached_memory"], "parameters were copied, not attached"
        for key in ("logits_sha256", "tensors_sha256", "class", "tied", "training", "config", "generation_config"):
            assert second[key] == ref[key], f"{key}: attached {second[key]!r} != disk {ref[key]!r}"
        assert second["read_bytes"] < size // 8, \
            f"the attaching process read {second['read_bytes']} bytes (checkpoint: {size})"

        # The same headers, other values (issue 24): never the published weights.
        # Under "identity" the changed file is a miss (loaded from disk), under
        # "hash" a ContentMismatchError naming it.
        overwrite_tensor_bytes(st_file)
        assert wcache.checkpoint_digest(ckpt) == digest
        changed = run_child(env, "wcache", ckpt)
        assert changed["source"] == "loaded" and "content not proven" in changed["reason"], changed
        assert changed["tensors_sha256"] != ref["tensors_sha256"]
        hashed = run_child(env, "wcache", ckpt, "--content-policy", "hash", expect_rc=3)
        assert hashed["error"] == "ContentMismatchError" and os.path.basename(st_file) in hashed["message"], hashed

        # Other weights for another dtype: a mismatch, never a silent reload.
        other = run_child(env, "wcache", ckpt, "--dtype", "bfloat16", expect_rc=3)
        assert other["error"] == "IncompatibleConfigError" and "dtype" in other["fields"], other
        st = world.wcache_json("status", "--json")[0]
        assert st.get("state") == "serving", st
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
