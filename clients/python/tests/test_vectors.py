"""The shared Go/Python vectors (core/cacheconfig/testdata/vectors.json): the Python
client must produce byte-identical canonical encodings and digests."""

from __future__ import annotations

import dataclasses
import json
import os
import struct

import pytest

from wcache import CacheConfig, checkpoint_digest, normalize_dtype, normalize_quantization
from wcache._vocab import DTYPE_ALIASES, QUANTIZATION_ALIASES
from wcache.checkpoint import digest_headers
from wcache.dtypes import TORCH_BITS
from wcache._config import NoWeightsIdentityError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VECTORS = os.path.join(REPO, "core", "cacheconfig", "testdata", "vectors.json")


def load():
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)


def test_vectors_file_is_present_and_not_empty():
    v = load()
    assert len(v["configs"]) >= 3 and len(v["checkpoints"]) >= 1


@pytest.mark.parametrize("vector", load()["configs"], ids=lambda v: v["name"])
def test_config_vectors(vector):
    cfg = CacheConfig(**vector["config"])
    assert cfg.canonical() == vector["canonical"].encode("utf-8")
    assert cfg.digest() == vector["digest"]


@pytest.mark.parametrize("vector", load()["weights_identities"], ids=lambda v: v["name"] + "/" + v["kind"])
def test_weights_identity_vectors(vector):
    cfg = CacheConfig(**vector["config"])
    if vector.get("no_identity"):
        with pytest.raises(NoWeightsIdentityError):
            cfg.weights_identity(vector["kind"])
        return
    assert cfg.weights_identity_canonical(vector["kind"]) == vector["canonical"].encode("utf-8")
    assert cfg.weights_identity(vector["kind"]) == vector["identity"]


def test_weights_identity_rule_covers_every_field():
    # A field added to CacheConfig needs a row in the rule (Go checks its own table).
    from wcache._config import _IDENTITY_RULES
    names = {f.name for f in dataclasses.fields(CacheConfig)} - {"extra"} | {"extra."}
    assert set(_IDENTITY_RULES) == names


@pytest.mark.parametrize("vector", load()["checkpoints"], ids=lambda v: v["name"])
def test_checkpoint_vectors(vector, tmp_path):
    headers = [(f["name"], bytes.fromhex(f["header_hex"])) for f in vector["files"]]
    assert digest_headers(headers) == vector["digest"]
    # Through real files: rebuild each file (header + a zero data buffer of the size it declares).
    for name, raw in headers:
        entries = {k: v for k, v in json.loads(raw).items() if k != "__metadata__"}
        data_len = max((v["data_offsets"][1] for v in entries.values()), default=0)
        with open(tmp_path / name, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + bytes(data_len))
    assert checkpoint_digest(str(tmp_path)) == vector["digest"]


@pytest.mark.parametrize("kind, normalize, aliases", [
    ("dtypes", normalize_dtype, DTYPE_ALIASES), ("quantizations", normalize_quantization, QUANTIZATION_ALIASES)])
def test_spelling_vectors(kind, normalize, aliases):
    vectors = load()[kind]
    for v in vectors:
        assert normalize(v["in"]) == v["canonical"], v
    # Every alias of the Python table has a vector, and so (tested in Go) has every Go alias:
    # the two tables cannot drift apart unnoticed.
    assert set(aliases) <= {v["in"] for v in vectors}


def test_torch_dtype_vocabulary_matches_go():
    # core/tensorview/testdata/torch_dtypes.json is written from the Go table (its test checks that).
    with open(os.path.join(REPO, "core", "tensorview", "testdata", "torch_dtypes.json"), encoding="utf-8") as f:
        assert TORCH_BITS == json.load(f)


def test_committed_checkpoint_directories():
    # Real files a third party can digest as they are; hidden files (one valid, one truncated) never count.
    dirs = load()["checkpoint_dirs"]
    assert dirs
    for v in dirs:
        path = os.path.join(os.path.dirname(VECTORS), v["path"])
        assert any(n.startswith(".") for n in os.listdir(path))
        assert checkpoint_digest(path) == v["digest"]


def _documented_reference_digest():
    """The reference checkpoint_digest of docs/cacheconfig.md, executed as printed."""
    with open(os.path.join(REPO, "docs", "cacheconfig.md"), encoding="utf-8") as f:
        doc = f.read()
    after = doc.split("A complete reference implementation", 1)[1]
    code = after.split("```python\n", 1)[1].split("```", 1)[0]
    scope = {}
    exec(compile(code, "docs/cacheconfig.md", "exec"), scope)  # noqa: S102 - our own documentation
    return scope["checkpoint_digest"]


@pytest.mark.parametrize("vector", load()["checkpoint_dirs"], ids=lambda v: v["path"])
def test_documented_reference_snippet_gives_the_vector(vector):
    # A third party copies this snippet: it must agree with the daemon on the
    # committed directory (hidden files left out), without importing wcache.
    ref = _documented_reference_digest()
    path = os.path.join(REPO, "core", "cacheconfig", "testdata", vector["path"])
    assert ref(path) == vector["digest"]
