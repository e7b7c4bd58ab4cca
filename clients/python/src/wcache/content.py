"""Content identity: prove that the checkpoint files an engine names hold the bytes a daemon serves.

Mirror of sdk/filedigest (the digest), core/cacheconfig/content.go (policies and
matching) and core/client/digestcache.go (the per-user digest cache); see
docs/cacheconfig.md, "Content identity".

The content digest of a file is a two-level hash tree over its 1 MiB
leaves, and names its algorithm::

    "blake3-tree-1m:" + hex(BLAKE3(b"wcache-content-blake3-v1\\0" + u64le(size) + leaf_0 + … + leaf_{n-1}))
    "sha256-tree-1m:" + hex(SHA-256(b"wcache-content-v1\\0" + u64le(size) + leaf_0 + … + leaf_{n-1}))

with leaf_i = the same hash of bytes [i MiB, min((i+1) MiB, size)). BLAKE3
(the ``blake3`` wheel) is the default where it is installed; SHA-256 tree
digests (the first algorithm, and what this client computes without the
wheel) are still verified: a digest is always checked in its own
algorithm (``algorithm_of``). Without the wheel a BLAKE3 record can be proven
by identity or by a cached digest, not by hashing. A daemon records
it, with the file's identity (device, inode, size, mtime and ctime in ns) at
the end of its load; a client whose file has that identity is proven by one
stat, another by a Hugging Face hub blob name the daemon verified, by the
digest cache or (policy "hash") by hashing the file.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import stat as stat_mod
import struct
import tempfile
import threading
from types import ModuleType
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence

from . import _hub as hub, pb
from ._errors import NoDaemonError, WcacheError

try:  # the blake3 wheel (Rust, SIMD); optional: see the module docstring
    import blake3 as _blake3_mod
    _blake3: Optional[ModuleType] = _blake3_mod
except ImportError:  # pragma: no cover - depends on the environment
    _blake3 = None

LEAF_BYTES = 1 << 20
SHA256_TREE = "sha256-tree-1m"
BLAKE3_TREE = "blake3-tree-1m"
ALGORITHMS = (BLAKE3_TREE, SHA256_TREE)
# The algorithm new digests are computed in: BLAKE3 where the wheel is installed.
DEFAULT_ALGORITHM = BLAKE3_TREE if _blake3 is not None else SHA256_TREE
# The prefix of SHA256_TREE digests, public for callers that match on it.
PREFIX = SHA256_TREE + ":"
_DOMAINS = {SHA256_TREE: b"wcache-content-v1\x00", BLAKE3_TREE: b"wcache-content-blake3-v1\x00"}

POLICY_IDENTITY = "identity"
POLICY_HASH = "hash"
POLICY_HEADERS = "headers"
POLICIES = (POLICY_IDENTITY, POLICY_HASH, POLICY_HEADERS)
DEFAULT_DAEMON_POLICIES = (POLICY_IDENTITY, POLICY_HASH)

_DIGEST_RE = re.compile(r"^(" + "|".join(re.escape(a) for a in ALGORITHMS) + r"):[0-9a-f]{64}$")


class UnsupportedAlgorithmError(WcacheError):
    """A digest's algorithm this client cannot compute (unknown, or BLAKE3 without the blake3 wheel)."""


def algorithm_of(digest: str) -> str:
    """The algorithm a content digest names; ValueError for anything that is not a digest of a known algorithm."""
    m = _DIGEST_RE.match(digest)
    if not m:
        raise ValueError(f"{digest!r} is not a content digest of a known algorithm ({', '.join(ALGORITHMS)})")
    return m.group(1)


def can_compute(algorithm: str) -> bool:
    """Whether this client can hash in algorithm (BLAKE3 needs the blake3 wheel)."""
    return algorithm == SHA256_TREE or (algorithm == BLAKE3_TREE and _blake3 is not None)


def _hasher(algorithm: str) -> Callable[..., object]:
    """The hash constructor of algorithm (called with the bytes; .digest() of it is the leaf)."""
    if algorithm == SHA256_TREE:
        return hashlib.sha256
    if algorithm == BLAKE3_TREE:
        if _blake3 is None:
            raise UnsupportedAlgorithmError(f"content digest {algorithm}: the blake3 module is not installed "
                                            f"(pip install blake3)")
        return _blake3.blake3
    raise UnsupportedAlgorithmError(f"unknown content digest algorithm {algorithm!r}")


