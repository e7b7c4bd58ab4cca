package gpuid

import (
	"strings"
	"testing"
)

var sample = UUID{0xed, 0xfe, 0xe1, 0x58, 0x11, 0xc1, 0x52, 0xb8, 0x05, 0x17, 0x92, 0xf3, 0x0e, 0x7f, 0xac, 0x88}

func TestCanonicalGPU(t *testing.T) {
	if got, want := sample.Canonical(KindGPU), "GPU-edfee158-11c1-52b8-0517-92f30e7fac88"; got != want {
		t.Fatalf("Canonical(GPU) = %q, want %q", got, want)
	}
}

func TestCanonicalMIG(t *testing.T) {
	if got, want := sample.Canonical(KindMIG), "MIG-edfee158-11c1-52b8-0517-92f30e7fac88"; got != want {
		t.Fatalf("Canonical(MIG) = %q, want %q", got, want)
	}
}

func TestHexMatchesPyTorchForm(t *testing.T) {
	// PyTorch prints %02x per byte in 8-4-4-4-12 groups, no prefix.
	var u UUID
	for i := range u {
		u[i] = byte(i * 17)
	}
	if got, want := u.Hex(), "00112233-4455-6677-8899-aabbccddeeff"; got != want {
		t.Fatalf("Hex = %q, want %q", got, want)
	}
	if got := (UUID{}).Hex(); got != "00000000-0000-0000-0000-000000000000" {
		t.Fatalf("zero Hex = %q", got)
	}
	if !(UUID{}).IsZero() || sample.IsZero() {
		t.Fatal("IsZero wrong")
	}
}

func TestParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind Kind
	}{
		{"GPU-edfee158-11c1-52b8-0517-92f30e7fac88", KindGPU},
		{"gpu-EDFEE158-11C1-52B8-0517-92F30E7FAC88", KindGPU},
		{"MIG-edfee158-11c1-52b8-0517-92f30e7fac88", KindMIG},
		{"edfee158-11c1-52b8-0517-92f30e7fac88", KindGPU},
		{"edfee15811c152b8051792f30e7fac88", KindGPU},
	} {
		u, k, err := Parse(tc.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.in, err)
		}
		if u != sample || k != tc.kind {
			t.Fatalf("Parse(%q) = %x %v, want %x %v", tc.in, u, k, sample, tc.kind)
		}
		if len(tc.in) == 40 {
			want := strings.ToUpper(tc.in[:3]) + strings.ToLower(tc.in[3:])
			if got := u.Canonical(k); got != want {
				t.Fatalf("round trip %q → %q, want %q", tc.in, got, want)
			}
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"GPU-",
		"GPU-edfee158",
		"MIG-GPU-edfee158-11c1-52b8-0517-92f30e7fac88/1/0",
		"GPU-edfee158-11c1-52b8-0517-92f30e7fac8g",
		"GPU-edfee15811c1-52b8-0517-92f30e7fac88--",
		"GPU-edfee158-11c1-52b8-0517-92f30e7fac8800",
		"../../etc/passwd",
	} {
		if _, _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) succeeded, want error", in)
		}
	}
}

func TestKindStrings(t *testing.T) {
	if KindGPU.Prefix() != "GPU-" || KindMIG.Prefix() != "MIG-" || KindGPU.String() != "gpu" || KindMIG.String() != "mig" {
		t.Fatal("kind strings wrong")
	}
}
