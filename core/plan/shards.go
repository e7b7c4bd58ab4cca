package plan

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Placeholders of a pre-sharded per-rank file pattern.
const (
	TPRankPlaceholder = "{tp_rank}"
	PPRankPlaceholder = "{pp_rank}"
)

// ErrNoShards: a shard pattern matched no file.
var ErrNoShards = errors.New("no shard file matches the pattern")

// ErrInvalidPattern: a shard pattern is malformed (unknown placeholder, a
// path that leaves the model directory, a placeholder missing for a rank
// dimension larger than one, a bad glob).
var ErrInvalidPattern = errors.New("invalid shard pattern")

// ShardRanks are the ranks a shard pattern is expanded with, and the sizes
// that say which placeholders it must contain.
type ShardRanks struct {
	TPRank, TPSize uint32
	PPRank, PPSize uint32
}

// ShardFiles expands a pre-sharded per-rank pattern (the vLLM sharded_state
// layout, e.g. "model-rank-{tp_rank}-part-*.safetensors") with the ranks,
// globs it inside dir (filepath.Match syntax: *, ?, [...]) and returns the
// matching files sorted in natural order ("part-2" before "part-10"). A match
// whose base name starts with "." (a hidden file) is left out.
//
// The pattern is relative to dir and may not leave it ("..", absolute
// paths). Only {tp_rank} and {pp_rank} are known placeholders; when TPSize
// (PPSize) is larger than one the pattern must contain {tp_rank}
// ({pp_rank}), otherwise every rank would load the same files. Errors wrap
// ErrInvalidPattern or ErrNoShards.
func ShardFiles(dir, pattern string, r ShardRanks) ([]string, error) {
	expanded, err := expandShardPattern(pattern, r)
	if err != nil {
		return nil, err
	}
	glob := filepath.Join(dir, expanded)
	matches, err := filepath.Glob(glob)
	if err != nil {
		return nil, fmt.Errorf("shard pattern %q: %v: %w", pattern, err, ErrInvalidPattern)
	}
	// Hidden files never count, as in a checkpoint directory
	// (safetensors.IsCheckpointFileName): Go's Glob lets "*" match a leading
	// dot, shells and Python's glob do not.
	matches = slices.DeleteFunc(matches, func(m string) bool { return strings.HasPrefix(filepath.Base(m), ".") })
	if len(matches) == 0 {
		return nil, fmt.Errorf("shard pattern %q expanded to %s: %w", pattern, glob, ErrNoShards)
	}
	sort.Slice(matches, func(i, j int) bool { return naturalLess(matches[i], matches[j]) })
	return matches, nil
}

// expandShardPattern substitutes the rank placeholders and checks the
// pattern's shape.
func expandShardPattern(pattern string, r ShardRanks) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("shard pattern %q: %s: %w", pattern, why, ErrInvalidPattern)
	}
	if pattern == "" {
		return "", bad("empty")
	}
	if filepath.IsAbs(pattern) {
		return "", bad("must be relative to the model directory")
	}
	for _, part := range strings.Split(filepath.ToSlash(pattern), "/") {
		if part == ".." {
			return "", bad(`may not contain ".."`)
		}
	}
	if r.TPSize > 1 && !strings.Contains(pattern, TPRankPlaceholder) {
		return "", bad(fmt.Sprintf("tp_size is %d but the pattern has no %s", r.TPSize, TPRankPlaceholder))
	}
	if r.PPSize > 1 && !strings.Contains(pattern, PPRankPlaceholder) {
		return "", bad(fmt.Sprintf("pp_size is %d but the pattern has no %s", r.PPSize, PPRankPlaceholder))
	}
	out := strings.NewReplacer(
		TPRankPlaceholder, strconv.FormatUint(uint64(r.TPRank), 10),
		PPRankPlaceholder, strconv.FormatUint(uint64(r.PPRank), 10),
	).Replace(pattern)
	if i := strings.IndexByte(out, '{'); i >= 0 {
		end := strings.IndexByte(out[i:], '}')
		name := out[i:]
		if end >= 0 {
			name = out[i : i+end+1]
		}
		return "", bad(fmt.Sprintf("unknown placeholder %s (known: %s, %s)", name, TPRankPlaceholder, PPRankPlaceholder))
	}
	return out, nil
}

// naturalLess orders strings comparing runs of digits by numeric value.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na := strings.TrimLeft(a[:da], "0")
			nb := strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			if da != db {
				return da < db
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

// digitPrefix is the length of the leading run of ASCII digits of s.
func digitPrefix(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
