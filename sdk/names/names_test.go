package names

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidateDeviceUUID(t *testing.T) {
	for _, good := range []string{"GPU-8f0e3a7c-1b2d-4e5f-9a0b-1c2d3e4f5a6b", "GPU-0123456789abcdef", "MIG-x", "0",
		"ACME-1", strings.Repeat("a", MaxDeviceUUIDLen)} {
		if err := ValidateDeviceUUID(good); err != nil {
			t.Errorf("ValidateDeviceUUID(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", "../x", "/", "a/b", "x\x00y", "..", "GPU 1", "gpu_1", "é", strings.Repeat("a", MaxDeviceUUIDLen+1)} {
		err := ValidateDeviceUUID(bad)
		var ue *InvalidUUIDError
		if !errors.Is(err, ErrInvalidUUID) || !errors.As(err, &ue) || ue.UUID != bad {
			t.Errorf("ValidateDeviceUUID(%q) = %v, want an *InvalidUUIDError carrying it", bad, err)
		}
	}
}

// kindVectors are the vectors shared with the Python client
// (clients/python/tests/test_mappers.py reads the same file).
func kindVectors(t *testing.T) (good, bad []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "handle-kinds.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Good, Bad []string }
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Good) == 0 || len(v.Bad) == 0 {
		t.Fatal("handle-kinds.json holds no vectors")
	}
	return v.Good, v.Bad
}

func TestValidateHandleKind(t *testing.T) {
	goodKinds, badKinds := kindVectors(t)
	for _, k := range CoreKinds() {
		if !slices.Contains(goodKinds, k) {
			t.Errorf("core kind %q is missing from the shared vectors", k)
		}
	}
	for _, k := range goodKinds {
		if err := ValidateHandleKind(k); err != nil {
			t.Errorf("ValidateHandleKind(%q) = %v", k, err)
		}
	}
	for _, k := range badKinds {
		err := ValidateHandleKind(k)
		var ke *InvalidHandleKindError
		if !errors.Is(err, ErrInvalidHandleKind) || !errors.As(err, &ke) || ke.Kind != k {
			t.Errorf("ValidateHandleKind(%q) = %v, want an *InvalidHandleKindError carrying it", k, err)
			continue
		}
		if !strings.Contains(err.Error(), "x-VENDOR-NAME") {
			t.Errorf("error %q does not explain the vendor rule", err)
		}
	}
}

func TestVendor(t *testing.T) {
	for kind, want := range map[string]string{"x-acme-buf": "acme", "x-acme-dma-buf": "acme", "posix-shm": "", "x-acme": ""} {
		if got := Vendor(kind); got != want {
			t.Errorf("Vendor(%q) = %q, want %q", kind, got, want)
		}
	}
}
