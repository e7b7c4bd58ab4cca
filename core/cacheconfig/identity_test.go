package cacheconfig_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
)

func identity(t *testing.T, c cacheconfig.Config, kind cacheconfig.WeightsKind) string {
	t.Helper()
	id, err := cacheconfig.WeightsIdentity(c, kind)
	if err != nil {
		t.Fatalf("WeightsIdentity(%s): %v", kind, err)
	}
	return id
}

// TestWeightsIdentityCoversEveryField fails when CacheConfig gains a proto
// field the rule has no row for: add one row to identityRules (and to the
// Python client's _IDENTITY_RULES).
func TestWeightsIdentityCoversEveryField(t *testing.T) {
	rows := cacheconfig.IdentityRuleFields()
	for _, name := range protoFieldNames() {
		if name == "extra" {
			name = cacheconfig.ExtraPrefix
		}
		if !slices.Contains(rows, name) {
			t.Errorf("proto field %q has no weights-identity rule", name)
		}
	}
	if len(rows) != len(protoFieldNames()) {
		t.Errorf("%d rule rows for %d proto fields: %v", len(rows), len(protoFieldNames()), rows)
	}
}

// mutations changes one field each, to a value that differs in bytes.
func mutations() map[string]func(*cacheconfig.Config) {
	return map[string]func(*cacheconfig.Config){
		cacheconfig.FieldModel:                    func(c *cacheconfig.Config) { c.Model = "/other" },
		cacheconfig.FieldCheckpointDigest:         func(c *cacheconfig.Config) { c.CheckpointDigest = "sha256:" + strings.Repeat("1", 64) },
		cacheconfig.FieldModelArch:                func(c *cacheconfig.Config) { c.ModelArch = "Other" },
		cacheconfig.FieldRevision:                 func(c *cacheconfig.Config) { c.Revision = "r2" },
		cacheconfig.FieldDType:                    func(c *cacheconfig.Config) { c.DType = "fp16" },
		cacheconfig.FieldQuantization:             func(c *cacheconfig.Config) { c.Quantization = "awq" },
		cacheconfig.FieldQuantizationConfigDigest: func(c *cacheconfig.Config) { c.QuantizationConfigDigest = "q2" },
		cacheconfig.FieldTPSize:                   func(c *cacheconfig.Config) { c.TPSize = 8 },
		cacheconfig.FieldTPRank:                   func(c *cacheconfig.Config) { c.TPRank = 0 },
		cacheconfig.FieldPPSize:                   func(c *cacheconfig.Config) { c.PPSize = 4 },
		cacheconfig.FieldPPRank:                   func(c *cacheconfig.Config) { c.PPRank = 0 },
		cacheconfig.FieldDPSize:                   func(c *cacheconfig.Config) { c.DPSize = 4 },
		cacheconfig.FieldDPRank:                   func(c *cacheconfig.Config) { c.DPRank = 0 },
		cacheconfig.FieldEPSize:                   func(c *cacheconfig.Config) { c.EPSize = 16 },
		cacheconfig.FieldEPRank:                   func(c *cacheconfig.Config) { c.EPRank = 0 },
		cacheconfig.ExtraPrefix:                   func(c *cacheconfig.Config) { c.Extra = map[string]string{"cp": "4"} },
		cacheconfig.FieldEngineName:               func(c *cacheconfig.Config) { c.EngineName = "sglang" },
		cacheconfig.FieldEngineVersion:            func(c *cacheconfig.Config) { c.EngineVersion = "0.12" },
		cacheconfig.FieldDeviceCapability:         func(c *cacheconfig.Config) { c.DeviceCapability = "8.0" },
		cacheconfig.FieldProtocolVersion:          func(c *cacheconfig.Config) { c.ProtocolVersion = 2 },
	}
}

// TestWeightsIdentityRule changes each field of a config with expert
// parallelism alone and checks which changes move the identity, per kind.
func TestWeightsIdentityRule(t *testing.T) {
	inFiles := []string{cacheconfig.FieldCheckpointDigest}
	notPublished := []string{cacheconfig.FieldProtocolVersion}
	for name, mutate := range mutations() {
		base := full() // EPSize 8: dp_rank counts for published weights
		changed := full()
		mutate(&changed)
		for _, kind := range []cacheconfig.WeightsKind{cacheconfig.WeightsFromFiles, cacheconfig.WeightsPublished} {
			want := slices.Contains(inFiles, name)
			if kind == cacheconfig.WeightsPublished {
				want = !slices.Contains(notPublished, name)
			}
			if got := identity(t, base, kind) != identity(t, changed, kind); got != want {
				t.Errorf("%s: changing %s moves the identity: %v, want %v", kind, name, got, want)
			}
		}
	}
}

func TestWeightsIdentityDataParallelReplicas(t *testing.T) {
	a := full()
	a.EPSize, a.EPRank = 1, 0
	b := a
	b.DPRank = 0
	if identity(t, a, cacheconfig.WeightsPublished) != identity(t, b, cacheconfig.WeightsPublished) {
		t.Error("data-parallel replicas without expert parallelism have different identities")
	}
	a.EPSize, b.EPSize = 2, 2
	if identity(t, a, cacheconfig.WeightsPublished) == identity(t, b, cacheconfig.WeightsPublished) {
		t.Error("with experts sharded, two dp ranks share an identity")
	}
}

func TestWeightsIdentityNormalisesSpellings(t *testing.T) {
	a, b := full(), full()
	a.DType, b.DType = "bfloat16", "torch.bfloat16"
	a.Quantization, b.Quantization = "", "none"
	if identity(t, a, cacheconfig.WeightsPublished) != identity(t, b, cacheconfig.WeightsPublished) {
		t.Error("dtype/quantization spellings of the same value give different identities")
	}
	// Models are kept as given: a different spelling misses, never matches wrongly.
	b = full()
	b.Model = full().Model + "/"
	if identity(t, full(), cacheconfig.WeightsPublished) == identity(t, b, cacheconfig.WeightsPublished) {
		t.Error("model is normalised; the rule keeps it as given")
	}
}

func TestWeightsIdentityKindsDiffer(t *testing.T) {
	c := full()
	if identity(t, c, cacheconfig.WeightsFromFiles) == identity(t, c, cacheconfig.WeightsPublished) {
		t.Error("files and published generations of one config share an identity")
	}
	canon, err := cacheconfig.WeightsIdentityCanonical(c, cacheconfig.WeightsFromFiles)
	want := "26:wcache-weights-identity-v15:files17:checkpoint_digest71:" + c.CheckpointDigest
	if err != nil || canon != want {
		t.Fatalf("files canonical %q (%v), want %q", canon, err, want)
	}
}

func TestWeightsIdentityErrors(t *testing.T) {
	c := full()
	c.CheckpointDigest = ""
	if _, err := cacheconfig.WeightsIdentity(c, cacheconfig.WeightsFromFiles); !errors.Is(err, cacheconfig.ErrNoWeightsIdentity) {
		t.Errorf("files without a checkpoint digest: %v, want ErrNoWeightsIdentity", err)
	}
	if _, err := cacheconfig.WeightsIdentity(c, cacheconfig.WeightsPublished); err != nil {
		t.Errorf("published without a checkpoint digest: %v", err)
	}
	if _, err := cacheconfig.WeightsIdentity(full(), "disk"); !errors.Is(err, cacheconfig.ErrNoWeightsIdentity) {
		t.Errorf("unknown kind: %v, want ErrNoWeightsIdentity", err)
	}
}
