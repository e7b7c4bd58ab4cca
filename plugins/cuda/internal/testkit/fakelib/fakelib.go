// Package fakelib builds the fake CUDA driver and fake NVML library used by
// the CUDA backend's tests (plugins/cuda/testdata) with the shared builder
// (plugins/internal/testkit/fakelib), and tells tests whether to use the real
// driver instead (EnvReal).
package fakelib

import (
	"path/filepath"

	shared "github.com/wcache/wcache/plugins/internal/testkit/fakelib"
)

// EnvReal, when "1", makes the tests that support it use the real
// libcuda.so.1 and libnvidia-ml.so.1 instead of the fakes (the GPU check).
const EnvReal = "WCACHE_CUDA_REAL"

// Real reports whether EnvReal is "1" in getenv.
func Real(getenv func(string) string) bool { return getenv(EnvReal) == "1" }

// ErrNoCompiler is returned when gcc is not installed.
var ErrNoCompiler = shared.ErrNoCompiler

// Build compiles the C source src (under plugins/cuda/testdata/<fake>/)
// into a shared object at dir/name with gcc (the fake libcuda's folder and
// the shared fake copy engine, plugins/internal/testkit/fakelib/include, on the
// include path), adding -D for each define, and returns its path.
func Build(src, dir, name string, defines ...string) (string, error) {
	testdata := filepath.Join(filepath.Dir(src), "..")
	return shared.Build(src, dir, name, []string{filepath.Join(testdata, "fakecuda"),
		filepath.Join(testdata, "..", "..", "internal", "testkit", "fakelib", "include")}, defines...)
}

// CUDA builds root/testdata/fakecuda/fakecuda.c into dir/libcuda.so.1 (or
// dir/<variant>/libcuda.so.1 when defines are given, variant naming them),
// root being the plugins/cuda directory.
func CUDA(root, dir, variant string, defines ...string) (string, error) {
	dir, err := shared.Variant(dir, variant)
	if err != nil {
		return "", err
	}
	return Build(filepath.Join(root, "testdata", "fakecuda", "fakecuda.c"), dir, "libcuda.so.1", defines...)
}

// NVML builds root/testdata/fakenvml/fakenvml.c into dir/libnvidia-ml.so.1.
func NVML(root, dir string) (string, error) {
	return Build(filepath.Join(root, "testdata", "fakenvml", "fakenvml.c"), dir, "libnvidia-ml.so.1")
}

// All builds the fake libcuda into dir in every variant of variants (a
// name and its defines, "" the full build; see CUDA) and the fake NVML.
func All(root, dir string, variants map[string][]string) error {
	return shared.Set{Lib: CUDA, Mgmt: NVML}.Build(root, dir, variants)
}

// Copy copies the library at src into a new directory under dir (see
// plugins/internal/testkit/fakelib.Copy).
func Copy(src, dir string) (string, error) { return shared.Copy(src, dir) }