class Identity(NamedTuple):
    """A file's identity: device, inode, size, mtime and ctime in ns (stat, following symlinks)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> "Identity":
        return cls(int(st.st_dev), int(st.st_ino), int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns))


class ContentMismatchError(WcacheError):
    """The client's file ``name`` (at ``client_path``) holds other bytes than the daemon serves."""

    def __init__(self, name: str, daemon: str, client: str, client_path: str = ""):
        self.name, self.daemon, self.client, self.client_path = name, daemon, client, client_path
        if not daemon:
            msg = f"content mismatch: {name} ({client_path}) is not among the daemon's files"
        elif not client:
            msg = f"content mismatch: the daemon's file {name} is not among the client's"
        else:
            msg = (f"content mismatch: {name} ({client_path}) holds other bytes than the daemon serves: "
                   f"daemon {daemon}, client {client}")
        super().__init__(msg)


class ContentUnknownError(NoDaemonError):
    """The policy could not prove the files without reading them: treat as a miss and load from disk."""

    def __init__(self, name: str, client_path: str, why: str):
        self.name, self.client_path, self.why = name, client_path, why
        WcacheError.__init__(self, f"content not proven: {name} ({client_path}): {why}" if name
                             else f"content not proven: {why}")
        self.socket_path, self.device_uuid = "", None


class PolicyRefusedError(WcacheError):
    """The daemon does not let its clients use this content policy."""


def parse_policy(policy: Optional[str]) -> str:
    """Validate a policy name; None or "" is "identity"."""
    if not policy:
        return POLICY_IDENTITY
    p = policy.strip().lower()
    if p not in POLICIES:
        raise ValueError(f"content policy {policy!r}: want identity, hash or headers")
    return p


def digest_bytes(data: bytes, algorithm: Optional[str] = None) -> str:
    """The content digest of data, a whole file's bytes, in algorithm (default DEFAULT_ALGORITHM)."""
    algorithm = algorithm or DEFAULT_ALGORITHM
    h = _hasher(algorithm)
    view = memoryview(data)
    leaves = [h(view[o:o + LEAF_BYTES]).digest() for o in range(0, len(data), LEAF_BYTES)]
    return _root(algorithm, len(data), leaves)


def _root(algorithm: str, size: int, leaves: Sequence[bytes]) -> str:
    return algorithm + ":" + _hasher(algorithm)(_DOMAINS[algorithm] + struct.pack("<Q", size) + b"".join(leaves)).hexdigest()


def digest_file(path: str, workers: int = 0, progress: Optional[Callable[[int, int], None]] = None,
                size: Optional[int] = None, algorithm: Optional[str] = None) -> str:
    """The content digest of the file at path in algorithm (default DEFAULT_ALGORITHM), read once by
    ``workers`` threads (hashlib and blake3 release the GIL while they hash a leaf).

    progress(done, total) is called as leaves are hashed. A file shorter than
    ``size`` (default: its size when opened) raises OSError;
    UnsupportedAlgorithmError for an algorithm this client cannot compute.
    """
    algorithm = algorithm or DEFAULT_ALGORITHM
    hasher = _hasher(algorithm)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        if size is None:
            size = st.st_size
        n = (size + LEAF_BYTES - 1) // LEAF_BYTES
        leaves: List[bytes] = [b""] * n
        workers = workers or min(8, os.cpu_count() or 1)
        lock = threading.Lock()
        done = [0]

        def leaf(i: int) -> None:
            off = i * LEAF_BYTES
            want = min(LEAF_BYTES, size - off)
            data = os.pread(fd, want, off)
            while len(data) < want:
                more = os.pread(fd, want - len(data), off + len(data))
                if not more:
                    raise OSError(f"content digest: {path} ends at {off + len(data)}, expected {size} bytes")
                data += more
            leaves[i] = hasher(data).digest()
            if progress is not None:
                with lock:
                    done[0] += want
                    progress(done[0], size)

        if n:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, n)) as pool:
                for f in [pool.submit(leaf, i) for i in range(n)]:
                    f.result()
        return _root(algorithm, size, leaves)
    finally:
        os.close(fd)


