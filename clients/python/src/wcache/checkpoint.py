"""checkpoint_digest: identify a checkpoint's weights by its safetensors headers.

The digest is the one core/cacheconfig.CheckpointDigest computes (see
docs/cacheconfig.md): "sha256:" and the lowercase hex SHA-256 of, for each
file in base-name (byte) order,

    <len(basename)>:<basename><len(header)>:<header>

where header is the file's raw header — the N bytes after the 8-byte length
prefix, padding included — and lengths are decimal byte counts. No tensor
byte is read, so it is cheap even for very large checkpoints, and it does not
depend on the directory: the same files elsewhere give the same digest.

Which files: with ``model.safetensors.index.json``, exactly the shards its
weight_map names (every weight it maps must be in that shard, and no shard may
hold a weight the index maps elsewhere); without one, every ``*.safetensors``
entry of the directory whose name does not start with "." (hidden files never
count). Each header is validated with the reference rules
(size limit, UTF-8 JSON object without repeated keys, known dtypes,
non-negative integer shapes, tensors tiling the data buffer from 0 with no
hole, overlap or trailing byte, byte count = dtype × shape) and a tensor name
in two files is refused, as the Go reader (core/safetensors) does, so that an
engine and a daemon agree on which checkpoints are valid. Errors are
CheckpointError naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat as stat_mod
import struct
import time
from typing import Dict, Iterable, List, Optional, Tuple

from . import dtypes
from ._hub import ModelNotCachedError, resolve_model
from ._errors import CheckpointError

INDEX_FILE_NAME = "model.safetensors.index.json"
SUFFIX = ".safetensors"
MAX_HEADER_SIZE = 100_000_000
MAX_INDEX_SIZE = 100_000_000
_METADATA_KEY = "__metadata__"


class _Duplicate(Exception):
    def __init__(self, key: str):
        self.key = key


def _no_duplicates(pairs):
    out = dict(pairs)
    if len(out) != len(pairs):  # a key twice: find the first repeated (a Python loop only then)
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(k)
            seen.add(k)
    return out


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def _loads_strict(path: str, text: str, what: str):
    """Parse text, the header or the index (what) of path, as strict JSON:
    a key twice, NaN, Infinity or anything else not JSON is a CheckpointError."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except _Duplicate as dup:
        raise CheckpointError(path, f"key {dup.key!r} appears more than once in the {what}") from None
    except ValueError as exc:
        raise CheckpointError(path, f"{what} is not a valid JSON object: {exc}") from None


