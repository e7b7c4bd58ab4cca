"""Hugging Face hub ids offline: mirror of core/hubcache.

``resolve_model("org/name")`` (or ``"org/name@revision"``) returns the snapshot
directory of the local hub cache, without network::

    <cache>/models--<org>--<name>/snapshots/<commit>/
    <cache>/models--<org>--<name>/refs/<revision>     (holds <commit>)

<cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
else ~/.cache/huggingface/hub. A path that exists, or that is not shaped like
an id, is returned unchanged.
"""

from __future__ import annotations

import os
import re
import stat as stat_mod
from typing import Callable, List, Optional, Tuple

from ._errors import WcacheError

DEFAULT_REVISION = "main"
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_REV = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_BLOB = re.compile(r"^[0-9a-f]{64}$")


class ModelNotCachedError(WcacheError, FileNotFoundError):
    """A hub id that is neither a local directory nor in the local hub cache (``looked``: the paths tried)."""

    def __init__(self, model_id: str, revision: str, looked: List[str], why: str):
        self.model_id, self.revision, self.looked, self.why = model_id, revision, looked, why
        WcacheError.__init__(self, f"{model_id}@{revision} is neither a local directory nor in the local Hugging "
                                   f"Face cache ({why}; looked at {', '.join(looked)}); download it first "
                                   f"(e.g. huggingface-cli download {model_id}) or pass a directory")


def is_id(model: str) -> bool:
    """Whether model has the form "org/name" or "org/name@revision"."""
    ident, sep, rev = model.partition("@")
    return bool(_ID.match(ident)) and (not sep or (bool(_REV.match(rev)) and ".." not in rev))


def cache_dir(getenv: Optional[Callable[[str], Optional[str]]] = None) -> str:
    """The hub cache directory, as huggingface_hub picks it."""
    get = getenv or os.environ.get
    if get("HF_HUB_CACHE"):
        return str(get("HF_HUB_CACHE"))
    if get("HF_HOME"):
        return os.path.join(str(get("HF_HOME")), "hub")
    if get("XDG_CACHE_HOME"):
        return os.path.join(str(get("XDG_CACHE_HOME")), "huggingface", "hub")
    return os.path.join(get("HOME") or os.path.expanduser("~"), ".cache", "huggingface", "hub")


def resolve_model(model: str, getenv: Optional[Callable[[str], Optional[str]]] = None) -> str:
    """The directory model names (see the module docstring). Raises ModelNotCachedError."""
    if os.path.exists(model) or not is_id(model):
        return model
    ident, _, rev = model.partition("@")
    rev = rev or DEFAULT_REVISION
    cache = cache_dir(getenv)
    repo = os.path.join(cache, "models--" + ident.replace("/", "--"))
    snapshots = os.path.join(repo, "snapshots")
    looked = [model]
    if _COMMIT.match(rev):
        d = os.path.join(snapshots, rev)
        looked.append(d)
        if os.path.isdir(d):
            return d
    ref = os.path.join(repo, "refs", rev)
    looked.append(ref)
    try:
        with open(ref, encoding="ascii") as f:
            commit = f.read().strip()
    except OSError:
        why = "no such ref" if os.path.isdir(repo) else f"no {os.path.basename(repo)} in {cache}"
        raise ModelNotCachedError(ident, rev, looked, why) from None
    if not _COMMIT.match(commit):
        raise ModelNotCachedError(ident, rev, looked, f"{ref} holds {commit!r}, not a commit")
    d = os.path.join(snapshots, commit)
    looked.append(d)
    if not os.path.isdir(d):
        raise ModelNotCachedError(ident, rev, looked, "the ref names a snapshot that is not there")
    return d


def blob_sha256(path: str) -> Optional[Tuple[str, str]]:
    """(the SHA-256 its name claims, the resolved path) when path resolves to
    a hub blob (<cache>/models--<org>--<name>/blobs/<64 hex>), else None.
    Mirror of hubcache.BlobSHA256; the name is only a claim (trusted_blob)."""
    resolved = os.path.realpath(path)
    name, parent = os.path.basename(resolved), os.path.dirname(resolved)
    if not _BLOB.match(name) or os.path.basename(parent) != "blobs" or \
            not os.path.basename(os.path.dirname(parent)).startswith("models--"):
        return None
    return name, resolved


def trusted_blob(path: str, uid: Optional[int] = None) -> Optional[Tuple[str, os.stat_result]]:
    """(the SHA-256 its name claims, its stat) when path resolves to a hub
    blob whose name may be believed without hashing: a regular file owned by
    uid (default: the effective uid) or root, not writable by group or
    others. Mirror of hubcache.TrustedBlob."""
    blob = blob_sha256(path)
    if blob is None:
        return None
    try:
        st = os.stat(blob[1])
    except OSError:
        return None
    uid = os.geteuid() if uid is None else uid
    if not stat_mod.S_ISREG(st.st_mode) or st.st_mode & 0o022 or st.st_uid not in (uid, 0):
        return None
    return blob[0], st
