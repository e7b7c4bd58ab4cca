package safetensors_test

import (
	"errors"
	"testing"

	"github.com/wcache/wcache/core/safetensors"
)

func TestDTypes(t *testing.T) {
	want := map[safetensors.DType]int{
		"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
		"F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
		"I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
		"C64": 64, "F64": 64, "I64": 64, "U64": 64,
	}
	all := safetensors.DTypes()
	if len(all) != len(want) {
		t.Fatalf("DTypes() has %d entries, want %d", len(all), len(want))
	}
	for i, d := range all {
		if got := d.Bits(); got != want[d] {
			t.Errorf("%s.Bits() = %d, want %d", d, got, want[d])
		}
		if d.Rank() != i {
			t.Errorf("%s.Rank() = %d, want its enum position %d", d, d.Rank(), i)
		}
		parsed, err := safetensors.ParseDType(string(d))
		if err != nil || parsed != d || !d.Valid() {
			t.Errorf("ParseDType(%q) = %q, %v", d, parsed, err)
		}
	}
}

func TestParseDTypeUnknown(t *testing.T) {
	for _, s := range []string{"", "bf16", "F8", "F128", "BF16 ", "Q4_0"} {
		d, err := safetensors.ParseDType(s)
		if !errors.Is(err, safetensors.ErrUnknownDType) || d != "" {
			t.Errorf("ParseDType(%q) = %q, %v; want ErrUnknownDType", s, d, err)
		}
		if safetensors.DType(s).Bits() != 0 || safetensors.DType(s).Rank() != -1 || safetensors.DType(s).Valid() {
			t.Errorf("DType(%q) reports a size, rank or validity", s)
		}
	}
}
