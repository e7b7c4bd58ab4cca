package cudabackend

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte count: a plain integer, or an integer with a
// case-insensitive unit, as the mock backend reads sizes: B; K, M, G (and
// KB, MB, GB) are powers of 1000; Ki, Mi, Gi (and KiB, MiB, GiB) powers of
// 1024. Examples: 4096, 64MiB, 1GiB.
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
	var mult uint64
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
		mult = 1
	case "k", "kb":
		mult = 1e3
	case "m", "mb":
		mult = 1e6
	case "g", "gb":
		mult = 1e9
	case "ki", "kib":
		mult = 1 << 10
	case "mi", "mib":
		mult = 1 << 20
	case "gi", "gib":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("size %q: unknown unit (use B, K, M, G, KiB, MiB or GiB)", s)
	}
	if n > (^uint64(0))/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * mult, nil
}
