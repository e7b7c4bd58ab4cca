package amdid

import "testing"

func TestFromUniqueID(t *testing.T) {
	if got := FromUniqueID(1801979520617338022); got != "GPU-1901ead3a2ecd4a6" {
		t.Fatalf("FromUniqueID(1801979520617338022) = %q, want GPU-1901ead3a2ecd4a6", got)
	}
	if got := FromUniqueID(0x1c); got != "GPU-000000000000001c" {
		t.Fatalf("FromUniqueID(0x1c) = %q: want 16 digits, zero-padded", got)
	}
}

func TestFromHIP(t *testing.T) {
	var b [16]byte
	copy(b[:], "1901EAD3A2ECD4A6")
	if got, err := FromHIP(b); err != nil || got != "GPU-1901ead3a2ecd4a6" {
		t.Fatalf("FromHIP = %q, %v", got, err)
	}
	for _, bad := range []string{"XX", "", "1901ead3a2ecd4a", "1901ead3-2ecd4a6"} {
		var b [16]byte
		copy(b[:], bad)
		if got, err := FromHIP(b); err == nil {
			t.Errorf("FromHIP(%q) = %q, want an error", bad, got)
		}
	}
}

func TestGfxTarget(t *testing.T) {
	for v, want := range map[int]string{90402: "gfx942", 90010: "gfx90a", 110000: "gfx1100", 90008: "gfx908", 0: ""} {
		if got := GfxTarget(v); got != want {
			t.Errorf("GfxTarget(%d) = %q, want %q", v, got, want)
		}
	}
}
