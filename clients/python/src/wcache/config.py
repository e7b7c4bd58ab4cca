"""CacheConfig: the identity of the weights a client expects (and a daemon holds)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict

from . import pb

PROTOCOL_VERSION = 1

# Proto field order (field numbers 1..20).
STRING_FIELDS = ("model", "checkpoint_digest", "model_arch", "revision", "dtype", "quantization",
                 "quantization_config_digest")
UINT_FIELDS = ("tp_size", "tp_rank", "pp_size", "pp_rank", "dp_size", "dp_rank", "ep_size", "ep_rank")
TAIL_STRING_FIELDS = ("engine_name", "engine_version", "device_capability")


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

    def validate(self) -> None:
        """Raise ValueError when a field has the wrong type or range:
        strings are str, sizes are 1..2^32-1, ranks < size, extra maps str → str."""
        for name in STRING_FIELDS + TAIL_STRING_FIELDS:
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a str, not {type(getattr(self, name)).__name__}")
        for name in UINT_FIELDS + ("protocol_version",):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
                raise ValueError(f"{name} must be an int in [0, 2^32), not {v!r}")
        for axis in ("tp", "pp", "dp", "ep"):
            size, rank = getattr(self, axis + "_size"), getattr(self, axis + "_rank")
            if size < 1:
                raise ValueError(f"{axis}_size must be at least 1, not {size}")
            if rank >= size:
                raise ValueError(f"{axis}_rank {rank} must be less than {axis}_size {size}")
        if not isinstance(self.extra, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.extra.items()):
            raise ValueError("extra must map str to str")

    def to_proto(self):
        """A wcache.pb.CacheConfig message with these fields."""
        self.validate()
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

