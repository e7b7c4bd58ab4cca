package cacheconfig

import "strings"

// Canonical dtype spellings (docs/cacheconfig.md, "dtype and quantization").
const (
	DTypeAuto    = "auto"
	DTypeBF16    = "bf16"
	DTypeFP16    = "fp16"
	DTypeFP32    = "fp32"
	DTypeFP64    = "fp64"
	DTypeFP8E4M3 = "fp8_e4m3"
	DTypeFP8E5M2 = "fp8_e5m2"
)

// QuantizationNone is the canonical spelling of "unquantized".
const QuantizationNone = "none"

// dtypeAliases maps every accepted spelling (ASCII-lowercased, without a
// "torch." prefix) to its canonical one. The Python client
// (clients/python/src/wcache/vocab.py) has the same table; the shared
// vectors in testdata/vectors.json cover every entry.
var dtypeAliases = map[string]string{
	"":              DTypeAuto,
	"auto":          DTypeAuto,
	"bf16":          DTypeBF16,
	"bfloat16":      DTypeBF16,
	"fp16":          DTypeFP16,
	"f16":           DTypeFP16,
	"float16":       DTypeFP16,
	"half":          DTypeFP16,
	"fp32":          DTypeFP32,
	"f32":           DTypeFP32,
	"float32":       DTypeFP32,
	"float":         DTypeFP32,
	"fp64":          DTypeFP64,
	"f64":           DTypeFP64,
	"float64":       DTypeFP64,
	"double":        DTypeFP64,
	"fp8_e4m3":      DTypeFP8E4M3,
	"f8_e4m3":       DTypeFP8E4M3,
	"fp8_e4m3fn":    DTypeFP8E4M3,
	"float8_e4m3fn": DTypeFP8E4M3,
	"fp8_e5m2":      DTypeFP8E5M2,
	"f8_e5m2":       DTypeFP8E5M2,
	"float8_e5m2":   DTypeFP8E5M2,
}

// quantizationAliases maps accepted spellings (ASCII-lowercased) to the
// canonical one; any other method name is only lowercased.
var quantizationAliases = map[string]string{
	"":                   QuantizationNone,
	"none":               QuantizationNone,
	"bnb":                "bitsandbytes",
	"compressed_tensors": "compressed-tensors",
}

// NormalizeDType returns the canonical spelling of a dtype: the value is
// ASCII-lowercased and a "torch." prefix dropped, then a known alias
// ("bfloat16", "half", "torch.float16", …) becomes its canonical name
// ("bf16", "fp16", …) and "" becomes "auto". Unknown spellings come back
// lowercased, so they still compare exactly, case aside.
func NormalizeDType(dtype string) string {
	s := strings.TrimPrefix(asciiLower(dtype), "torch.")
	if c, ok := dtypeAliases[s]; ok {
		return c
	}
	return s
}

// NormalizeQuantization returns the canonical spelling of a quantization
// method: ASCII-lowercased, "" as "none", "bnb" as "bitsandbytes" and
// "compressed_tensors" as "compressed-tensors"; other names are only
// lowercased.
func NormalizeQuantization(q string) string {
	s := asciiLower(q)
	if c, ok := quantizationAliases[s]; ok {
		return c
	}
	return s
}

// asciiLower lowercases A-Z only, so that every language agrees on the
// result (Unicode case mappings differ between libraries).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// KnownDType reports whether dtype is one of the accepted spellings
// (NormalizeDType turns it into a canonical name).
func KnownDType(dtype string) bool {
	_, ok := dtypeAliases[strings.TrimPrefix(asciiLower(dtype), "torch.")]
	return ok
}

// DTypeSpellings lists the canonical dtype names, for a message that
// refuses an unknown spelling.
func DTypeSpellings() []string {
	return []string{DTypeAuto, DTypeBF16, DTypeFP16, DTypeFP32, DTypeFP64, DTypeFP8E4M3, DTypeFP8E5M2}
}
