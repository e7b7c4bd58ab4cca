package names

import (
	"errors"
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

// The vectors are mirrored in clients/python/tests/test_mappers.py.
var (
	goodKinds = []string{"posix-shm", "cuda-ipc", "hip-ipc", "memfd", "cuda-vmm-fd", "x-acme-buf", "x-acme-dma-buf",
		"x-a1-b2", "x-" + strings.Repeat("a", 30) + "-" + strings.Repeat("b", 31)}
	badKinds = []string{"", "shm", "posix_shm", "x-acme", "x-", "x--buf", "x-acme-", "x-Acme-buf", "x-acme_buf",
		"X-acme-buf", "x-acme-buf/..", "x-acme-bü", "x-" + strings.Repeat("a", 31) + "-" + strings.Repeat("b", 31)}
)

func TestValidateHandleKind(t *testing.T) {
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
