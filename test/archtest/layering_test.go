package archtest

import (
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is the module path.
const module = "github.com/wcache/wcache"

// rule forbids packages under From (a folder of the module) to import
// packages under any of To.
type rule struct {
	From string
	To   []string
	Why  string
}

// rules is the layering rule of docs/architecture.md.
var rules = []rule{
	{"core", []string{"test", "plugins", "cmd"}, "the core is a library: it never depends on the product's internals, its tests or on a plugin"},
	{"plugins", []string{"test", "core", "cmd"}, "a plugin builds on the sdk alone, as a third party's would"},
	{"sdk", []string{"test", "core", "plugins", "cmd"}, "the sdk is what outside backend authors import"},
	{"cmd", []string{"test"}, "what ships never depends on what proves it"},
	{"proto", []string{"test", "core", "plugins", "sdk", "cmd"}, "the protocol is the ground floor"},
	{"sdk/version", []string{"test", "core", "plugins", "cmd", "proto", "sdk/procstat"}, "version is a leaf"},
	{"sdk/procstat", []string{"test", "core", "plugins", "cmd", "proto", "sdk/version"}, "procstat is a leaf"},
}

// under reports whether the import path pkg lies in the module folder dir.
func under(pkg, dir string) bool {
	p := module + "/" + dir
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// variant strips go list's test-variant suffix: "p [p.test]" → "p".
func variant(pkg string) string {
	if i := strings.IndexByte(pkg, ' '); i >= 0 {
		return pkg[:i]
	}
	return pkg
}

func TestLayering(t *testing.T) {
	root := moduleRoot(t)
	patterns := append([]string{"./..."}, testdataMains(t, root)...)
	graph := importGraph(t, root, patterns)
	var violations []string
	for pkg, imports := range graph {
		for _, r := range rules {
			if !under(pkg, r.From) {
				continue
			}
			for _, imp := range imports {
				for _, to := range r.To {
					if under(imp, to) {
						violations = append(violations, fmt.Sprintf("%s imports %s: nothing under %s/ may import %s/ (%s)",
							strings.TrimPrefix(pkg, module+"/"), strings.TrimPrefix(imp, module+"/"), r.From, to, r.Why))
					}
				}
			}
		}
	}
	sort.Strings(violations)
	if len(violations) > 0 {
		t.Errorf("the layering rule of docs/architecture.md is broken (tests included):\n  %s",
			strings.Join(violations, "\n  "))
	}
	// The check must see something: a broken pattern would pass vacuously.
	for _, dir := range []string{"core/daemon", "sdk", "plugins/mock", "proto/wcache/daemon/v1"} {
		if _, ok := graph[module+"/"+dir]; !ok {
			t.Errorf("go list did not report %s; the check is not looking at the module", dir)
		}
	}
}

// TestRulesCatchAViolation feeds the rule matcher an upward import, so
// that a matcher that can never fire fails here.
func TestRulesCatchAViolation(t *testing.T) {
	fired := 0
	for _, r := range rules {
		if under(module+"/core/daemon", r.From) {
			for _, to := range r.To {
				if under(module+"/plugins/mock/mockbackend", to) {
					fired++
				}
			}
		}
	}
	if fired != 1 {
		t.Fatalf("core/daemon importing plugins/mock/mockbackend matched %d rules, want 1", fired)
	}
	if under(module+"/coreutil", "core") || under(module+"/testx", "test") {
		t.Fatal("under matches a sibling folder sharing a prefix")
	}
}

// importGraph returns, for every package and test variant go list
// -test reports for patterns, its direct imports inside the module.
func importGraph(t *testing.T, root string, patterns []string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-e", "-test", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{if .Error}}{{.Error}}{{end}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("go list line %q", line)
		}
		if parts[2] != "" {
			t.Errorf("go list: %s: %s", parts[0], parts[2])
		}
		pkg := variant(parts[0])
		if strings.HasSuffix(pkg, ".test") || !strings.HasPrefix(pkg, module) {
			continue // the generated test main
		}
		for _, imp := range strings.Split(parts[1], ",") {
			if imp = variant(imp); strings.HasPrefix(imp, module+"/") {
				graph[pkg] = append(graph[pkg], imp)
			}
		}
		if _, ok := graph[pkg]; !ok {
			graph[pkg] = nil
		}
	}
	return graph
}

// testdataMains lists the folders under testdata/ that hold Go files (test
// plugins built by tests), which ./... leaves out, as ./-relative patterns.
func testdataMains(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "clients") {
			return filepath.SkipDir
		}
		if d.IsDir() && path != root && isModule(path) {
			return filepath.SkipDir // another module: TestNestedModulesImportOnlyTheSDK
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && strings.Contains(path, string(filepath.Separator)+"testdata"+string(filepath.Separator)) {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen["./"+filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// isModule reports whether dir holds a go.mod of its own.
func isModule(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil && st.Mode().IsRegular()
}

// TestNestedModulesImportOnlyTheSDK checks the modules under testdata/ (an
// outside vendor's plugin, built by a test): of wcache they may import
// the sdk alone, as a separately released plugin can.
func TestNestedModulesImportOnlyTheSDK(t *testing.T) {
	root := moduleRoot(t)
	var mods []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "clients" || d.Name() == "tools") {
			return filepath.SkipDir
		}
		if d.IsDir() && path != root && strings.Contains(path, string(filepath.Separator)+"testdata"+string(filepath.Separator)) && isModule(path) {
			mods = append(mods, path)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) == 0 {
		t.Fatal("no module under testdata/: the check is not looking at the outside plugin")
	}
	// The imports are read from the sources (tests included), not through
	// go list: the nested module's requirements may lag behind this
	// checkout's, and resolving them is the e2e test's business.
	fset := token.NewFileSet()
	for _, dir := range mods {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, spec := range f.Imports {
				imp, err := strconv.Unquote(spec.Path.Value)
				if err != nil {
					return err
				}
				if strings.HasPrefix(imp, module+"/") && !under(imp, "sdk") {
					t.Errorf("%s (module %s) imports %s: an outside plugin may import only the sdk", path, dir, imp)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// moduleRoot is the folder holding go.mod, above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}
