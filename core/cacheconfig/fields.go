package cacheconfig

import (
	"cmp"
	"slices"
	"strconv"
)

// Proto field names of the fixed fields, and the prefix of extra entries.
const (
	FieldModel                    = "model"
	FieldCheckpointDigest         = "checkpoint_digest"
	FieldModelArch                = "model_arch"
	FieldRevision                 = "revision"
	FieldDType                    = "dtype"
	FieldQuantization             = "quantization"
	FieldQuantizationConfigDigest = "quantization_config_digest"
	FieldTPSize                   = "tp_size"
	FieldTPRank                   = "tp_rank"
	FieldPPSize                   = "pp_size"
	FieldPPRank                   = "pp_rank"
	FieldDPSize                   = "dp_size"
	FieldDPRank                   = "dp_rank"
	FieldEPSize                   = "ep_size"
	FieldEPRank                   = "ep_rank"
	FieldEngineName               = "engine_name"
	FieldEngineVersion            = "engine_version"
	FieldDeviceCapability         = "device_capability"
	FieldProtocolVersion          = "protocol_version"
	// ExtraPrefix prefixes each extra key: extra["attn_dp"] is the field
	// "extra.attn_dp".
	ExtraPrefix = "extra."
)

// field is one named value of the canonical form.
type field struct {
	name  string
	value string
}

// fields lists every field of c with its canonical value (decimal for
// integers, raw UTF-8 for strings), extra entries as "extra.<key>", sorted
// by name in byte order.
func (c Config) fields() []field {
	u := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	out := make([]field, 0, 19+len(c.Extra))
	// In name order (byte order), so that only extra entries need a sort.
	out = append(out,
		field{FieldCheckpointDigest, c.CheckpointDigest},
		field{FieldDeviceCapability, c.DeviceCapability},
		field{FieldDPRank, u(c.DPRank)},
		field{FieldDPSize, u(c.DPSize)},
		field{FieldDType, c.DType},
		field{FieldEngineName, c.EngineName},
		field{FieldEngineVersion, c.EngineVersion},
		field{FieldEPRank, u(c.EPRank)},
		field{FieldEPSize, u(c.EPSize)},
		field{FieldModel, c.Model},
		field{FieldModelArch, c.ModelArch},
		field{FieldPPRank, u(c.PPRank)},
		field{FieldPPSize, u(c.PPSize)},
		field{FieldProtocolVersion, u(c.ProtocolVersion)},
		field{FieldQuantization, c.Quantization},
		field{FieldQuantizationConfigDigest, c.QuantizationConfigDigest},
		field{FieldRevision, c.Revision},
		field{FieldTPRank, u(c.TPRank)},
		field{FieldTPSize, u(c.TPSize)},
	)
	for k, v := range c.Extra {
		out = append(out, field{ExtraPrefix + k, v})
	}
	if len(c.Extra) > 0 {
		slices.SortFunc(out, func(a, b field) int { return cmp.Compare(a.name, b.name) })
	}
	return out
}
