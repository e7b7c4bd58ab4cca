package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// suggestFlag adds "did you mean --X?" to pflag's unknown-flag error when
// one of cmd's flags (or their aliases) is close to the name typed: cobra
// suggests commands, not flags. Other errors come back unchanged.
func suggestFlag(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedShortnames() != "" || ne.GetSpecifiedName() == "" {
		return err
	}
	if s := closestFlag(ne.GetSpecifiedName(), flagCandidates(cmd)); s != "" {
		return fmt.Errorf("%w (did you mean --%s? see %s --help)", err, s, cmd.CommandPath())
	}
	return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
}

// closestFlag is the flag of candidates (name → flag to suggest) nearest to
// typed: the one with the smallest edit distance, if that is at most a
// third of the typed name's length (2 edits for short names), or else the
// shortest that starts with what was typed (--metrics for
// --metrics-listen). "" when nothing is close.
func closestFlag(typed string, candidates map[string]string) string {
	typed = strings.ToLower(strings.ReplaceAll(typed, "_", "-"))
	limit := max(2, len(typed)/3)
	best, bestDist := "", limit+1
	prefix := ""
	for _, name := range sortedKeys(candidates) {
		if d := levenshtein(typed, name); d < bestDist {
			best, bestDist = candidates[name], d
		}
		if len(typed) >= 3 && strings.HasPrefix(name, typed) && (prefix == "" || len(name) < len(prefix)) {
			prefix = name
		}
	}
	if best != "" {
		return best
	}
	return candidates[prefix]
}

// levenshtein is the edit distance between a and b (insertions, deletions
// and substitutions of bytes; flag names are ASCII).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
