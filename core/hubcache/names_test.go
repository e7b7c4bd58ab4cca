package hubcache

import (
	"regexp"
	"strings"
	"testing"
)

// TestNamesMatchTheirPatterns checks the hand-written name checks against
// the regular expressions they stand for, on every string of up to four
// bytes over an alphabet of each class's edge cases and on longer ones.
func TestNamesMatchTheirPatterns(t *testing.T) {
	checks := []struct {
		name    string
		check   func(string) bool
		pattern *regexp.Regexp
		extra   func(string) bool
	}{
		{"isBlobName", isBlobName, regexp.MustCompile(`^[0-9a-f]{64}$`), nil},
		{"isRepoID", isRepoID, regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*$`), nil},
		{"isRevision", isRevision, regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./-]*$`),
			func(s string) bool { return !strings.Contains(s, "..") }},
	}
	alphabet := []string{"a", "f", "g", "Z", "0", "9", "_", ".", "-", "/", "@", " ", "\n", "é"}
	inputs := []string{"", strings.Repeat("0123456789abcdef", 4), strings.Repeat("0123456789abcdef", 4) + "0",
		strings.Repeat("0123456789abcdeF", 4), "org/name", "Org_1/na.me-2", "org/name/x", "v1.0/branch", "refs/pr/1"}
	var grow func(prefix string, n int)
	grow = func(prefix string, n int) {
		inputs = append(inputs, prefix)
		if n > 0 {
			for _, c := range alphabet {
				grow(prefix+c, n-1)
			}
		}
	}
	grow("", 4)
	for _, c := range checks {
		for _, s := range inputs {
			want := c.pattern.MatchString(s) && (c.extra == nil || c.extra(s))
			if got := c.check(s); got != want {
				t.Fatalf("%s(%q) = %v, the pattern says %v", c.name, s, got, want)
			}
		}
	}
}