# The digest cache's entry of an index's shard list: "<identity>.shards",
# JSON, at most MAX_SHARDS_ENTRY bytes (no digest algorithm is named so).
SHARDS_SUFFIX = ".shards"
MAX_SHARDS_ENTRY = 1 << 20


class DigestCache:
    """Per-user digest cache keyed by identity, private to ``uid`` (default: the effective uid).

    Same layout and trust rules as the Go client's (core/client/digestcache.go):
    one file per identity and algorithm in ``directory`` (default
    $XDG_CACHE_HOME/wcache/digests, else ~/.cache/wcache/digests): the SHA-256
    tree digest's entry is named by the identity alone (the form that
    clients without BLAKE3 write and read), another algorithm's by the
    identity, a dot and the algorithm; an entry or directory not owned by uid, writable by group or
    others, or a symlink, is ignored.
    """

    def __init__(self, directory: Optional[str] = None, uid: Optional[int] = None):
        if directory is None:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            directory = os.path.join(base, "wcache", "digests")
        self.directory = directory
        self.uid = os.geteuid() if uid is None else uid

    @staticmethod
    def entry_name(ident: Identity, algorithm: str = SHA256_TREE) -> str:
        name = "-".join(format(v & 0xFFFFFFFFFFFFFFFF, "x") for v in ident)
        return name if algorithm == SHA256_TREE else name + "." + algorithm

    def _private(self, st: os.stat_result) -> bool:
        return st.st_uid == self.uid and not (st.st_mode & 0o022)

    def lookup(self, ident: Identity, algorithm: Optional[str] = None) -> Optional[str]:
        """The digest cached for ident in algorithm; None: in the first of ALGORITHMS cached."""
        if algorithm is None:
            for a in ALGORITHMS:
                d = self.lookup(ident, a)
                if d is not None:
                    return d
            return None
        d = self._read(self.entry_name(ident, algorithm), 256)
        m = _DIGEST_RE.match(d.strip()) if d is not None else None
        return d.strip() if m and m.group(1) == algorithm else None

    def _read(self, name: str, limit: int) -> Optional[str]:
        """The text of entry name (at most limit bytes), or None when it is
        missing or not to be trusted (the class's rules)."""
        try:
            dst = os.lstat(self.directory)
            if not stat_mod.S_ISDIR(dst.st_mode) or not self._private(dst):
                return None
            fd = os.open(os.path.join(self.directory, name),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat_mod.S_ISREG(st.st_mode) or not self._private(st):
                return None
            return os.read(fd, limit).decode("utf-8", "replace")
        finally:
            os.close(fd)

    def shards(self, index: Identity) -> Optional[List[str]]:
        """The shard names cached for the checkpoint index of identity index
        (checkpoint.model_files: a fresh process attaching again need not
        parse a 100k-weight index), or None."""
        text = self._read(self.entry_name(index) + SHARDS_SUFFIX, MAX_SHARDS_ENTRY)
        try:
            names = json.loads(text) if text is not None else None
        except ValueError:
            return None
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            return None
        return names

    def store_shards(self, index: Identity, names: Sequence[str]) -> None:
        """Record the shard names of the index of identity index."""
        self._write(self.entry_name(index) + SHARDS_SUFFIX, json.dumps(list(names)) + "\n")

    def store(self, ident: Identity, digest: str) -> None:
        """Record digest for ident, in the entry of the digest's algorithm."""
        self._write(self.entry_name(ident, algorithm_of(digest)), digest + "\n")

    def _write(self, name: str, text: str) -> None:
        """Write entry name atomically (a temporary file renamed into place),
        creating the directory 0700; raises OSError when it is not private."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        dst = os.lstat(self.directory)
        if not stat_mod.S_ISDIR(dst.st_mode) or not self._private(dst):
            raise OSError(f"digest cache {self.directory} is not a directory private to uid {self.uid}")
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            os.write(fd, text.encode("utf-8"))
            os.close(fd)
            os.rename(tmp, os.path.join(self.directory, name))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


class FileContent(NamedTuple):
    """A daemon's record of one source file.

    sha256: the content's plain SHA-256 (hex) when the daemon verified that
    the file is a Hugging Face hub blob of that name, else "".
    """

    name: str
    digest: str
    path: str
    identity: Identity
    sha256: str = ""


def files_from_proto(messages: Iterable, sha256: Iterable = ()) -> List[FileContent]:
    """The FileContent records of a Manifest's or StatusResponse's ``files``,
    with the hub blob names of its ``file_sha256`` (matched by name)."""
    sums = {s.name: s.sha256 for s in sha256}
    return [FileContent(m.name, m.digest, m.path, Identity(int(m.dev), int(m.ino), int(m.size), int(m.mtime_ns),
                                                           int(m.ctime_ns)), sums.get(m.name, ""))
            for m in messages]


def _hub_blob_proof(rec: FileContent, path: str, ident: Identity) -> bool:
    """Whether the client's file is a trusted hub blob (wcache.hub.trusted_blob)
    named by the SHA-256 the daemon verified for rec: the same content."""
    if not rec.sha256:
        return False
    blob = hub.trusted_blob(path)
    return blob is not None and blob[0] == rec.sha256 and Identity.of(blob[1]) == ident


def _hash_and_cache(name: str, path: str, ident: Identity, cache: Optional[DigestCache],
                    progress: Optional[Callable[[str, int, int], None]], workers: int,
                    algorithm: Optional[str] = None) -> str:
    """The digest in algorithm (default DEFAULT_ALGORITHM) of the file at path, whose identity is
    ident: hashed (progress(name, done, total)), checked to have kept ident meanwhile, and
    stored in cache (a cache that cannot be written is not fatal: the next
    run hashes again)."""
    digest = digest_file(path, workers, (lambda d, t: progress(name, d, t)) if progress else None, size=ident.size,
                         algorithm=algorithm)
    if Identity.of(os.stat(path)) != ident:
        raise WcacheError(f"content of {path}: the file changed while it was hashed")
    if cache is not None:
        try:
            cache.store(ident, digest)
        except OSError:
            pass
    return digest


class SourceFiles:
    """The checkpoint files a publisher loads its weights from, each with the identity it had when named.

    Create it before the engine reads the files; records() then gives the
    content a publish carries (PublishBegin.files): each file's digest, from
    the per-user digest cache or by hashing it once (cached afterwards), and
    the identity, checked to still be the one taken here, so that bytes
    loaded in between are the files' bytes. Mirror of the Go client's
    OpenCheckpointPublication. Raises ValueError for two files of one base
    name (clients match files by name), OSError for a file that is missing
    or not a regular file.
    """

    def __init__(self, files: Iterable[str]):
        self.files: List[tuple] = []
        seen = set()
        for p in files:
            p = os.path.abspath(os.fspath(p))
            st = os.stat(p)
            if not stat_mod.S_ISREG(st.st_mode):
                raise OSError(f"{p} is not a regular file")
            name = os.path.basename(p)
            if name in seen:
                raise ValueError(f"two source files named {name!r}: clients match files by base name")
            seen.add(name)
            self.files.append((p, Identity.of(st)))

    def records(self, cache: Optional[DigestCache] = None, use_cache: bool = True,
                progress: Optional[Callable[[str, int, int], None]] = None, workers: int = 0) -> List[FileContent]:
        """The FileContent records of the files, sorted by name.

        Raises WcacheError naming a file whose identity changed since it
        was named (or while it was hashed): its bytes are not one content.
        """
        if cache is None and use_cache:
            cache = DigestCache()
        out = []
        for path, ident in self.files:
            name = os.path.basename(path)
            if Identity.of(os.stat(path)) != ident:
                raise WcacheError(f"content of {path}: the file changed since the engine named it (before its load)")
            digest = cache.lookup(ident) if cache is not None else None
            if digest is None:
                digest = _hash_and_cache(name, path, ident, cache, progress, workers)
            out.append(FileContent(name, digest, path, ident))
        return sorted(out, key=lambda r: r.name)


def files_to_proto(records: Iterable[FileContent]) -> List[object]:
    """The wire messages (wcache.pb.FileContent) of records."""
    return [pb.FileContent(name=r.name, digest=r.digest, path=r.path, dev=r.identity.dev, ino=r.identity.ino,
                           size=r.identity.size, mtime_ns=r.identity.mtime_ns, ctime_ns=r.identity.ctime_ns)
            for r in records]


def identities_match(records: Sequence[FileContent], files: Sequence[str]) -> bool:
    """Whether files are, by name and identity, exactly the files of records: one stat per file, no read.

    The cheap test an engine runs before anything else (e.g. before parsing
    headers for checkpoint_digest): True means the daemon's digests hold.
    """
    if not records or len(records) != len(files):
        return False
    by_name = {r.name: r for r in records}
    for p in files:
        r = by_name.get(os.path.basename(p))
        if r is None:
            return False
        try:
            if Identity.of(os.stat(p)) != r.identity or r.identity == Identity(0, 0, 0, 0, 0):
                return False
        except OSError:
            return False
    return True


class ContentProof:
    """What a client knows about its own files before it attaches: the one
    place where the proof an attach carries (AttachRequest.content) is built,
    and where the client checks a manifest against it. Mirror of the Go
    client's contentProof.

    Building it costs one stat, one digest-cache lookup and one realpath (a
    trusted hub blob?) per file; nothing is read or hashed unless the policy
    is "hash" and the daemon (or an older daemon's manifest) asks for it.
    Under "headers" nothing is looked at. Raises OSError for a missing file,
    ValueError for two files of one base name (files match by name).
    """

    def __init__(self, files: Iterable[str], policy: str = POLICY_IDENTITY, cache: Optional[DigestCache] = None,
                 use_cache: bool = True, progress: Optional[Callable[[str, int, int], None]] = None,
                 workers: int = 0, derived: bool = False):
        self.policy = parse_policy(policy)
        # derived: the caller named no files, they were listed from the
        # model's directory; files the daemon did not load are left out.
        self.derived = derived
        self.cache = (cache if cache is not None else DigestCache()) if use_cache else None
        self.progress, self.workers = progress, workers
        # name -> [path, Identity, digest ("" unknown)]
        self.files: Dict[str, list] = {}
        self.blobs: Dict[str, str] = {}
        if self.policy == POLICY_HEADERS:
            return
        for p in files:
            p = os.fspath(p)
            name = os.path.basename(p)
            if name in self.files:
                raise ValueError(f"two files named {name!r}: clients match files by base name")
            ident = Identity.of(os.stat(p))
            digest = self.cache.lookup(ident) if self.cache is not None else None
            blob = hub.trusted_blob(p)
            if blob is not None and Identity.of(blob[1]) == ident:
                self.blobs[name] = blob[0]
            self.files[name] = [p, ident, digest or ""]

    def to_proto(self):
        """The AttachRequest.content of this proof."""
        files = [pb.FileContent(name=n, digest=d, path=p, dev=i.dev, ino=i.ino, size=i.size, mtime_ns=i.mtime_ns,
                                ctime_ns=i.ctime_ns) for n, (p, i, d) in sorted(self.files.items())]
        blobs = [pb.FileSHA256(name=n, sha256=s) for n, s in sorted(self.blobs.items())]
        return pb.ContentProof(policy=self.policy, files=files, blobs=blobs, derived=self.derived)

    def hash(self, names: Iterable[str], algorithm: Optional[str] = None) -> bool:
        """Hash (and cache) the files named that have no digest in algorithm
        (default DEFAULT_ALGORITHM) yet; whether any was hashed. Raises
        ContentUnknownError when this client cannot compute algorithm (the
        blake3 module missing)."""
        algorithm = algorithm or DEFAULT_ALGORITHM
        hashed = False
        for name in names:
            entry = self.files.get(name)
            if entry is None or (entry[2] and algorithm_of(entry[2]) == algorithm):
                continue
            cached = self.cache.lookup(entry[1], algorithm) if self.cache is not None else None
            if cached is None and not can_compute(algorithm):
                raise ContentUnknownError(name, entry[0], f"the daemon's digest is {algorithm}, which this client "
                                                          f"cannot compute: the blake3 module is not installed "
                                                          f"(pip install blake3)")
            entry[2] = cached or _hash_and_cache(name, entry[0], entry[1], self.cache, self.progress, self.workers,
                                                 algorithm)
            hashed = True
        return hashed

    def check(self, records: Sequence[FileContent], allowed: Sequence[str] = ()) -> None:
        """Whether the daemon's records (its FileContent list) prove the files.

        Against a daemon that checked the proof itself this makes no system
        call; against an older daemon it is the only check (and "hash" may
        hash). allowed: the daemon's content policies (empty: identity and
        hash). No files where allowed excludes "headers" is a
        ContentUnknownError. Raises PolicyRefusedError, ContentMismatchError
        (the first differing file by name) or ContentUnknownError (a
        NoDaemonError: load from disk).
        """
        allowed = tuple(allowed) or DEFAULT_DAEMON_POLICIES
        if self.policy not in allowed:
            raise PolicyRefusedError(f"content policy refused by the daemon: {self.policy!r} (the daemon allows "
                                     f"{list(allowed)})")
        if self.policy == POLICY_HEADERS:
            return
        if not self.files:
            if POLICY_HEADERS in allowed:
                return
            raise ContentUnknownError("", "", f"no checkpoint files named or found for the model, and the daemon "
                                              f"allows {list(allowed)}, not \"headers\"")
        if not records:
            raise ContentUnknownError("", "", "the daemon recorded no content digest (an older daemon, or a publish "
                                              "without one)")
        daemon = {r.name: r for r in records}
        mine = {n for n in self.files if n in daemon or not self.derived}
        unproven = []
        for name in sorted(set(daemon) | mine):
            if name not in daemon:
                raise ContentMismatchError(name, "", "present", self.files[name][0])
            if name not in mine:
                raise ContentMismatchError(name, daemon[name].digest, "")
            if self.files[name][1] != daemon[name].identity or daemon[name].identity == Identity(0, 0, 0, 0, 0):
                unproven.append(name)
        for name in unproven:
            path, ident, digest = self.files[name]
            rec = daemon[name]
            if ident.size != rec.identity.size:
                raise ContentMismatchError(name, rec.digest, f"({ident.size} bytes, the daemon's file has "
                                                             f"{rec.identity.size})", path)
            if rec.sha256 and self.blobs.get(name) == rec.sha256:
                continue
            # The client's digest in the algorithm of the daemon's record (an
            # older daemon's or publish's is a SHA-256 tree).
            try:
                algorithm = algorithm_of(rec.digest)
            except ValueError:
                raise ContentUnknownError(name, path, f"the daemon's digest {rec.digest!r} is of no algorithm this "
                                                      f"client knows") from None
            if digest and algorithm_of(digest) != algorithm:
                digest = self.cache.lookup(ident, algorithm) if self.cache is not None else None
            if not digest:
                if self.policy != POLICY_HASH:
                    raise ContentUnknownError(name, path, "not the file the daemon loaded and no cached digest "
                                                          "(policy \"identity\"; \"hash\" hashes it)")
                self.hash([name], algorithm)
                digest = self.files[name][2]
            if digest != rec.digest:
                raise ContentMismatchError(name, rec.digest, digest, path)


def prove_content(records: Sequence[FileContent], files: Sequence[str], policy: str = POLICY_IDENTITY,
                  allowed: Sequence[str] = (), cache: Optional[DigestCache] = None, use_cache: bool = True,
                  progress: Optional[Callable[[str, int, int], None]] = None, workers: int = 0) -> None:
    """Check that files hold the daemon's bytes (records: its FileContent list) under policy.

    allowed: the daemon's content policies (empty: identity and hash).
    Raises PolicyRefusedError, ContentMismatchError (the first differing file
    by name) or ContentUnknownError (a NoDaemonError: load from disk; also
    for no files where the daemon does not allow "headers").
    """
    policy = parse_policy(policy)
    allowed = tuple(allowed) or DEFAULT_DAEMON_POLICIES
    if policy not in allowed:
        raise PolicyRefusedError(f"content policy refused by the daemon: {policy!r} (the daemon allows "
                                 f"{list(allowed)})")
    ContentProof(files, policy, cache, use_cache, progress, workers).check(records, allowed)
