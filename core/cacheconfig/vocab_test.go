package cacheconfig_test

import (
	"testing"

	"github.com/wcache/wcache/core/cacheconfig"
)

func TestCompareDTypeAndQuantizationSpellings(t *testing.T) {
	with := func(dtype, quant, digest string) cacheconfig.Config {
		c := full()
		c.DType, c.Quantization, c.CheckpointDigest = dtype, quant, digest
		return c
	}
	d1 := full().CheckpointDigest
	runCompareCases(t, []compareCase{
		{"alias", with("bfloat16", "fp8", d1), with("bf16", "fp8", d1), nil},
		{"torch name and case", with("torch.Float16", "FP8", d1), with("half", "fp8", d1), nil},
		{"quantization aliases", with("bf16", "", d1), with("bf16", "NONE", d1), nil},
		{"bnb", with("bf16", "bnb", d1), with("bf16", "BitsAndBytes", d1), nil},
		{"auto with both digests matches", with("auto", "fp8", d1), with("bf16", "fp8", d1), nil},
		{"empty is auto", with("bf16", "fp8", d1), with("", "fp8", d1), nil},
		{"auto without a client digest is literal", with("auto", "fp8", d1), with("bfloat16", "fp8", ""),
			[]cacheconfig.FieldDiff{{Field: "dtype", Daemon: "auto", Client: "bfloat16"}}},
		{"explicit dtypes differ", with("bf16", "fp8", d1), with("float16", "fp8", d1),
			[]cacheconfig.FieldDiff{{Field: "dtype", Daemon: "bf16", Client: "float16"}}},
		{"unknown spellings compare case-insensitively", with("MyType", "awq", d1), with("mytype", "gptq", d1),
			[]cacheconfig.FieldDiff{{Field: "quantization", Daemon: "awq", Client: "gptq"}}},
	})
}

func TestNormalizeDTypeAndQuantization(t *testing.T) {
	for in, want := range map[string]string{
		"": "auto", "AUTO": "auto", "bfloat16": "bf16", "torch.bfloat16": "bf16", "BF16": "bf16",
		"half": "fp16", "float": "fp32", "torch.float8_e4m3fn": "fp8_e4m3", "int4": "int4", "Ünï": "Ünï",
	} {
		if got := cacheconfig.NormalizeDType(in); got != want {
			t.Errorf("NormalizeDType(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"": "none", "None": "none", "bnb": "bitsandbytes", "compressed_tensors": "compressed-tensors", "AWQ": "awq",
	} {
		if got := cacheconfig.NormalizeQuantization(in); got != want {
			t.Errorf("NormalizeQuantization(%q) = %q, want %q", in, got, want)
		}
	}
}
