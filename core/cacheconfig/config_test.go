package cacheconfig_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
	configv1 "github.com/wcache/wcache/proto/wcache/config/v1"
	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"
)

// full returns a valid config with every field set.
func full() cacheconfig.Config {
	return cacheconfig.Config{
		Model: "/models/llama", CheckpointDigest: "sha256:" + hex.EncodeToString(make([]byte, 32)),
		ModelArch: "LlamaForCausalLM", Revision: "main", DType: "bf16", Quantization: "fp8",
		QuantizationConfigDigest: "q1",
		TPSize:                   4, TPRank: 1, PPSize: 2, PPRank: 1, DPSize: 3, DPRank: 2, EPSize: 8, EPRank: 7,
		Extra:      map[string]string{"enable_dp_attention": "true", "cp": "2"},
		EngineName: "vllm", EngineVersion: "0.11.0", DeviceCapability: "9.0", ProtocolVersion: 1,
	}
}

func TestDefault(t *testing.T) {
	d := cacheconfig.Default()
	want := cacheconfig.Config{DType: "auto", Quantization: "none", TPSize: 1, PPSize: 1, DPSize: 1, EPSize: 1,
		ProtocolVersion: daemonv1.ProtocolVersion}
	if d.Canonical() != want.Canonical() || d.Extra != nil {
		t.Fatalf("Default() = %+v", d)
	}
	d.Model = "m"
	if err := d.Validate(); err != nil {
		t.Fatalf("Default() with a model is invalid: %v", err)
	}
}

func TestProtoRoundTrip(t *testing.T) {
	c := full()
	p := c.ToProto()
	if p.GetTpRank() != 1 || p.GetEpSize() != 8 || p.GetDtype() != "bf16" || p.GetExtra()["cp"] != "2" || p.GetProtocolVersion() != 1 {
		t.Fatalf("ToProto() = %v", p)
	}
	back := cacheconfig.FromProto(p)
	if back.Canonical() != c.Canonical() || len(cacheconfig.Compare(c, back)) != 0 {
		t.Fatalf("round trip changed the config: %+v", back)
	}
	// The copies are independent of each other.
	p.Extra["cp"] = "4"
	c.Extra["cp"] = "8"
	if back.Extra["cp"] != "2" {
		t.Fatal("FromProto shares the proto's map")
	}
	if cacheconfig.FromProto(nil).Canonical() != (cacheconfig.Config{}).Canonical() {
		t.Fatal("FromProto(nil) is not the zero config")
	}
	if e := cacheconfig.FromProto(&configv1.CacheConfig{Extra: map[string]string{}}).Extra; e != nil {
		t.Fatalf("empty proto map gave %v, want nil", e)
	}
}

func TestCanonicalByHand(t *testing.T) {
	c := cacheconfig.Config{Model: "m", TPSize: 10, Extra: map[string]string{"ké": "v:1"}}
	want := "17:checkpoint_digest0:" + "17:device_capability0:" + "7:dp_rank1:0" + "7:dp_size1:0" +
		"5:dtype0:" + "11:engine_name0:" + "14:engine_version0:" + "7:ep_rank1:0" + "7:ep_size1:0" +
		"9:extra.ké3:v:1" + "5:model1:m" + "10:model_arch0:" + "7:pp_rank1:0" + "7:pp_size1:0" +
		"16:protocol_version1:0" + "12:quantization0:" + "26:quantization_config_digest0:" +
		"8:revision0:" + "7:tp_rank1:0" + "7:tp_size2:10"
	if got := c.Canonical(); got != want {
		t.Fatalf("canonical\n got %q\nwant %q", got, want)
	}
	sum := sha256.Sum256([]byte(want))
	if got := c.Digest(); got != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("digest %s", got)
	}
}

func TestDigestSeparatesConfigs(t *testing.T) {
	base := full()
	seen := map[string]string{base.Digest(): "base"}
	variants := map[string]func(c *cacheconfig.Config){
		"tp_rank":     func(c *cacheconfig.Config) { c.TPRank = 2 },
		"extra value": func(c *cacheconfig.Config) { c.Extra = map[string]string{"enable_dp_attention": "false", "cp": "2"} },
		"extra empty value": func(c *cacheconfig.Config) {
			c.Extra = map[string]string{"enable_dp_attention": "true", "cp": "2", "x": ""}
		},
		"shifted boundary":   func(c *cacheconfig.Config) { c.ModelArch, c.Revision = "LlamaForCausalLMmain", "" },
		"model":              func(c *cacheconfig.Config) { c.Model = "/models/llama/" },
		"no extra":           func(c *cacheconfig.Config) { c.Extra = nil },
		"protocol":           func(c *cacheconfig.Config) { c.ProtocolVersion = 2 },
		"quantization empty": func(c *cacheconfig.Config) { c.Quantization = "" },
	}
	for name, mutate := range variants {
		c := full()
		mutate(&c)
		d := c.Digest()
		if other, dup := seen[d]; dup {
			t.Errorf("%s has the digest of %s", name, other)
		}
		seen[d] = name
	}
	nilExtra, emptyExtra := full(), full()
	nilExtra.Extra, emptyExtra.Extra = nil, map[string]string{}
	if nilExtra.Digest() != emptyExtra.Digest() {
		t.Error("nil and empty extra differ")
	}
}
