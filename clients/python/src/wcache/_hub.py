"""Hugging Face hub ids offline: mirror of core/hubcache.

``resolve_model("org/name")`` (or ``"org/name@revision"``) returns the snapshot
directory of the local hub cache, without network::

    <cache>/models--<org>--<name>/snapshots/<commit>/
    <cache>/models--<org>--<name>/refs/<revision>     (holds <commit>)

<cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
else ~/.cache/huggingface/hub. A model shaped like an id is an id, whatever the
working directory holds (./org/name names that directory); anything else is a
path, returned unchanged.
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
    """A hub id absent from the local hub cache (``looked``: the paths tried;
    ``local_dir``: a directory of the same spelling here, which only "./" + it names)."""

    def __init__(self, model_id: str, revision: str, looked: List[str], why: str, local_dir: str = ""):
        self.model_id, self.revision, self.looked, self.why = model_id, revision, looked, why
        self.local_dir = local_dir
        msg = (f"{model_id}@{revision} is a Hugging Face hub id that is not in the local cache ({why}; looked at "
               f"{', '.join(looked)}); download it first (e.g. huggingface-cli download {model_id})")
        if local_dir:
            msg += (f", or pass ./{local_dir} to load the directory of that name here (a hub id never names a "
                    "relative directory)")
        else:
            msg += " or pass a directory"
        WcacheError.__init__(self, msg)


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
    """The directory model names (see the module docstring; mirror of
    hubcache.Resolve). Raises ModelNotCachedError."""
    if not is_id(model):
        return model
    local = model if os.path.isdir(model) else ""
    ident, _, rev = model.partition("@")
    rev = rev or DEFAULT_REVISION
    cache = cache_dir(getenv)
    repo = os.path.join(cache, "models--" + ident.replace("/", "--"))
    snapshots = os.path.join(repo, "snapshots")
    looked: List[str] = []
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
        raise ModelNotCachedError(ident, rev, looked, why, local) from None
    if not _COMMIT.match(commit):
        raise ModelNotCachedError(ident, rev, looked, f"{ref} holds {commit!r}, not a commit", local)
    d = os.path.join(snapshots, commit)
    looked.append(d)
    if not os.path.isdir(d):
        raise ModelNotCachedError(ident, rev, looked, "the ref names a snapshot that is not there", local)
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
    others, reached only through directories (the symlinks' and their
    targets' included) owned by uid or root and not writable by others
    unless sticky. Mirror of hubcache.TrustedBlob (core/safefile)."""
    blob = blob_sha256(path)
    if blob is None:
        return None
    uid = os.geteuid() if uid is None else uid
    st = _safe_file(path, uid)
    if st is None:
        return None
    return blob[0], st


def _safe_dir(d: str, uid: int) -> bool:
    try:
        st = os.stat(d)
    except OSError:
        return False
    return st.st_uid in (uid, 0) and not (st.st_mode & 0o022 and not st.st_mode & stat_mod.S_ISVTX)


def _safe_file(path: str, uid: int) -> Optional[os.stat_result]:
    """path's stat when it and every directory on its way pass (mirror of
    safefile.Check with no rule), else None."""
    cur, rest, links = "/", os.path.abspath(path).split("/"), 0
    if not _safe_dir("/", uid):
        return None
    while rest:
        name = rest.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, name)
        try:
            st = os.lstat(nxt)
        except OSError:
            return None
        if stat_mod.S_ISLNK(st.st_mode):
            links += 1
            if links > 40:
                return None
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur = "/"
            rest = target.split("/") + rest
            continue
        if any(c not in ("", ".") for c in rest):
            if not stat_mod.S_ISDIR(st.st_mode) or not _safe_dir(nxt, uid):
                return None
            cur = nxt
            continue
        if not stat_mod.S_ISREG(st.st_mode) or st.st_mode & 0o022 or st.st_uid not in (uid, 0):
            return None
        return st
    return None
