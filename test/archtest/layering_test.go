package archtest

import (
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is the module path.
const module = "github.com/wcache/wcache"

// rule forbids packages under From (a folder of the module; "" is the
// whole module), except those under Except, to import packages under any
// of To ("" in To: any package of the module) but those under Allow.
type rule struct {
	From   string
	Except string
	To     []string
	Why    string
	Allow  []string
}

// rules is the layering rule of docs/architecture.md.
var rules = []rule{
	{"", "test", []string{"test"}, "what ships never depends on what proves it: nothing outside test/ imports test/", nil},
	{"core", "", []string{"plugins", "cmd"}, "the core is a library: it never depends on the product's commands or on a plugin", nil},
	{"plugins", "", []string{"core", "cmd"}, "a plugin builds on the sdk alone, as a third party's would", nil},
	{"sdk", "", []string{"core", "plugins", "cmd"}, "the sdk is what outside backend authors import", nil},
	{"proto", "", []string{"core", "plugins", "sdk", "cmd"}, "the protocol is the ground floor", nil},
	{"internal/version", "", []string{""}, "version is a leaf: it imports nothing of the module", nil},
	{"internal/procstat", "", []string{""}, "procstat is a leaf: it imports nothing of the module", nil},
	{"internal/childproc", "", []string{""}, "childproc is a leaf: the tests of every tree import it, it imports nothing of the module", nil},
	{"internal/parallel", "", []string{""}, "parallel is a leaf: it imports nothing of the module", nil},
	{"sdk", "", []string{"internal"}, "the sdk is what outside backend authors import: of the module's own helpers it builds on the descriptor channel, mmap, procstat (the mock's stale files), the gRPC adapters and go-plugin handshake (backendrpc, backendplugin: sdk/plugin serves with them, sdk/backendtest starts plugins with them) and the tests' childproc and grpcpipe only",
		[]string{"internal/fdpass", "internal/mmap", "internal/procstat", "internal/backendrpc", "internal/backendplugin", "internal/childproc", "internal/grpcpipe"}},
}

// downRule forbids the packages below the folder Dir (not Dir's own
// package), but those under Except, to import Dir's own package: what lies
// below a package is what it builds on, so nothing runs upward.
type downRule struct {
	Dir    string
	Except []string
	Why    string
}

// downRules are the folders whose subpackages never import their parent.
var downRules = []downRule{
	{"core/daemon", []string{"core/daemon/daemontest"},
		"core/daemon's subpackages (fill, handover, registry, …) are what the daemon builds on and reach it through their own interfaces; daemontest (a harness) is built on the daemon"},
}

// forbids reports whether r forbids pkg to import imp (both import paths).
func (r downRule) forbids(pkg, imp string) bool {
	pkg = strings.TrimSuffix(pkg, "_test") // an external test package is its package's
	if pkg == module+"/"+r.Dir || !under(pkg, r.Dir) {
		return false
	}
	for _, e := range r.Except {
		if under(pkg, e) {
			return false
		}
	}
	return imp == module+"/"+r.Dir
}

// forbidder is one layering rule of either kind.
type forbidder interface {
	forbids(pkg, imp string) bool
	why() string
}

func (r rule) why() string     { return r.Why }
func (r downRule) why() string { return r.Why }

// allRules are rules and downRules, in that order.
func allRules() []forbidder {
	var out []forbidder
	for _, r := range rules {
		out = append(out, r)
	}
	for _, r := range downRules {
		out = append(out, r)
	}
	return out
}

// forbids reports whether r forbids pkg to import imp (both import paths).
func (r rule) forbids(pkg, imp string) bool {
	if !under(pkg, r.From) || (r.Except != "" && under(pkg, r.Except)) {
		return false
	}
	for _, ok := range r.Allow {
		if under(imp, ok) {
			return false
		}
	}
	for _, to := range r.To {
		if under(imp, to) {
			return true
		}
	}
	return false
}

// under reports whether the import path pkg lies in the module folder dir
// ("": anywhere in the module).
func under(pkg, dir string) bool {
	if dir == "" {
		return pkg == module || strings.HasPrefix(pkg, module+"/")
	}
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
	graph := importGraph(t, root, patterns, true)
	var violations []string
	for pkg, imports := range graph {
		for _, r := range allRules() {
			for _, imp := range imports {
				if r.forbids(pkg, imp) {
					violations = append(violations, fmt.Sprintf("%s imports %s (%s)",
						strings.TrimPrefix(pkg, module+"/"), strings.TrimPrefix(imp, module+"/"), r.why()))
				}
			}
		}
	}
	sort.Strings(violations)
	violations = slices.Compact(violations) // a package and its test variant
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

// TestRulesCatchAViolation feeds the rule matchers (rules and downRules)
// planted imports, one per rule at least, so that a rule that can never fire fails here, and imports the
// layering allows, so that an over-eager rule fails too.
func TestRulesCatchAViolation(t *testing.T) {
	m := func(dir string) string { return module + "/" + dir }
	planted := []struct{ pkg, imp string }{
		{m("cmd/wcache/cli"), m("test/testproc")},             // shipped CLI → test helper
		{m("core/daemon"), m("test/e2e")},                     // core → test
		{m("clients/gen"), m("test/bench")},                   // any new folder → test
		{m("core/daemon"), m("plugins/mock/mockbackend")},     // core → plugin
		{m("plugins/cuda/cudabackend"), m("core/client")},     // plugin → core
		{m("sdk/backendtest"), m("core/pluginhost")},          // sdk → core
		{m("proto/wcache/daemon/v1"), m("sdk")},               // proto → sdk
		{m("internal/version"), m("sdk/names")},               // leaf → anything
		{m("internal/procstat"), m("proto/wcache/daemon/v1")}, // leaf → anything
		{m("internal/childproc"), m("internal/poll")},         // leaf → anything
		{m("internal/parallel"), m("sdk/filedigest")},         // leaf → anything
		{m("sdk/fill"), m("internal/poll")},                   // sdk → a helper not its own
		{m("sdk/mock"), m("internal/memfdseal")},              // sdk → the daemon's write seals
		{m("core/daemon/fill"), m("core/daemon")},             // a subpackage → its parent
		{m("core/daemon/fill/filltest"), m("core/daemon")},    // deeper → the parent
		{m("core/daemon/fill_test"), m("core/daemon")},        // a subpackage's external tests → the parent
		{m("core/daemon/handover"), m("core/daemon")},         // another subpackage → the parent
		{m("core/daemon/registry"), m("core/daemon")},         // the generations' registry → the daemon
	}
	all := allRules()
	fired := map[int]bool{}
	for _, p := range planted {
		n := 0
		for i, r := range all {
			if r.forbids(p.pkg, p.imp) {
				n++
				fired[i] = true
			}
		}
		if n == 0 {
			t.Errorf("%s importing %s matched no rule", p.pkg, p.imp)
		}
	}
	for i, r := range all {
		if !fired[i] {
			t.Errorf("rule %d (%s) fired for none of the planted violations", i, r.why())
		}
	}
	allowed := []struct{ pkg, imp string }{
		{m("test/e2e"), m("test/testproc")},
		{m("test/bench"), m("core/client")},
		{m("cmd/wcache/cli"), m("core/daemon")},
		{m("core/pluginhost"), m("sdk/plugin")},
		{m("plugins/mock/mockbackend"), m("sdk/fill")},
		{m("core/daemonfile"), m("internal/procstat")},
		{m("sdk/plugin"), m("internal/fdpass")},
		{m("sdk/backendtest"), m("internal/backendplugin")},
		{m("sdk/backendtest"), m("internal/childproc")},
		{m("core/daemon"), m("core/daemon/fill")},
		{m("core/daemon"), m("core/daemon/registry")},
		{m("core/daemon/registry"), m("core/daemon/fill")},
		{m("core/daemon/fill"), m("core/daemon/daemontest/testworld")},
		{m("core/daemon/fill/filltest"), m("core/daemon/fill")},
		{m("core/daemon/daemontest"), m("core/daemon")},
		{m("core/daemon/daemontest_test"), m("core/daemon")},
		{m("core/metrics"), m("core/daemon")},
		{m("core/daemonctl"), m("core/daemon")},
	}
	for _, p := range allowed {
		for _, r := range all {
			if r.forbids(p.pkg, p.imp) {
				t.Errorf("%s importing %s is allowed, but the rule %q forbids it", p.pkg, p.imp, r.why())
			}
		}
	}
	if under(module+"/coreutil", "core") || under(module+"/testx", "test") || under("github.com/wcache/wcachex", "") {
		t.Fatal("under matches a sibling folder sharing a prefix")
	}
}

// linkRule forbids the package Pkg (a folder of the module) to link,
// directly or through any dependency, a package of the modules in Not.
type linkRule struct {
	Pkg string
	Not []string
	Why string
}

// linkRules keep the contract light: an inference engine links core/client
// (and through it the sdk's types), never the plugin runtime.
var linkRules = []linkRule{
	{"core/client", []string{"github.com/hashicorp/go-plugin", "github.com/hashicorp/yamux"},
		"a Go engine links core/client: the go-plugin runtime belongs to sdk/plugin and core/pluginhost"},
	{"sdk", []string{"github.com/hashicorp/go-plugin", "github.com/hashicorp/yamux"},
		"the sdk root package is the backend contract; starting a plugin is sdk/plugin's"},
}

// linked returns the violations of r among deps, the packages pkg links.
func (r linkRule) linked(deps []string) []string {
	var out []string
	for _, d := range deps {
		for _, not := range r.Not {
			if d == not || strings.HasPrefix(d, not+"/") {
				out = append(out, fmt.Sprintf("%s links %s (%s)", r.Pkg, d, r.Why))
			}
		}
	}
	return out
}

func TestLinkRules(t *testing.T) {
	root := moduleRoot(t)
	for _, r := range linkRules {
		cmd := exec.Command("go", "list", "-deps", "./"+r.Pkg)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v\n%s", r.Pkg, err, stderr.String())
		}
		deps := strings.Fields(string(out))
		// The check must see something: a broken pattern would pass vacuously.
		// The gRPC module, not its root package: the sdk root links only
		// grpc/codes (RemoteError's Code), the client the whole of it.
		grpcLinked := slices.ContainsFunc(deps, func(d string) bool {
			return d == "google.golang.org/grpc" || strings.HasPrefix(d, "google.golang.org/grpc/")
		})
		if !slices.Contains(deps, module+"/"+r.Pkg) || !grpcLinked {
			t.Fatalf("go list -deps ./%s did not list the package and its gRPC dependency: %q", r.Pkg, deps)
		}
		for _, v := range r.linked(deps) {
			t.Error(v)
		}
	}
}

// TestLinkRulesCatchAViolation plants each forbidden module, and a module
// that merely shares its prefix, in a dependency list.
func TestLinkRulesCatchAViolation(t *testing.T) {
	for _, r := range linkRules {
		for _, not := range r.Not {
			deps := []string{"fmt", module + "/" + r.Pkg, not + "/internal/plugin", not + "x/ok"}
			if got := r.linked(deps); len(got) != 1 {
				t.Errorf("%s linking %s/internal/plugin (and %sx/ok): %d violations %q, want 1", r.Pkg, not, not, len(got), got)
			}
		}
	}
}

// importGraph returns, for every package go list reports for patterns
// (and, withTests, every test variant, under its package's path), its
// direct imports inside the module.
func importGraph(t *testing.T, root string, patterns []string, withTests bool) map[string][]string {
	t.Helper()
	args := []string{"list", "-e", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{if .Error}}{{.Error}}{{end}}"}
	if withTests {
		args = append(args, "-test")
	}
	args = append(args, patterns...)
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
	return slices.Sorted(maps.Keys(seen))
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
