package sdk

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte count, as backends read sizes from their
// environment (WCACHE_MOCK_MEMORY, WCACHE_CUDA_STAGING_BYTES): a plain
// integer, or an integer or decimal with a unit. Units are case-insensitive: K, M, G, T (and KB, MB, GB, TB)
// are powers of 1000; Ki, Mi, Gi, Ti (and KiB, MiB, GiB, TiB) are powers of
// 1024; B is bytes. Examples: 8GiB, 512MiB, 1G, 1.5GiB, 4096.
func ParseSize(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	var mult float64
	switch unit {
	case "", "b":
		mult = 1
	case "k", "kb":
		mult = 1e3
	case "m", "mb":
		mult = 1e6
	case "g", "gb":
		mult = 1e9
	case "t", "tb":
		mult = 1e12
	case "ki", "kib":
		mult = 1 << 10
	case "mi", "mib":
		mult = 1 << 20
	case "gi", "gib":
		mult = 1 << 30
	case "ti", "tib":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, K, M, G, T, KiB, MiB, GiB or TiB)", s, s[i:])
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q: %w", s, err)
		}
		if mult != 1 && float64(n)*mult >= 1<<64 {
			return 0, fmt.Errorf("size %q overflows 64 bits", s)
		}
		return n * uint64(mult), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	v := f * mult
	if v >= 1<<64 {
		return 0, fmt.Errorf("size %q overflows 64 bits", s)
	}
	return uint64(v), nil
}
