package cacheconfig

import (
	"maps"

	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// Config describes the weights a daemon holds or a client expects. Field
// names in errors, diffs and encodings are the proto field names
// (wcache.config.v1.CacheConfig), e.g. "tp_rank", "extra.<key>".
type Config struct {
	// Model is the model path or hub id ("model").
	Model string
	// CheckpointDigest is CheckpointDigest of the weights ("checkpoint_digest").
	CheckpointDigest string
	// ModelArch is the architecture, e.g. "LlamaForCausalLM" ("model_arch").
	ModelArch string
	// Revision is the hub revision or commit ("revision").
	Revision string
	// DType is the weight dtype as the engine uses it ("dtype"); default "auto".
	DType string
	// Quantization is the method ("quantization"); "none" (default) or "" for
	// unquantized, which Compare treats as equal.
	Quantization string
	// QuantizationConfigDigest identifies the quantization configuration
	// ("quantization_config_digest").
	QuantizationConfigDigest string

	// Parallel layout: sizes default to 1, ranks to 0.
	TPSize, TPRank uint32
	PPSize, PPRank uint32
	DPSize, DPRank uint32
	EPSize, EPRank uint32

	// Extra holds engine-specific knobs, compared key by key ("extra.<key>").
	// A nil and an empty map are the same configuration.
	Extra map[string]string

	EngineName, EngineVersion string
	// DeviceCapability is e.g. "9.0" (sm_90) or "gfx942" ("device_capability").
	DeviceCapability string
	// ProtocolVersion is the daemon protocol version the config was made
	// for ("protocol_version"); default daemonv1.ProtocolVersion.
	ProtocolVersion uint32
}

// Default returns the configuration of a single-GPU unquantized model: all
// sizes 1, all ranks 0, DType "auto", Quantization "none" and ProtocolVersion
// daemonv1.ProtocolVersion. Model and CheckpointDigest are empty: Validate
// requires one of them.
func Default() Config {
	return Config{
		DType:           "auto",
		Quantization:    "none",
		TPSize:          1,
		PPSize:          1,
		DPSize:          1,
		EPSize:          1,
		ProtocolVersion: daemonv1.ProtocolVersion,
	}
}

// FromProto converts the wire message; nil gives the zero Config. Extra is
// copied (nil when empty).
func FromProto(p *configv1.CacheConfig) Config {
	if p == nil {
		return Config{}
	}
	return Config{
		Model:                    p.GetModel(),
		CheckpointDigest:         p.GetCheckpointDigest(),
		ModelArch:                p.GetModelArch(),
		Revision:                 p.GetRevision(),
		DType:                    p.GetDtype(),
		Quantization:             p.GetQuantization(),
		QuantizationConfigDigest: p.GetQuantizationConfigDigest(),
		TPSize:                   p.GetTpSize(),
		TPRank:                   p.GetTpRank(),
		PPSize:                   p.GetPpSize(),
		PPRank:                   p.GetPpRank(),
		DPSize:                   p.GetDpSize(),
		DPRank:                   p.GetDpRank(),
		EPSize:                   p.GetEpSize(),
		EPRank:                   p.GetEpRank(),
		Extra:                    cloneExtra(p.GetExtra()),
		EngineName:               p.GetEngineName(),
		EngineVersion:            p.GetEngineVersion(),
		DeviceCapability:         p.GetDeviceCapability(),
		ProtocolVersion:          p.GetProtocolVersion(),
	}
}

// ToProto converts to the wire message. Extra is copied (nil when empty).
func (c Config) ToProto() *configv1.CacheConfig {
	return &configv1.CacheConfig{
		Model:                    c.Model,
		CheckpointDigest:         c.CheckpointDigest,
		ModelArch:                c.ModelArch,
		Revision:                 c.Revision,
		Dtype:                    c.DType,
		Quantization:             c.Quantization,
		QuantizationConfigDigest: c.QuantizationConfigDigest,
		TpSize:                   c.TPSize,
		TpRank:                   c.TPRank,
		PpSize:                   c.PPSize,
		PpRank:                   c.PPRank,
		DpSize:                   c.DPSize,
		DpRank:                   c.DPRank,
		EpSize:                   c.EPSize,
		EpRank:                   c.EPRank,
		Extra:                    cloneExtra(c.Extra),
		EngineName:               c.EngineName,
		EngineVersion:            c.EngineVersion,
		DeviceCapability:         c.DeviceCapability,
		ProtocolVersion:          c.ProtocolVersion,
	}
}

// ParallelLayout is c's parallel layout alone: the tp_*, pp_*, dp_* and
// ep_* fields of c, every other field zero. Compare of two layouts lists
// exactly the layout fields that differ.
func (c Config) ParallelLayout() Config {
	return Config{TPSize: c.TPSize, TPRank: c.TPRank, PPSize: c.PPSize, PPRank: c.PPRank,
		DPSize: c.DPSize, DPRank: c.DPRank, EPSize: c.EPSize, EPRank: c.EPRank}
}

func cloneExtra(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
