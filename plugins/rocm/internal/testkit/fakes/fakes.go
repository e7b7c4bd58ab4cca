// Package fakes builds the fake HIP runtime and fake amdsmi used by the
// ROCm backend's tests (plugins/rocm/testdata) with the shared builder
// (plugins/internal/testkit/fakelib), and tells tests whether to use the real
// libraries instead (EnvReal).
package fakes

import (
	"path/filepath"

	"github.com/wcache/wcache/plugins/internal/testkit/fakelib"
)

// EnvReal, when "1", makes the tests that support it use the real
// libamdhip64 and libamd_smi instead of the fakes (an AMD GPU check).
const EnvReal = "WCACHE_ROCM_REAL"

// Real reports whether EnvReal is "1" in getenv.
func Real(getenv func(string) string) bool { return getenv(EnvReal) == "1" }

// Library file names the fakes are built as.
const (
	HIPName    = "libamdhip64.so"
	AMDSMIName = "libamd_smi.so"
)

// includes are the fakes' header folders: fakeamd.h and the shared
// fakeengine.h. root is the plugins/rocm directory.
func includes(root string) []string {
	return []string{filepath.Join(root, "testdata", "fakehip"), filepath.Join(root, "..", "internal", "testkit", "fakelib", "include")}
}

// HIP builds root/testdata/fakehip/fakehip.c into dir/libamdhip64.so (or
// dir/<variant>/ when variant is not "", with the defines).
func HIP(root, dir, variant string, defines ...string) (string, error) {
	dir, err := fakelib.Variant(dir, variant)
	if err != nil {
		return "", err
	}
	return fakelib.Build(filepath.Join(root, "testdata", "fakehip", "fakehip.c"), dir, HIPName, includes(root), defines...)
}

// AMDSMI builds root/testdata/fakeamdsmi/fakeamdsmi.c into
// dir/libamd_smi.so.
func AMDSMI(root, dir string) (string, error) {
	return fakelib.Build(filepath.Join(root, "testdata", "fakeamdsmi", "fakeamdsmi.c"), dir, AMDSMIName, includes(root))
}

// All builds the fake HIP into dir in every variant of variants (a name
// and its defines, "" the full build; see HIP) and the fake amdsmi.
func All(root, dir string, variants map[string][]string) error {
	return fakelib.Set{Lib: HIP, Mgmt: AMDSMI}.Build(root, dir, variants)
}

// Copy copies a built library into a fresh folder under dir, so that the
// copy loads as a separate instance reading this test's environment.
func Copy(src, dir string) (string, error) { return fakelib.Copy(src, dir) }
