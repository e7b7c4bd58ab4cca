package archtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Python package's public surface is wcache.__all__; its test,
// clients/python/tests/test_surface.py, holds the same list as PUBLIC and
// checks that __all__ is exactly it and that each name imports (make test
// runs it with the Python suite). This rule keeps the two lists one: a
// name added to __all__ without the test, or to the test without
// __all__, fails here, in go test ./..., without a Python.

// pyList returns the string items of the first Python list literal
// assigned to name in src ("NAME = [ ... ]").
func pyList(src, name string) ([]string, error) {
	start := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` = \[`).FindStringIndex(src)
	if start == nil {
		return nil, fmt.Errorf("no %s = [...]", name)
	}
	body, _, ok := strings.Cut(src[start[1]:], "]")
	if !ok {
		return nil, fmt.Errorf("%s = [ is not closed", name)
	}
	var items []string
	for _, line := range strings.Split(body, "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, m := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(line, -1) {
			items = append(items, m[1])
		}
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%s is empty", name)
	}
	return items, nil
}

// listDiff returns the names in one list and not the other, and those a
// list holds twice.
func listDiff(all, public []string) []string {
	var out []string
	for _, n := range all {
		if !slices.Contains(public, n) {
			out = append(out, fmt.Sprintf("%q is in wcache.__all__ but not in test_surface.py's PUBLIC", n))
		}
	}
	for _, n := range public {
		if !slices.Contains(all, n) {
			out = append(out, fmt.Sprintf("%q is in test_surface.py's PUBLIC but not in wcache.__all__", n))
		}
	}
	for _, l := range [][]string{all, public} {
		s := slices.Clone(l)
		slices.Sort(s)
		for i := 1; i < len(s); i++ {
			if s[i] == s[i-1] {
				out = append(out, fmt.Sprintf("%q is listed twice", s[i]))
			}
		}
	}
	return out
}

func TestPythonSurfaceListed(t *testing.T) {
	root := moduleRoot(t)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	all, err := pyList(read("clients/python/src/wcache/__init__.py"), "__all__")
	if err != nil {
		t.Fatalf("clients/python/src/wcache/__init__.py: %v", err)
	}
	public, err := pyList(read("clients/python/tests/test_surface.py"), "PUBLIC")
	if err != nil {
		t.Fatalf("clients/python/tests/test_surface.py: %v", err)
	}
	for _, d := range listDiff(all, public) {
		t.Error(d)
	}
}

// TestPythonSurfaceRuleCatchesAViolation plants lists that differ.
func TestPythonSurfaceRuleCatchesAViolation(t *testing.T) {
	src := "x = 1\n__all__ = [\n    # the daemon\n    \"attach\", \"status\",  # \"evict\"\n    \"publish\",\n]\n"
	got, err := pyList(src, "__all__")
	if err != nil || strings.Join(got, ",") != "attach,status,publish" {
		t.Fatalf("pyList = %q, %v", got, err)
	}
	if d := listDiff(got, []string{"publish", "attach", "status"}); len(d) != 0 {
		t.Errorf("the same names in another order: %q", d)
	}
	if d := listDiff(got, []string{"attach", "status", "publish", "evict"}); len(d) != 1 {
		t.Errorf("a name only in PUBLIC: %q, want one report", d)
	}
	if d := listDiff(append(got, "attach"), []string{"attach", "status"}); len(d) != 2 {
		t.Errorf("a name only in __all__ and one listed twice: %q, want two reports", d)
	}
	if _, err := pyList("__all__ = []\n", "__all__"); err == nil {
		t.Error("an empty list passed")
	}
}
