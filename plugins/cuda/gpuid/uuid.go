// Package gpuid formats and parses NVIDIA device UUIDs.
//
// The CUDA driver (cuDeviceGetUuid_v2) returns 16 raw bytes. NVML,
// nvidia-smi and CUDA_VISIBLE_DEVICES spell them as "GPU-" (a whole GPU) or
// "MIG-" (a MIG compute instance, R470+ drivers) followed by the bytes in
// lowercase hex grouped 8-4-4-4-12. PyTorch prints the same groups without a
// prefix. The prefix cannot be recovered from the bytes alone: the caller
// decides it (see Kind).
package gpuid

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// UUID is the 16 raw bytes the CUDA driver reports for a device.
type UUID [16]byte

// Kind says whether a UUID names a whole GPU or a MIG instance.
type Kind int

const (
	// KindGPU is a whole physical GPU: canonical prefix "GPU-".
	KindGPU Kind = iota
	// KindMIG is a MIG compute instance: canonical prefix "MIG-".
	KindMIG
)

// Prefix returns "GPU-" or "MIG-".
func (k Kind) Prefix() string {
	if k == KindMIG {
		return "MIG-"
	}
	return "GPU-"
}

// String returns "gpu" or "mig".
func (k Kind) String() string {
	if k == KindMIG {
		return "mig"
	}
	return "gpu"
}

// Hex returns the 8-4-4-4-12 lowercase hex form without prefix, the form
// PyTorch's str(torch.cuda.get_device_properties(i).uuid) prints.
func (u UUID) Hex() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], u[10:16])
	return string(b[:])
}

// Canonical returns the vendor canonical string: kind's prefix followed by
// Hex, e.g. "GPU-edfee158-11c1-52b8-0517-92f30e7fac88".
func (u UUID) Canonical(k Kind) string {
	return k.Prefix() + u.Hex()
}

// IsZero reports whether every byte is zero (a driver that reports no UUID).
func (u UUID) IsZero() bool {
	return u == UUID{}
}

// Parse reads "GPU-…", "MIG-…" or a bare 8-4-4-4-12 (or 32-digit) hex UUID,
// case-insensitively. A bare UUID is KindGPU. The legacy MIG form
// "MIG-GPU-<uuid>/<gi>/<ci>" carries no instance UUID and is refused, as is
// anything that is not exactly 16 bytes of hex.
func Parse(s string) (UUID, Kind, error) {
	var u UUID
	kind := KindGPU
	rest := s
	switch {
	case hasPrefixFold(rest, "GPU-"):
		rest = rest[4:]
	case hasPrefixFold(rest, "MIG-"):
		kind = KindMIG
		rest = rest[4:]
	}
	digits := strings.ReplaceAll(rest, "-", "")
	if rest != digits && !dashedShape(rest) {
		return u, kind, fmt.Errorf("parse device UUID %q: dashes must group the hex digits 8-4-4-4-12", s)
	}
	if len(digits) != 32 {
		return u, kind, fmt.Errorf("parse device UUID %q: want 32 hex digits, have %d", s, len(digits))
	}
	if _, err := hex.Decode(u[:], []byte(digits)); err != nil {
		return u, kind, fmt.Errorf("parse device UUID %q: %w", s, err)
	}
	return u, kind, nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// dashedShape reports whether s has dashes exactly at the 8-4-4-4-12
// positions.
func dashedShape(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		dash := i == 8 || i == 13 || i == 18 || i == 23
		if dash != (c == '-') {
			return false
		}
	}
	return true
}
