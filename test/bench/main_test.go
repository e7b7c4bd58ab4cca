package bench

import (
	"fmt"
	"os"
	"testing"

	"github.com/wcache/wcache/test/testproc"
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
	if err == nil {
		defer os.RemoveAll(dir)
		// The pipeline scenario runs the CUDA plugin on the fake driver.
		err = testproc.InstallBinaries(dir, testBinEnv, true)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
