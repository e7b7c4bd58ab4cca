package archtest

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// testOnly lists the packages outside test/ that are for tests only
// although their names do not say so (see isProof).
var testOnly = []string{"internal/childproc", "internal/grpcpipe"}

// isProof reports whether the module package pkg (an import path) proves
// rather than ships: it lies under test/, under a testdata/ or testkit/
// folder, is named like a test helper (its folder's name ends in "test":
// backendtest, daemontest, safetensorstest, …; or it lies under such a
// folder), or is one of testOnly.
func isProof(pkg string) bool {
	if !under(pkg, "") {
		return false
	}
	if under(pkg, "test") {
		return true
	}
	for _, p := range testOnly {
		if under(pkg, p) {
			return true
		}
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	for _, seg := range strings.Split(rel, "/") {
		if seg == "testdata" || seg == "testkit" || strings.HasSuffix(seg, "test") {
			return true
		}
	}
	return false
}

// shippedImportsOfProof returns "pkg imports imp" for every package of
// graph (non-test imports only) that ships and imports a proof package.
func shippedImportsOfProof(graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		if isProof(pkg) {
			continue
		}
		for _, imp := range imports {
			if isProof(imp) {
				out = append(out, fmt.Sprintf("%s imports %s", strings.TrimPrefix(pkg, module+"/"), strings.TrimPrefix(imp, module+"/")))
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestProofIsNotShipped checks the import graph without tests (what the
// binaries and the library packages link): no package that ships imports
// a test-only package, so that proof code (fakes, suites, probes) can sit
// next to what it proves without being linked into it.
func TestProofIsNotShipped(t *testing.T) {
	graph := importGraph(t, moduleRoot(t), []string{"./..."}, false)
	// The check must see both sides: shipped packages and proof packages.
	for _, dir := range []string{"cmd/wcache/cli", "plugins/cuda/cudabackend", "sdk/backendtest", "plugins/internal/testkit/gputest"} {
		if _, ok := graph[module+"/"+dir]; !ok {
			t.Errorf("go list did not report %s; the check is not looking at the module", dir)
		}
	}
	for _, v := range shippedImportsOfProof(graph) {
		t.Errorf("%s: what ships imports a test-only package (docs/architecture.md, \"The tree\")", v)
	}
}

// TestProofRuleCatchesAViolation plants shipped imports of proof packages,
// which must trip the rule, and proof importing proof or shipped code,
// which must not.
func TestProofRuleCatchesAViolation(t *testing.T) {
	m := func(dir string) string { return module + "/" + dir }
	for _, p := range []struct{ pkg, imp string }{
		{m("plugins/cuda/cudabackend"), m("plugins/internal/testkit/gputest")}, // a backend → its test suite
		{m("cmd/wcache/cli"), m("sdk/backendtest")},                            // the CLI → the conformance kit
		{m("core/daemon"), m("core/daemon/daemontest/testworld")},              // the daemon → its test world
		{m("sdk/plugin"), m("internal/grpcpipe")},                              // the plugin runtime → a test pipe
		{m("plugins/cuda"), m("plugins/cuda/internal/testkit/probe")},          // a plugin main → the probe
	} {
		if got := shippedImportsOfProof(map[string][]string{p.pkg: {p.imp}}); len(got) != 1 {
			t.Errorf("%s importing %s: %q, want one violation", p.pkg, p.imp, got)
		}
	}
	for _, p := range []struct{ pkg, imp string }{
		{m("plugins/internal/testkit/gputest"), m("sdk/backendtest")},
		{m("plugins/cuda/internal/testkit/wcache-cuda-probe"), m("plugins/cuda/internal/testkit/probe")},
		{m("sdk/backendtest"), m("internal/childproc")},
		{m("test/e2e"), m("core/client/clienttest")},
		{m("sdk/backendtest"), m("sdk/plugin")},
		{m("core/pluginhost"), m("internal/fdpass")},
	} {
		if got := shippedImportsOfProof(map[string][]string{p.pkg: {p.imp}}); len(got) != 0 {
			t.Errorf("%s importing %s is allowed, but the rule reports %q", p.pkg, p.imp, got)
		}
	}
	if isProof(m("core/testament")) || isProof(m("sdk/testkits")) || isProof("example.com/footest") {
		t.Error("isProof matches a folder that merely resembles a test helper's")
	}
}