def _is_uint(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64


def read_header(path: str) -> Tuple[bytes, Dict[str, Tuple[str, List[int], int, int]]]:
    """Read and validate the header of one safetensors file.

    Returns the raw header bytes and name → (dtype, shape, begin, end).
    Raises CheckpointError.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise CheckpointError(path, f"file is {size} bytes, shorter than the 8-byte length prefix")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER_SIZE:
                raise CheckpointError(path, f"header length {n} exceeds the limit of {MAX_HEADER_SIZE} bytes")
            if n + 8 > size:
                raise CheckpointError(path, f"header length {n} runs past the end of a {size}-byte file")
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointError(path, exc.strerror or str(exc)) from exc
    if len(raw) != n:
        raise CheckpointError(path, f"short read of the {n}-byte header")
    tensors = _parse_header(path, raw)
    _check_layout(path, tensors, n, size)
    return raw, tensors


def _parse_header(path: str, raw: bytes) -> Dict[str, Tuple[str, List[int], int, int]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(path, "header is not valid UTF-8") from None
    if not text.startswith("{"):
        raise CheckpointError(path, "header does not start with '{'")
    obj = _loads_strict(path, text, "header")
    if not isinstance(obj, dict):
        raise CheckpointError(path, "header is not a JSON object")
    tensors: Dict[str, Tuple[str, List[int], int, int]] = {}
    for name, entry in obj.items():
        if name == _METADATA_KEY:
            if entry is not None and (not isinstance(entry, dict)
                                      or not all(isinstance(v, str) for v in entry.values())):
                raise CheckpointError(path, f"{_METADATA_KEY} must be an object of strings")
            continue
        if not isinstance(entry, dict):
            raise CheckpointError(path, f"tensor {name!r}: entry must be an object")
        for required in ("dtype", "shape", "data_offsets"):
            if required not in entry:
                raise CheckpointError(path, f"tensor {name!r}: missing field {required}")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in dtypes.BITS:
            raise CheckpointError(path, f"tensor {name!r}: dtype {dtype!r} is not a safetensors dtype")
        if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise CheckpointError(path, f"tensor {name!r}: shape must be an array of non-negative integers")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_uint(o) for o in offsets):
            raise CheckpointError(path, f"tensor {name!r}: data_offsets must be two non-negative integers")
        tensors[name] = (dtype, shape, offsets[0], offsets[1])
    return tensors


def _check_layout(path: str, tensors: Dict[str, Tuple[str, List[int], int, int]], n: int, size: int) -> None:
    end = 0
    for name, (dtype, shape, begin, stop) in sorted(tensors.items(), key=lambda kv: (kv[1][2], kv[1][3], kv[0])):
        if begin != end or stop < begin:
            raise CheckpointError(path, f"tensor {name!r}: data_offsets [{begin}, {stop}] do not start where the "
                                        f"previous tensor ends ({end}): overlap, alias or hole")
        want = dtypes.byte_length(dtype, shape)
        if want is None:
            raise CheckpointError(path, f"tensor {name!r}: {dtype} {shape} is not a whole number of bytes")
        if want >= 2**64:
            raise CheckpointError(path, f"tensor {name!r}: {dtype} {shape} overflows 64 bits")
        if stop - begin != want:
            raise CheckpointError(path, f"tensor {name!r}: {dtype} {shape} is {want} bytes, "
                                        f"data_offsets span {stop - begin}")
        end = stop
    if 8 + n + end != size:
        raise CheckpointError(path, f"the data buffer is {size - 8 - n} bytes, the tensors cover {end}")


def read_index(path: str) -> Dict[str, str]:
    """Parse model.safetensors.index.json and return its weight_map."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INDEX_SIZE + 1)
    except OSError as exc:
        raise CheckpointError(path, exc.strerror or str(exc)) from exc
    if len(data) > MAX_INDEX_SIZE:
        raise CheckpointError(path, f"index is larger than {MAX_INDEX_SIZE} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(path, "index is not valid UTF-8") from None
    obj = _loads_strict(path, text, "index")
    if not isinstance(obj, dict):
        raise CheckpointError(path, "index must be a JSON object")
    weight_map = obj.get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(path, "index has no weight_map object")
    # Checked per distinct shard (a 100k-weight map names a few shards);
    # only a map that fails is walked weight by weight, for the first bad one.
    values = weight_map.values()
    if set(map(type, values)) <= {str} and all(map(_plain_file_name, set(values))):
        return weight_map
    for name, shard in weight_map.items():
        if not isinstance(shard, str):
            raise CheckpointError(path, f"weight {name!r}: shard must be a string")
        if not _plain_file_name(shard):
            raise CheckpointError(path, f"weight {name!r}: shard {shard!r} is not a plain file name "
                                        "in the checkpoint directory")
    return weight_map


def _plain_file_name(name: str) -> bool:
    """Whether name names an entry of a directory itself: not empty, "." or
    "..", no separator, no NUL (the Go rule: safetensors.plainFileName)."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\x00")


def is_checkpoint_file_name(name: str) -> bool:
    """Whether a directory entry counts in a checkpoint without an index: its
    name ends in ".safetensors" and does not start with "." (hidden files,
    such as partial downloads, never count). The Go rule
    (safetensors.IsCheckpointFileName) is the same."""
    return name.endswith(SUFFIX) and not name.startswith(".")


def checkpoint_files(directory: str) -> Tuple[List[str], Optional[Dict[str, str]]]:
    """The files of the checkpoint in directory, sorted by base name, and the
    index's weight map (None without an index)."""
    index_path = os.path.join(directory, INDEX_FILE_NAME)
    if os.path.exists(index_path):
        weight_map = read_index(index_path)
        shards = sorted(set(weight_map.values()), key=lambda s: s.encode("utf-8"))
        if not shards:
            raise CheckpointError(index_path, "weight_map names no shard")
        return [os.path.join(directory, s) for s in shards], weight_map
    try:
        names = [e for e in os.listdir(directory) if is_checkpoint_file_name(e)]
    except OSError as exc:
        raise CheckpointError(directory, exc.strerror or str(exc)) from exc
    if not names:
        raise CheckpointError(directory, f"no {INDEX_FILE_NAME} and no *{SUFFIX} file in the directory")
    names.sort(key=lambda s: s.encode("utf-8", "surrogateescape"))
    return [os.path.join(directory, e) for e in names], None


def model_files(model: Optional[str]) -> Optional[List[str]]:
    """The checkpoint files an attach or a publish for ``model`` proves when
    its caller names none, as the engine integrations find them: model
    itself when it is a directory here, else a hub id's snapshot in the
    local Hugging Face cache (resolve_model, no network); in it, the files
    checkpoint_files lists (the index's shards, or every non-hidden
    *.safetensors; no header is read). Mirror of the Go client's ModelFiles.

    None when model names no local checkpoint (not a directory here, not in
    the hub cache, no safetensors file in it): the daemon then decides by
    its policy. Raises CheckpointError for an index that cannot be read.
    The directory may hold more than a daemon loaded (another rank's
    pre-sharded files): an attach with derived files leaves those out
    (ContentProof.derived); every file the daemon loaded must be among them.
    """
    if not model:
        return None
    try:
        directory = resolve_model(model)
    except ModelNotCachedError:
        return None
    try:
        dst = os.stat(directory)
    except OSError:
        return None
    if not stat_mod.S_ISDIR(dst.st_mode):
        return None
    try:
        ist: Optional[os.stat_result] = os.stat(os.path.join(directory, INDEX_FILE_NAME))
    except OSError:
        ist = None
    key = (_identity(dst), _identity(ist))
    listed = _LISTED.get(directory)
    if listed is not None and listed[0] == key:
        return list(listed[1])
    if ist is None:
        try:
            if not any(is_checkpoint_file_name(e) for e in os.listdir(directory)):
                return None
        except OSError:
            return None
    settled = _settled(key[0]) and _settled(key[1])
    if ist is None:
        files, _ = checkpoint_files(directory)
    else:
        files = _indexed_files(directory, key[1], settled)
    if settled:
        if len(_LISTED) >= _LISTED_MAX:
            _LISTED.clear()
        _LISTED[directory] = (key, tuple(files))
    return list(files)


# model_files' memo, directory -> ((its identity, its index's), files): a
# listing holds while the directory (an entry added, removed or renamed
# changes its mtime) and the index (stat'ed through a symlink) keep their
# identity (device, inode, size, mtime, ctime), so that attaching again in
# one process does not parse a 100k-weight index again. Identities that
# changed less than _SETTLE_NS before being listed are not kept (file times
# move in clock ticks: a change within the tick could leave them equal).
# The Go client keeps the same per Client (core/client/proofcache.go).
_LISTED: Dict[str, tuple] = {}
_LISTED_MAX = 64
_SETTLE_NS = 2_000_000_000


def _indexed_files(directory: str, index: Tuple[int, int, int, int, int], settled: bool) -> List[str]:
    """checkpoint_files(directory) of a directory with an index of identity
    index: the shard list the per-user digest cache keeps for that identity
    (wcache.content.DigestCache.shards), else parsed and, when settled,
    kept there, so that a fresh process attaching again reads no index."""
    from .content import DigestCache, Identity  # noqa: PLC0415 - only a directory with an index needs it

    cache, ident = DigestCache(), Identity(*index)
    names = cache.shards(ident)
    if names is not None and all(map(_plain_file_name, names)):
        return [os.path.join(directory, n) for n in names]
    files, _ = checkpoint_files(directory)
    if settled:
        try:
            cache.store_shards(ident, [os.path.basename(f) for f in files])
        except OSError:
            pass  # a cache that cannot be written: parsed again next time
    return files


def _identity(st: Optional[os.stat_result]) -> Optional[Tuple[int, int, int, int, int]]:
    if st is None:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _settled(ident: Optional[Tuple[int, int, int, int, int]]) -> bool:
    return ident is None or time.time_ns() - max(ident[3], ident[4]) >= _SETTLE_NS


def digest_headers(headers: Iterable[Tuple[str, bytes]]) -> str:
    """The checkpoint digest of (base name, raw header) pairs, sorted by base
    name here; no validation."""
    h = hashlib.sha256()
    for base, raw in sorted(headers, key=lambda p: p[0].encode("utf-8", "surrogateescape")):
        b = base.encode("utf-8", "surrogateescape")
        h.update(str(len(b)).encode() + b":" + b + str(len(raw)).encode() + b":")
        h.update(raw)
    return "sha256:" + h.hexdigest()


def checkpoint_digest(directory: str) -> str:
    """The checkpoint digest of the safetensors checkpoint in directory
    (see the module docstring), or of a hub id ("org/name[@revision]") in the
    local Hugging Face cache (wcache._hub.resolve_model). Raises
    CheckpointError, or ModelNotCachedError for an id absent from the cache."""
    directory = resolve_model(directory)
    files, weight_map = checkpoint_files(directory)
    headers: List[Tuple[str, bytes]] = []
    owner: Dict[str, str] = {}
    for path in files:
        raw, tensors = read_header(path)
        base = os.path.basename(path)
        for name in tensors:
            if name in owner:
                raise CheckpointError(path, f"tensor {name!r} is also present in {owner[name]}")
            owner[name] = path
            if weight_map is not None and name in weight_map and weight_map[name] != base:
                raise CheckpointError(path, f"tensor {name!r} is present in this shard but {INDEX_FILE_NAME} "
                                            f"maps it to {weight_map[name]}")
        headers.append((base, raw))
    if weight_map is not None:
        for name in sorted(weight_map):
            if name not in owner:
                raise CheckpointError(os.path.join(directory, weight_map[name]),
                                      f"{INDEX_FILE_NAME} maps tensor {name!r} to this shard, which does not hold it")
    return digest_headers(headers)
