package cacheconfig_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
)

func TestCompareEqual(t *testing.T) {
	if d := cacheconfig.Compare(full(), full()); d != nil {
		t.Fatalf("diffs of equal configs: %v", d)
	}
	if err := cacheconfig.Check(full(), full()); err != nil {
		t.Fatal(err)
	}
}

func TestCompareEveryField(t *testing.T) {
	daemon := full()
	client := cacheconfig.Config{
		Model: "/models/llama", CheckpointDigest: "sha256:" + "11111111111111111111111111111111" + "11111111111111111111111111111111",
		ModelArch: "Qwen2ForCausalLM", Revision: "v2", DType: "fp16", Quantization: "awq",
		QuantizationConfigDigest: "q2",
		TPSize:                   5, TPRank: 2, PPSize: 3, PPRank: 2, DPSize: 4, DPRank: 3, EPSize: 9, EPRank: 8,
		Extra:      map[string]string{"enable_dp_attention": "false", "new": ""},
		EngineName: "sglang", EngineVersion: "0.5", DeviceCapability: "8.0", ProtocolVersion: 2,
	}
	want := []cacheconfig.FieldDiff{
		{"checkpoint_digest", daemon.CheckpointDigest, client.CheckpointDigest},
		{"device_capability", "9.0", "8.0"},
		{"dp_rank", "2", "3"},
		{"dp_size", "3", "4"},
		{"dtype", "bf16", "fp16"},
		{"engine_name", "vllm", "sglang"},
		{"engine_version", "0.11.0", "0.5"},
		{"ep_rank", "7", "8"},
		{"ep_size", "8", "9"},
		{"extra.cp", "2", cacheconfig.Absent},
		{"extra.enable_dp_attention", "true", "false"},
		{"extra.new", cacheconfig.Absent, ""},
		{"model_arch", "LlamaForCausalLM", "Qwen2ForCausalLM"},
		{"pp_rank", "1", "2"},
		{"pp_size", "2", "3"},
		{"protocol_version", "1", "2"},
		{"quantization", "fp8", "awq"},
		{"quantization_config_digest", "q1", "q2"},
		{"revision", "main", "v2"},
		{"tp_rank", "1", "2"},
		{"tp_size", "4", "5"},
	}
	if got := cacheconfig.Compare(daemon, client); !reflect.DeepEqual(got, want) {
		t.Fatalf("diffs\n got %v\nwant %v", got, want)
	}
	err := cacheconfig.Check(daemon, client)
	var me *cacheconfig.MismatchError
	if !errors.As(err, &me) || !errors.Is(err, cacheconfig.ErrMismatch) || len(me.Diffs) != len(want) {
		t.Fatalf("Check = %v", err)
	}
}

func TestCompareModelAndDigest(t *testing.T) {
	withModel := func(model, digest string) cacheconfig.Config {
		c := full()
		c.Model, c.CheckpointDigest = model, digest
		return c
	}
	d1 := "sha256:" + "aa00000000000000000000000000000000000000000000000000000000000000"
	d2 := "sha256:" + "bb00000000000000000000000000000000000000000000000000000000000000"
	cases := []struct {
		name           string
		daemon, client cacheconfig.Config
		want           []cacheconfig.FieldDiff
	}{
		{"same digest, other directory", withModel("/a/llama", d1), withModel("/b/llama", d1), nil},
		{"other digest, same directory", withModel("/a/llama", d1), withModel("/a/llama", d2),
			[]cacheconfig.FieldDiff{{"checkpoint_digest", d1, d2}}},
		{"client without digest: model decides", withModel("/a/llama/", d1), withModel("/a/./x/../llama", ""), nil},
		{"daemon without digest: model decides", withModel("/a/llama", ""), withModel("/b/llama", d1),
			[]cacheconfig.FieldDiff{{"model", "/a/llama", "/b/llama"}}},
		{"hub ids", withModel("org/name", ""), withModel("org/name/", ""), nil},
		{"hub ids differ", withModel("org/name", ""), withModel("org/other", ""),
			[]cacheconfig.FieldDiff{{"model", "org/name", "org/other"}}},
		{"URL trailing slash", withModel("s3://bucket/m/", ""), withModel("s3://bucket/m", ""), nil},
		{"URL not cleaned", withModel("s3://bucket/a/../m", ""), withModel("s3://bucket/m", ""),
			[]cacheconfig.FieldDiff{{"model", "s3://bucket/a/../m", "s3://bucket/m"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := cacheconfig.Compare(tc.daemon, tc.client); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("diffs %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCompareQuantizationNone(t *testing.T) {
	a, b := full(), full()
	a.Quantization, b.Quantization = "", "none"
	if d := cacheconfig.Compare(a, b); d != nil {
		t.Fatalf("\"\" and \"none\" differ: %v", d)
	}
}

func TestCompareExtraNilEmpty(t *testing.T) {
	a, b := full(), full()
	a.Extra, b.Extra = nil, map[string]string{}
	if d := cacheconfig.Compare(a, b); d != nil {
		t.Fatalf("nil and empty extra differ: %v", d)
	}
}

func TestMismatchErrorMessage(t *testing.T) {
	err := &cacheconfig.MismatchError{Diffs: []cacheconfig.FieldDiff{{"tp_size", "2", "1"}, {"extra.x", cacheconfig.Absent, ""}}}
	want := `cache config mismatch: tp_size: daemon="2" client="1"; extra.x: daemon="<absent>" client=""`
	if err.Error() != want {
		t.Fatalf("Error() = %s\nwant %s", err.Error(), want)
	}
}

func TestNormalizeModel(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "",
		"/m/llama/":        "/m/llama",
		"/m//llama/./":     "/m/llama",
		"/m/x/../llama":    "/m/llama",
		"./llama":          "llama",
		"/":                "/",
		"org/name":         "org/name",
		"s3://b/m/":        "s3://b/m",
		"s3://":            "s3://",
		"hf://org/name///": "hf://org/name",
	} {
		if got := cacheconfig.NormalizeModel(in); got != want {
			t.Errorf("NormalizeModel(%q) = %q, want %q", in, got, want)
		}
	}
}
