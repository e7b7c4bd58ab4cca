"""checkpoint_digest: over base names and raw headers; index.json honoured; headers validated."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct

import numpy as np
import pytest

import st_writer
from wcache import CheckpointError, checkpoint_digest


def by_hand(directory, names):
    h = hashlib.sha256()
    for name in sorted(names):
        with open(os.path.join(directory, name), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            raw = f.read(n)
        h.update(f"{len(name)}:{name}{len(raw)}:".encode() + raw)
    return "sha256:" + h.hexdigest()


@pytest.fixture
def ckpt(tmp_path):
    d = str(tmp_path / "model")
    st_writer.make_checkpoint(d, n_tensors=40, n_shards=3)
    return d


SHARDS = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]


def test_digest_is_over_names_and_raw_headers(ckpt):
    assert checkpoint_digest(ckpt) == by_hand(ckpt, SHARDS)


def test_same_files_elsewhere_match_and_tensor_bytes_are_not_read(ckpt, tmp_path):
    want = checkpoint_digest(ckpt)
    other = str(tmp_path / "copy")
    shutil.copytree(ckpt, other)
    assert checkpoint_digest(other) == want
    path = os.path.join(other, SHARDS[0])
    with open(path, "r+b") as f:  # flip the last tensor byte: not covered by the digest
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))
    assert checkpoint_digest(other) == want


def test_a_changed_header_or_name_changes_the_digest(ckpt, tmp_path):
    want = checkpoint_digest(ckpt)
    rng = np.random.default_rng(0)
    os.remove(os.path.join(ckpt, SHARDS[2]))
    st_writer.write(os.path.join(ckpt, SHARDS[2]), [st_writer.random_tensor(rng, "x", "F32", (2,))])
    with open(os.path.join(ckpt, "model.safetensors.index.json")) as f:
        index = json.load(f)
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != SHARDS[2]}
    index["weight_map"]["x"] = SHARDS[2]
    with open(os.path.join(ckpt, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    assert checkpoint_digest(ckpt) not in (want,)


def test_index_names_the_shards(ckpt):
    want = checkpoint_digest(ckpt)
    # A stray file the index does not name is ignored.
    st_writer.write(os.path.join(ckpt, "consolidated.safetensors"), [("y", "F32", (1,), b"\0\0\0\0")])
    assert checkpoint_digest(ckpt) == want
    # Without the index every *.safetensors counts, in name order.
    os.remove(os.path.join(ckpt, "model.safetensors.index.json"))
    assert checkpoint_digest(ckpt) == by_hand(ckpt, SHARDS + ["consolidated.safetensors"])


def test_index_cross_checks(ckpt):
    ix_path = os.path.join(ckpt, "model.safetensors.index.json")
    with open(ix_path) as f:
        index = json.load(f)
    wm = index["weight_map"]
    first = sorted(wm)[0]

    def write_index(weight_map, raw=None):
        with open(ix_path, "w") as f:
            f.write(raw if raw is not None else json.dumps({"weight_map": weight_map}))

    write_index({**wm, "ghost": SHARDS[0]})
    with pytest.raises(CheckpointError, match="'ghost' to this shard, which does not hold it"):
        checkpoint_digest(ckpt)
    moved = dict(wm)
    moved[first] = SHARDS[0] if wm[first] != SHARDS[0] else SHARDS[1]
    write_index(moved)
    with pytest.raises(CheckpointError, match="but model.safetensors.index.json maps it to"):
        checkpoint_digest(ckpt)
    write_index({first: "../elsewhere.safetensors"})
    with pytest.raises(CheckpointError, match="not a plain file name"):
        checkpoint_digest(ckpt)
    write_index(None, raw='{"weight_map": {"a": "x", "a": "y"}}')
    with pytest.raises(CheckpointError, match="more than once"):
        checkpoint_digest(ckpt)
    write_index(None, raw='{"metadata": {}}')
    with pytest.raises(CheckpointError, match="no weight_map"):
        checkpoint_digest(ckpt)
    write_index({})
    with pytest.raises(CheckpointError, match="names no shard"):
        checkpoint_digest(ckpt)


def test_empty_directory_and_duplicate_tensors(tmp_path):
    d = str(tmp_path)
    with pytest.raises(CheckpointError, match="no model.safetensors.index.json and no"):
        checkpoint_digest(d)
    st_writer.write(os.path.join(d, "a.safetensors"), [("w", "F32", (1,), b"\0" * 4)])
    st_writer.write(os.path.join(d, "b.safetensors"), [("w", "F32", (1,), b"\0" * 4)])
    with pytest.raises(CheckpointError, match="'w' is also present in"):
        checkpoint_digest(d)


def header_file(tmp_path, header_text: bytes, data: bytes = b"", n=None):
    p = str(tmp_path / "bad.safetensors")
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(header_text) if n is None else n) + header_text + data)
    return str(tmp_path)


@pytest.mark.parametrize("header,data,n,fragment", [
    (b"", b"", 0, "does not start with '{'"),
    (b"[]", b"", None, "does not start with '{'"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}', b"\0" * 4, None, "not a valid JSON"),
    (b'{"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4, None, "not a safetensors dtype"),
    (b'{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', b"\0" * 4, None, "non-negative"),
    (b'{"a": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}', b"\0" * 4, None, "non-negative"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}', b"\0" * 8, None, "is 4 bytes"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', b"\0" * 8, None, "hole"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},'
     b' "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4, None, "alias"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 5, None, "the tensors cover 4"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
     b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4, None, "more than once"),
    (b'{"a": {"dtype": "F32", "shape": [1]}}', b"\0" * 4, None, "missing field data_offsets"),
    (b'{"__metadata__": {"k": 1}}', b"", None, "object of strings"),
    (b'{"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}', b"\0\0", None, "whole number of bytes"),
    (b"{}", b"", 100, "runs past the end"),
    (b"{}", b"", 100_000_001, "exceeds the limit"),
    (b"\xff{}", b"", None, "not valid UTF-8"),
])
def test_invalid_headers_are_refused(tmp_path, header, data, n, fragment):
    d = header_file(tmp_path, header, data, n)
    with pytest.raises(CheckpointError, match=fragment) as e:
        checkpoint_digest(d)
    assert e.value.path.endswith("bad.safetensors")


def test_valid_edge_cases(tmp_path):
    # Empty tensors, scalars, metadata null, space padding and unknown entry fields are fine.
    header = (b'{"__metadata__": null, "e": {"dtype": "BF16", "shape": [0, 3], "data_offsets": [0, 0]}, '
              b'"s": {"dtype": "F64", "shape": [], "data_offsets": [0, 8], "extra": 1}}    ')
    d = header_file(tmp_path, header, b"\0" * 8)
    assert checkpoint_digest(d) == by_hand(d, ["bad.safetensors"])
