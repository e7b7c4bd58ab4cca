"""CacheConfig: defaults, proto round trip, validation and the canonical encoding."""

from __future__ import annotations

import hashlib

import pytest

import wcache
from wcache import CacheConfig, InvalidConfigError, pb


def test_defaults_are_core_cacheconfig_default():
    c = CacheConfig()
    assert (c.tp_size, c.pp_size, c.dp_size, c.ep_size) == (1, 1, 1, 1)
    assert (c.tp_rank, c.pp_rank, c.dp_rank, c.ep_rank) == (0, 0, 0, 0)
    assert (c.dtype, c.quantization, c.protocol_version) == ("auto", "none", 1)
    assert c.extra == {} and c.model == "" and c.checkpoint_digest == ""
    assert wcache.PROTOCOL_VERSION == 1


def test_proto_round_trip_keeps_every_field():
    c = CacheConfig(model="/m", checkpoint_digest="sha256:" + "a" * 64, model_arch="LlamaForCausalLM",
                    revision="r1", dtype="bf16", quantization="fp8", quantization_config_digest="sha256:q",
                    tp_size=8, tp_rank=7, pp_size=2, pp_rank=1, dp_size=3, dp_rank=2, ep_size=4, ep_rank=3,
                    extra={"attn_dp": "2", "cp": "1"}, engine_name="sglang", engine_version="0.5",
                    device_capability="9.0", protocol_version=1)
    msg = c.to_proto()
    assert isinstance(msg, pb.CacheConfig)
    assert CacheConfig.from_proto(pb.CacheConfig.FromString(msg.SerializeToString())) == c
    # An unset proto field stays unset (no dataclass default sneaks in).
    assert CacheConfig.from_proto(pb.CacheConfig()).tp_size == 0


def test_validate_lists_every_problem():
    bad = CacheConfig(checkpoint_digest="sha256:ABC", tp_size=2, tp_rank=2, pp_size=0, protocol_version=0,
                      extra={"": "x", "ok": "\udc80"})
    with pytest.raises(InvalidConfigError) as e:
        bad.validate()
    fields = [f for f, _ in e.value.problems]
    assert fields == ["checkpoint_digest", "tp_rank", "pp_size", "protocol_version", "extra.ok", "extra."]
    assert isinstance(e.value, ValueError)
    with pytest.raises(InvalidConfigError, match="neither model nor checkpoint_digest"):
        CacheConfig().validate()
    CacheConfig(model="/m").validate()
    CacheConfig(checkpoint_digest="sha256:" + "0" * 64).validate()


def test_types_are_checked_before_encoding():
    with pytest.raises(InvalidConfigError, match="tp_size: must be an int"):
        CacheConfig(model="m", tp_size="2").to_proto()
    with pytest.raises(InvalidConfigError, match="tp_size: must be an int"):
        CacheConfig(model="m", tp_size=True).digest()
    with pytest.raises(InvalidConfigError, match="extra: must be a dict"):
        CacheConfig(model="m", extra={"a": 1}).canonical()


def test_canonical_encoding_by_hand():
    c = CacheConfig(model="/models/llama", tp_size=2, tp_rank=1, extra={"z": "é", "a": ""})
    fields = {
        "model": "/models/llama", "checkpoint_digest": "", "model_arch": "", "revision": "", "dtype": "auto",
        "quantization": "none", "quantization_config_digest": "", "tp_size": "2", "tp_rank": "1",
        "pp_size": "1", "pp_rank": "0", "dp_size": "1", "dp_rank": "0", "ep_size": "1", "ep_rank": "0",
        "engine_name": "", "engine_version": "", "device_capability": "", "protocol_version": "1",
        "extra.z": "é", "extra.a": "",
    }
    want = b""
    for name in sorted(fields):
        v = fields[name].encode()
        want += f"{len(name)}:{name}".encode() + f"{len(v)}:".encode() + v
    assert c.canonical() == want
    assert c.digest() == "sha256:" + hashlib.sha256(want).hexdigest()
    # Lengths are bytes, not characters: "é" is 2.
    assert b"7:extra.z2:\xc3\xa9" in c.canonical()


def test_digest_depends_on_every_field_and_not_on_extra_order():
    base = CacheConfig(model="m", extra={"a": "1", "b": "2"})
    assert base.digest() == CacheConfig(model="m", extra={"b": "2", "a": "1"}).digest()
    seen = {base.digest()}
    for change in [dict(model="m2"), dict(tp_size=2), dict(extra={"a": "1"}), dict(extra={"a": "1", "b": "2", "c": ""}),
                   dict(dtype="bf16"), dict(protocol_version=2), dict(engine_name="x")]:
        d = base.replace(**change).digest()
        assert d not in seen, change
        seen.add(d)
    # Length prefixes keep field boundaries unambiguous.
    assert CacheConfig(model="ab", revision="").digest() != CacheConfig(model="a", revision="b").digest()
