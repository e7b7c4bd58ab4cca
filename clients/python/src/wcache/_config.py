"""CacheConfig: the identity of the weights a client expects (and a daemon holds).

The same type, defaults, validation and canonical digest as the Go package
core/cacheconfig (docs/cacheconfig.md); core/cacheconfig/testdata/vectors.json
holds vectors both implementations are tested against.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from . import pb
from ._errors import WcacheError
from ._vocab import normalize_dtype, normalize_quantization

PROTOCOL_VERSION = 1

# Proto field order (field numbers 1..20).
STRING_FIELDS = ("model", "checkpoint_digest", "model_arch", "revision", "dtype", "quantization",
                 "quantization_config_digest")
UINT_FIELDS = ("tp_size", "tp_rank", "pp_size", "pp_rank", "dp_size", "dp_rank", "ep_size", "ep_rank")
TAIL_STRING_FIELDS = ("engine_name", "engine_version", "device_capability")
EXTRA_PREFIX = "extra."
DIGEST_PREFIX = "sha256:"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


# The weights-identity rule (core/cacheconfig/identity.go, docs/cacheconfig.md
# "Weights identity"): where a generation's bytes came from decides which
# fields can change them.
WEIGHTS_FROM_FILES = "files"
WEIGHTS_PUBLISHED = "published"
WEIGHTS_IDENTITY_VERSION = "wcache-weights-identity-v1"


def _keep(_cfg, v):
    return v


def _drop(_cfg, _v):
    return None


def _dp_rank_unless_expert_sharded(cfg, v):
    # Data-parallel replicas hold the same bytes unless experts are sharded.
    return None if cfg.ep_size <= 1 else v


# One row per field (EXTRA_PREFIX for every extra entry): (files, published),
# each returning the value kept, or None to leave the field out. A new field
# is one row here and one in identityRules (Go).
_IDENTITY_RULES = {
    "model": (_drop, _keep),
    "checkpoint_digest": (_keep, _keep),
    "model_arch": (_drop, _keep),
    "revision": (_drop, _keep),
    "dtype": (_drop, lambda _c, v: normalize_dtype(v)),
    "quantization": (_drop, lambda _c, v: normalize_quantization(v)),
    "quantization_config_digest": (_drop, _keep),
    "tp_size": (_drop, _keep),
    "tp_rank": (_drop, _keep),
    "pp_size": (_drop, _keep),
    "pp_rank": (_drop, _keep),
    "dp_size": (_drop, _keep),
    "dp_rank": (_drop, _dp_rank_unless_expert_sharded),
    "ep_size": (_drop, _keep),
    "ep_rank": (_drop, _keep),
    "extra.": (_drop, _keep),
    "engine_name": (_drop, _keep),
    "engine_version": (_drop, _keep),
    "device_capability": (_drop, _keep),
    "protocol_version": (_drop, _drop),
}


class NoWeightsIdentityError(WcacheError, ValueError):
    """The config cannot name its bytes: weights loaded from files without a
    checkpoint_digest, or an unknown kind (Go: ErrNoWeightsIdentity)."""


class InvalidConfigError(WcacheError, ValueError):
    """A CacheConfig that cannot be sent: ``problems`` lists every
    (field, reason), with proto field names as core/cacheconfig.Validate."""

    def __init__(self, problems: List[Tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"cache config: {f}: {r}" for f, r in self.problems))


def _utf8_ok(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True


def _len_prefixed(s: str) -> bytes:
    b = s.encode("utf-8")
    return str(len(b)).encode() + b":" + b


@dataclass
class CacheConfig:
    """The fields of wcache.config.v1.CacheConfig with the Go defaults
    (core/cacheconfig.Default): a single-GPU unquantized model — sizes 1,
    ranks 0, dtype "auto", quantization "none", protocol_version 1.

    The daemon compares every field exactly (model only when either side lacks
    a checkpoint_digest) and answers a mismatch with the differing fields
    (IncompatibleConfigError). Use checkpoint_digest(dir) for
    ``checkpoint_digest`` so the same weights in another directory match.
    """

    model: str = ""
    checkpoint_digest: str = ""
    model_arch: str = ""
    revision: str = ""
    dtype: str = "auto"
    quantization: str = "none"
    quantization_config_digest: str = ""
    tp_size: int = 1
    tp_rank: int = 0
    pp_size: int = 1
    pp_rank: int = 0
    dp_size: int = 1
    dp_rank: int = 0
    ep_size: int = 1
    ep_rank: int = 0
    extra: Dict[str, str] = field(default_factory=dict)
    engine_name: str = ""
    engine_version: str = ""
    device_capability: str = ""
    protocol_version: int = PROTOCOL_VERSION

    def _check_types(self) -> None:
        """Raise InvalidConfigError when a field cannot be encoded at all:
        strings must be str, integers int in [0, 2^32), extra a str → str dict."""
        problems = []
        for name in STRING_FIELDS + TAIL_STRING_FIELDS:
            if not isinstance(getattr(self, name), str):
                problems.append((name, f"must be a str, not {type(getattr(self, name)).__name__}"))
        for name in UINT_FIELDS + ("protocol_version",):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
                problems.append((name, f"must be an int in [0, 2^32), not {v!r}"))
        if not isinstance(self.extra, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.extra.items()):
            problems.append(("extra", "must be a dict of str to str"))
        if problems:
            raise InvalidConfigError(problems)

    def validate(self) -> None:
        """Check the config as core/cacheconfig.Validate does and raise
        InvalidConfigError listing every problem:

        * model or checkpoint_digest must be set;
        * checkpoint_digest, when set, is "sha256:" + 64 lowercase hex digits;
        * tp/pp/dp/ep sizes are at least 1 and each rank is below its size;
        * protocol_version is at least 1;
        * every string is valid UTF-8 and no extra key is empty.

        Type errors (a str where an int belongs, …) are reported first, alone.
        """
        self._check_types()
        problems: List[Tuple[str, str]] = []
        if not self.model and not self.checkpoint_digest:
            problems.append(("model", "neither model nor checkpoint_digest is set"))
        if self.checkpoint_digest and not _DIGEST.match(self.checkpoint_digest):
            problems.append(("checkpoint_digest",
                             f'{self.checkpoint_digest!r} is not "sha256:" followed by 64 lowercase hex digits'))
        for axis in ("tp", "pp", "dp", "ep"):
            size, rank = getattr(self, axis + "_size"), getattr(self, axis + "_rank")
            if size == 0:
                problems.append((f"{axis}_size", "must be at least 1"))
            elif rank >= size:
                problems.append((f"{axis}_rank", f"{rank} is not below {axis}_size {size}"))
        if self.protocol_version == 0:
            problems.append(("protocol_version", "must be at least 1"))
        for name, value in self._fields():
            if not _utf8_ok(name):
                problems.append((name.encode("utf-8", "replace").decode(), "key is not valid UTF-8"))
            elif not _utf8_ok(value):
                problems.append((name, "value is not valid UTF-8"))
        if "" in self.extra:
            problems.append((EXTRA_PREFIX, "extra key is empty"))
        if problems:
            raise InvalidConfigError(problems)

    def _fields(self) -> List[Tuple[str, str]]:
        """Every field with its canonical value (decimal integers, raw
        strings), extra entries as "extra.<key>", sorted by name in UTF-8
        byte order."""
        out = [(name, getattr(self, name)) for name in STRING_FIELDS]
        out += [(name, str(getattr(self, name))) for name in UINT_FIELDS]
        out += [(name, getattr(self, name)) for name in TAIL_STRING_FIELDS]
        out.append(("protocol_version", str(self.protocol_version)))
        out += [(EXTRA_PREFIX + k, v) for k, v in self.extra.items()]
        out.sort(key=lambda f: f[0].encode("utf-8", "surrogatepass"))
        return out

    def canonical(self) -> bytes:
        """The canonical encoding (docs/cacheconfig.md): for every field, zero
        values included, sorted by name, ``<len(name)>:<name><len(value)>:<value>``
        with decimal byte lengths and UTF-8 strings, concatenated."""
        self._check_types()
        return b"".join(_len_prefixed(n) + _len_prefixed(v) for n, v in self._fields())

    def digest(self) -> str:
        """"sha256:" + lowercase hex SHA-256 of canonical(): equal digests mean
        identical configs (compatibility is the daemon's field-by-field check)."""
        return DIGEST_PREFIX + hashlib.sha256(self.canonical()).hexdigest()

    def weights_identity_canonical(self, kind: str) -> bytes:
        """The canonical encoding of the weights identity (Go
        cacheconfig.WeightsIdentityCanonical): the length-prefixed version and
        kind, then each field the rule keeps, in canonical() order, with its
        kept value. Raises NoWeightsIdentityError for an unknown kind or for
        ``files`` without a checkpoint_digest."""
        self._check_types()
        if kind not in (WEIGHTS_FROM_FILES, WEIGHTS_PUBLISHED):
            raise NoWeightsIdentityError(f"no weights identity: unknown weights kind {kind!r}")
        if kind == WEIGHTS_FROM_FILES and not self.checkpoint_digest:
            raise NoWeightsIdentityError("no weights identity: weights loaded from files need a checkpoint_digest")
        col = 0 if kind == WEIGHTS_FROM_FILES else 1
        out = [_len_prefixed(WEIGHTS_IDENTITY_VERSION), _len_prefixed(kind)]
        for name, value in self._fields():
            rule = _IDENTITY_RULES.get(EXTRA_PREFIX if name.startswith(EXTRA_PREFIX) else name)
            kept = value if rule is None else rule[col](self, value)
            if kept is not None:
                out.append(_len_prefixed(name) + _len_prefixed(kept))
        return b"".join(out)

    def weights_identity(self, kind: str) -> str:
        """"sha256:" + hex SHA-256 of weights_identity_canonical(kind): two
        generations with one identity hold the same bytes (up to what a
        checkpoint_digest covers), so one can be filled from the other."""
        return DIGEST_PREFIX + hashlib.sha256(self.weights_identity_canonical(kind)).hexdigest()

    def to_proto(self):
        """A wcache.pb.CacheConfig message with these fields (types checked, not validated)."""
        self._check_types()
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return pb.CacheConfig(extra=dict(self.extra), **values)

    @classmethod
    def from_proto(cls, msg) -> "CacheConfig":
        """The CacheConfig of a wcache.pb.CacheConfig message (every field
        taken as is: an unset proto field is "" or 0, not the dataclass default)."""
        values = {f.name: getattr(msg, f.name) for f in dataclasses.fields(cls) if f.name != "extra"}
        return cls(extra=dict(msg.extra), **values)

    def replace(self, **changes) -> "CacheConfig":
        """A copy with some fields changed (dataclasses.replace)."""
        return dataclasses.replace(self, **changes)

