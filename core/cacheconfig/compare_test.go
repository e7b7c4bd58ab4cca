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
		{Field: "checkpoint_digest", Daemon: daemon.CheckpointDigest, Client: client.CheckpointDigest},
		{Field: "device_capability", Daemon: "9.0", Client: "8.0"},
		{Field: "dp_rank", Daemon: "2", Client: "3"},
		{Field: "dp_size", Daemon: "3", Client: "4"},
		{Field: "dtype", Daemon: "bf16", Client: "fp16"},
		{Field: "engine_name", Daemon: "vllm", Client: "sglang"},
		{Field: "engine_version", Daemon: "0.11.0", Client: "0.5"},
		{Field: "ep_rank", Daemon: "7", Client: "8"},
		{Field: "ep_size", Daemon: "8", Client: "9"},
		{Field: "extra.cp", Daemon: "2", ClientAbsent: true},
		{Field: "extra.enable_dp_attention", Daemon: "true", Client: "false"},
		{Field: "extra.new", Client: "", DaemonAbsent: true},
		{Field: "model_arch", Daemon: "LlamaForCausalLM", Client: "Qwen2ForCausalLM"},
		{Field: "pp_rank", Daemon: "1", Client: "2"},
		{Field: "pp_size", Daemon: "2", Client: "3"},
		{Field: "protocol_version", Daemon: "1", Client: "2"},
		{Field: "quantization", Daemon: "fp8", Client: "awq"},
		{Field: "quantization_config_digest", Daemon: "q1", Client: "q2"},
		{Field: "revision", Daemon: "main", Client: "v2"},
		{Field: "tp_rank", Daemon: "1", Client: "2"},
		{Field: "tp_size", Daemon: "4", Client: "5"},
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

// compareCase is a row of a Compare table: a daemon's and a client's
// config and the diffs Compare should report (nil: they match).
type compareCase struct {
	name           string
	daemon, client cacheconfig.Config
	want           []cacheconfig.FieldDiff
}

// runCompareCases runs each case as a subtest.
func runCompareCases(t *testing.T, cases []compareCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := cacheconfig.Compare(tc.daemon, tc.client); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("diffs %v, want %v", got, tc.want)
			}
		})
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
	runCompareCases(t, []compareCase{
		{"same digest, other directory", withModel("/a/llama", d1), withModel("/b/llama", d1), nil},
		{"other digest, same directory", withModel("/a/llama", d1), withModel("/a/llama", d2),
			[]cacheconfig.FieldDiff{{Field: "checkpoint_digest", Daemon: d1, Client: d2}}},
		{"client without digest: model decides", withModel("/a/llama/", d1), withModel("/a/./x/../llama", ""), nil},
		{"daemon without digest: model decides", withModel("/a/llama", ""), withModel("/b/llama", d1),
			[]cacheconfig.FieldDiff{{Field: "model", Daemon: "/a/llama", Client: "/b/llama"}}},
		{"hub ids", withModel("org/name", ""), withModel("org/name/", ""), nil},
		{"hub ids differ", withModel("org/name", ""), withModel("org/other", ""),
			[]cacheconfig.FieldDiff{{Field: "model", Daemon: "org/name", Client: "org/other"}}},
		{"URL trailing slash", withModel("s3://bucket/m/", ""), withModel("s3://bucket/m", ""), nil},
		{"URL not cleaned", withModel("s3://bucket/a/../m", ""), withModel("s3://bucket/m", ""),
			[]cacheconfig.FieldDiff{{Field: "model", Daemon: "s3://bucket/a/../m", Client: "s3://bucket/m"}}},
	})
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
	err := &cacheconfig.MismatchError{Diffs: []cacheconfig.FieldDiff{{Field: "tp_size", Daemon: "2", Client: "1"},
		{Field: "extra.x", DaemonAbsent: true}, {Field: "extra.y", Daemon: "<absent>", Truncated: true}}, Omitted: 3}
	want := `cache config mismatch: tp_size: daemon="2" client="1"; extra.x: daemon=<absent> client=""; ` +
		`extra.y: daemon="<absent>" client="" (truncated); +3 more`
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

// Published weights are the engine's own bytes: the header digest does not
// stand for model nor for dtype there, so both are compared.
func TestComparePublishedComparesModelAndDType(t *testing.T) {
	digest := "sha256:" + "ab" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd"
	published := cacheconfig.Config{Model: "org/model-v2", CheckpointDigest: digest, DType: "fp16"}
	for _, tc := range []struct {
		name            string
		client          cacheconfig.Config
		files, publishd []string // fields that differ under Compare / ComparePublished
	}{
		{"same", published, nil, nil},
		{"model normalised", cacheconfig.Config{Model: "org/model-v2/", CheckpointDigest: digest, DType: "float16"}, nil, nil},
		{"other model, same digest", cacheconfig.Config{Model: "org/model-v1", CheckpointDigest: digest, DType: "fp16"}, nil, []string{"model"}},
		{"auto", cacheconfig.Config{Model: "org/model-v2", CheckpointDigest: digest, DType: "auto"}, nil, []string{"dtype"}},
		{"empty dtype is auto", cacheconfig.Config{Model: "org/model-v2", CheckpointDigest: digest}, nil, []string{"dtype"}},
		{"other dtype", cacheconfig.Config{Model: "org/model-v2", CheckpointDigest: digest, DType: "bf16"}, []string{"dtype"}, []string{"dtype"}},
	} {
		fields := func(ds []cacheconfig.FieldDiff) []string {
			var out []string
			for _, d := range ds {
				out = append(out, d.Field)
			}
			return out
		}
		if got := fields(cacheconfig.Compare(published, tc.client)); !reflect.DeepEqual(got, tc.files) {
			t.Errorf("%s: Compare differs on %v, want %v", tc.name, got, tc.files)
		}
		if got := fields(cacheconfig.ComparePublished(published, tc.client)); !reflect.DeepEqual(got, tc.publishd) {
			t.Errorf("%s: ComparePublished differs on %v, want %v", tc.name, got, tc.publishd)
		}
	}
	// A publication that stated "auto" matches "auto" (and "") only.
	auto := cacheconfig.Config{Model: "m", CheckpointDigest: digest, DType: "auto"}
	if d := cacheconfig.ComparePublished(auto, cacheconfig.Config{Model: "m", CheckpointDigest: digest}); d != nil {
		t.Errorf("auto vs empty dtype: %v", d)
	}
	if d := cacheconfig.ComparePublished(auto, cacheconfig.Config{Model: "m", CheckpointDigest: digest, DType: "bf16"}); len(d) != 1 {
		t.Errorf("auto vs bf16: %v", d)
	}
}

func TestParallelLayoutKeepsOnlyTheLayout(t *testing.T) {
	got := full().ParallelLayout()
	want := cacheconfig.Config{TPSize: 4, TPRank: 1, PPSize: 2, PPRank: 1, DPSize: 3, DPRank: 2, EPSize: 8, EPRank: 7}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParallelLayout = %+v, want %+v", got, want)
	}
	other := want
	other.TPRank = 0
	if d := cacheconfig.Compare(want, other); len(d) != 1 || d[0].Field != "tp_rank" {
		t.Fatalf("diffs of two layouts: %v", d)
	}
}
