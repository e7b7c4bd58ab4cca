package cudabackend

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte count: a plain integer or an integer with a
// unit, case-insensitive: B; KiB, MiB, GiB (also Ki/Mi/Gi and K/M/G, which
// mean the binary units here too, as for buffer sizes everyone does).
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	var shift uint
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
	case "k", "ki", "kib":
		shift = 10
	case "m", "mi", "mib":
		shift = 20
	case "g", "gi", "gib":
		shift = 30
	default:
		return 0, fmt.Errorf("size %q: unknown unit (use B, KiB, MiB or GiB)", s)
	}
	if n > (^uint64(0))>>shift {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n << shift, nil
}
