package archtest

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// mappedTrees are the folders whose every Go package has its line in the
// "Packages" map of docs/architecture.md: a newcomer finds where a change
// goes without opening the folders.
var mappedTrees = []string{"core", "sdk", "internal"}

// packagesMap returns the lines of the code block under the "## Packages"
// heading of the architecture page.
func packagesMap(doc string) ([]string, error) {
	_, after, ok := strings.Cut(doc, "\n## Packages\n")
	if !ok {
		return nil, fmt.Errorf(`no "## Packages" heading`)
	}
	_, block, ok := strings.Cut(after, "```\n")
	if !ok {
		return nil, fmt.Errorf(`no code block under "## Packages"`)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		return nil, fmt.Errorf(`the code block under "## Packages" is not closed`)
	}
	return strings.Split(block, "\n"), nil
}

// mapEntry matches a map line that names a folder: the folder at the start
// of the line, then at least two spaces.
var mapEntry = regexp.MustCompile(`^([a-z0-9_./-]+) {2,}\S`)

// unmapped returns the folders of dirs without exactly one line of their
// own in the map, and those whose entry goes on to a second line (an
// indented continuation): each folder of the mapped trees is one line.
func unmapped(lines []string, dirs []string) []string {
	count := map[string]int{}
	continued := map[string]bool{}
	for i, l := range lines {
		m := mapEntry.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		count[m[1]]++
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], " ") && strings.TrimSpace(lines[i+1]) != "" {
			continued[m[1]] = true
		}
	}
	var out []string
	for _, d := range dirs {
		switch {
		case count[d] == 0:
			out = append(out, d+": no line in the map")
		case count[d] > 1:
			out = append(out, fmt.Sprintf("%s: %d lines in the map", d, count[d]))
		case continued[d]:
			out = append(out, d+": its entry runs over more than one line")
		}
	}
	return out
}

// goFolders lists, relative to root, the folders under tree that hold Go
// files, leaving out testdata/ (fixtures, not packages of the module).
func goFolders(t *testing.T, root, tree string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(root, tree), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(seen))
}

func TestPackageMapNamesEveryFolder(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := packagesMap(string(doc))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	var dirs []string
	for _, tree := range mappedTrees {
		dirs = append(dirs, goFolders(t, root, tree)...)
	}
	// The check must see something: a broken walk would pass vacuously.
	for _, d := range []string{"core/daemon", "sdk", "sdk/plugin", "internal/fdpass"} {
		if !strings.Contains(" "+strings.Join(dirs, " ")+" ", " "+d+" ") {
			t.Fatalf("the walk did not find %s: %q", d, dirs)
		}
	}
	for _, v := range unmapped(lines, dirs) {
		t.Errorf("docs/architecture.md \"Packages\": %s (one line per folder of %s)", v, strings.Join(mappedTrees, "/, ")+"/")
	}
}

// TestPackageMapRuleCatchesAViolation plants a map that misses a folder,
// names one twice, and runs one over two lines.
func TestPackageMapRuleCatchesAViolation(t *testing.T) {
	doc := "# A\n\n## Packages\n\n```\n" +
		"core/a                  one line\n" +
		"core/b                  two\n" +
		"                        lines\n" +
		"core/c                  once\n" +
		"core/c                  twice\n" +
		"core/ab                 not core/a's\n" +
		"```\n\n## Next\n"
	lines, err := packagesMap(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := unmapped(lines, []string{"core/a", "core/b", "core/c", "core/d"})
	want := []string{"core/b: its entry runs over more than one line", "core/c: 2 lines in the map", "core/d: no line in the map"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("unmapped = %q, want %q", got, want)
	}
	if _, err := packagesMap("# A\n\n## Packages in short\n"); err == nil {
		t.Error("a page without the heading passed")
	}
}
