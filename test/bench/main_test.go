package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// testHelperEnv makes the test binary act as `wcache-bench helper`: the
// harness starts fresh helper processes by re-executing HelperArgv.
const testHelperEnv = "WCACHE_BENCH_TEST_HELPER"

// testBinEnv carries the folder of the binaries TestMain built.
const testBinEnv = "WCACHE_BENCH_TEST_BIN"

func TestMain(m *testing.M) {
	if os.Getenv(testHelperEnv) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(runTests(m))
}

// runTests builds wcache, the mock plugin and, with gcc, the CUDA plugin
// (as make build does) for the end-to-end test, runs the tests and removes
// the binaries.
func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "wcache-bench-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	builds := []struct{ out, pkg, cgo string }{{"wcache", "./cmd/wcache", "0"}, {"wcache-backend-mock", "./plugins/mock", "0"}}
	if _, err := exec.LookPath("gcc"); err == nil {
		// The pipeline scenario runs the CUDA plugin on the fake driver.
		builds = append(builds, struct{ out, pkg, cgo string }{cudaPlugin, "./plugins/cuda", "1"})
	}
	for _, b := range builds {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", b.pkg, err, out)
			return 1
		}
	}
	if err := os.Setenv(testBinEnv, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
