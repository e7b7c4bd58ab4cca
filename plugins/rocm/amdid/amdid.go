// Package amdid formats AMD GPU identities the way ROCm's tools and
// visibility variables spell them.
//
// A ROCm device's UUID is its KFD unique_id (a 64-bit number, in
// /sys/class/kfd/kfd/topology/nodes/N/properties), written as 16 lowercase
// hex digits: ROCr builds "GPU-" + %016x, HIP's hipDeviceGetUuid returns
// those 16 characters (ASCII) as its 16 "bytes", rocminfo and amd-smi print
// "GPU-…", and ROCR_VISIBLE_DEVICES accepts that string. The canonical
// string wcache uses is exactly that: "GPU-" + the 16 characters. PyTorch on
// ROCm prints the 8-4-4-4-12 hex of the ASCII bytes instead
// ("65303434-…" for "GPU-e044…"); the Python client converts it.
package amdid

import (
	"fmt"
	"strings"
)

// Prefix starts every canonical ROCm UUID.
const Prefix = "GPU-"

// FromHIP returns the canonical UUID from the 16 bytes of hipDeviceGetUuid.
// Bytes that are not 16 ASCII letters or digits (ROCm reports "XX", or
// nothing, for a device without a unique id: gfx8, some consumer cards) are
// an error, since such a device cannot key a daemon path.
func FromHIP(b [16]byte) (string, error) {
	chars := strings.TrimRight(string(b[:]), "\x00")
	if len(chars) != 16 || strings.IndexFunc(chars, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) >= 0 {
		return "", fmt.Errorf("HIP UUID bytes %q are not 16 letters or digits: the device reports no unique id (rocminfo shows GPU-XX)", chars)
	}
	return Prefix + strings.ToLower(chars), nil
}

// FromUniqueID returns the canonical UUID of a KFD unique_id:
// 1801979520617338022 → "GPU-1901ead3a2ecd4a6".
func FromUniqueID(id uint64) string { return fmt.Sprintf("%s%016x", Prefix, id) }

// GfxTarget names a KFD gfx_target_version (major*10000 + minor*100 +
// stepping) the way the compiler and PyTorch's gcnArchName do: 90402 →
// "gfx942", 90010 → "gfx90a", 110000 → "gfx1100". 0 (unknown) is "".
func GfxTarget(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("gfx%d%x%x", v/10000, (v/100)%100, v%100)
}
