package cacheconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// WeightsKind says where a generation's bytes came from, which decides
// which CacheConfig fields can change them.
type WeightsKind string

const (
	// WeightsFromFiles: the daemon loaded the checkpoint's files and serves
	// their bytes as stored (never converted); the checkpoint_digest names
	// the files selected, so it alone fixes the bytes.
	WeightsFromFiles WeightsKind = "files"
	// WeightsPublished: an engine published its own post-processed tensors;
	// everything that can steer the engine's post-processing is kept.
	WeightsPublished WeightsKind = "published"
)

// WeightsIdentityVersion starts every weights-identity canonical encoding;
// a change of the rule is a new version.
const WeightsIdentityVersion = "wcache-weights-identity-v1"

// ErrNoWeightsIdentity is returned when a configuration cannot name its
// bytes: a files kind without a checkpoint_digest (a path names different
// files on two hosts, and different files over time), or an unknown kind.
var ErrNoWeightsIdentity = errors.New("no weights identity")

// identityValue decides one field of the identity: the value to keep (the
// canonical value, possibly normalised) or keep false to leave it out.
type identityValue func(c Config, value string) (kept string, keep bool)

// identityRule is one row of the rule: a field name (or ExtraPrefix for
// every extra entry) and its treatment for each kind.
type identityRule struct {
	field            string
	files, published identityValue
}

func keep(_ Config, v string) (string, bool) { return v, true }
func drop(Config, string) (string, bool)     { return "", false }
func normDType(_ Config, v string) (string, bool) {
	return NormalizeDType(v), true
}
func normQuantization(_ Config, v string) (string, bool) {
	return NormalizeQuantization(v), true
}

// dpRankUnlessExpertSharded drops dp_rank when experts are not sharded
// (ep_size ≤ 1): data-parallel replicas then hold the same bytes. With
// expert parallelism the experts a rank holds may follow its dp_rank, so it
// is kept.
func dpRankUnlessExpertSharded(c Config, v string) (string, bool) {
	if c.EPSize <= 1 {
		return "", false
	}
	return v, true
}

// identityRules is the weights-identity rule, one row per CacheConfig field
// (TestWeightsIdentityCoversEveryField fails for a proto field with no
// row). A new field is one row here and one in the Python client
// (clients/python/src/wcache/config.py, _IDENTITY_RULES).
//
// Files: the bytes are the selected files' bytes as stored; the
// checkpoint_digest covers exactly the files selected (whole directory, or
// a rank's pre-sharded files), so every other field is left out: the model
// path, the dtype and quantization the engine will apply, the parallel
// layout (ranks loading the whole directory hold the same bytes), the
// engine, the device and the protocol version.
//
// Published: the bytes are the engine's; only dp_rank (when experts are not
// sharded) and protocol_version are left out, model is kept as given (no
// normalisation: another spelling misses a peer, never fills a wrong one),
// dtype and quantization are normalised.
func identityRules() []identityRule {
	return []identityRule{
		{FieldModel, drop, keep},
		{FieldCheckpointDigest, keep, keep},
		{FieldModelArch, drop, keep},
		{FieldRevision, drop, keep},
		{FieldDType, drop, normDType},
		{FieldQuantization, drop, normQuantization},
		{FieldQuantizationConfigDigest, drop, keep},
		{FieldTPSize, drop, keep},
		{FieldTPRank, drop, keep},
		{FieldPPSize, drop, keep},
		{FieldPPRank, drop, keep},
		{FieldDPSize, drop, keep},
		{FieldDPRank, drop, dpRankUnlessExpertSharded},
		{FieldEPSize, drop, keep},
		{FieldEPRank, drop, keep},
		{ExtraPrefix, drop, keep},
		{FieldEngineName, drop, keep},
		{FieldEngineVersion, drop, keep},
		{FieldDeviceCapability, drop, keep},
		{FieldProtocolVersion, drop, drop},
	}
}

// ruleFor returns the row of a field name; an extra entry's row is
// ExtraPrefix's. A field without a row is kept (the safe default: a
// missing row can only make two daemons miss each other).
func ruleFor(rules []identityRule, name string) (identityRule, bool) {
	key := name
	if strings.HasPrefix(name, ExtraPrefix) {
		key = ExtraPrefix
	}
	for _, r := range rules {
		if r.field == key {
			return r, true
		}
	}
	return identityRule{}, false
}

// WeightsIdentityCanonical returns the canonical encoding of c's weights
// identity for kind: the length-prefixed WeightsIdentityVersion and kind,
// then, for each field the rule keeps (in Canonical's order), the pair
// <len(name)>:<name><len(value)>:<value> with the kept value. It fails with
// ErrNoWeightsIdentity for an unknown kind or a files kind without a
// checkpoint_digest.
func WeightsIdentityCanonical(c Config, kind WeightsKind) (string, error) {
	if kind != WeightsFromFiles && kind != WeightsPublished {
		return "", fmt.Errorf("%w: unknown weights kind %q", ErrNoWeightsIdentity, kind)
	}
	if kind == WeightsFromFiles && c.CheckpointDigest == "" {
		return "", fmt.Errorf("%w: weights loaded from files need a %s", ErrNoWeightsIdentity, FieldCheckpointDigest)
	}
	rules := identityRules()
	b := appendLenPrefixed(nil, WeightsIdentityVersion)
	b = appendLenPrefixed(b, string(kind))
	for _, f := range c.fields() {
		v, ok := f.value, true
		if r, found := ruleFor(rules, f.name); found {
			decide := r.published
			if kind == WeightsFromFiles {
				decide = r.files
			}
			v, ok = decide(c, f.value)
		}
		if ok {
			b = appendLenPrefixed(b, f.name)
			b = appendLenPrefixed(b, v)
		}
	}
	return string(b), nil
}

// WeightsIdentity is "sha256:" + lowercase hex SHA-256 of
// WeightsIdentityCanonical(c, kind): two generations with the same identity
// hold the same bytes (up to what a checkpoint_digest covers: headers, not
// tensor values — the content digest checks those), so one can be filled
// from the other. Errors as WeightsIdentityCanonical.
func WeightsIdentity(c Config, kind WeightsKind) (string, error) {
	canon, err := WeightsIdentityCanonical(c, kind)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(canon))
	return DigestPrefix + hex.EncodeToString(sum[:]), nil
}
