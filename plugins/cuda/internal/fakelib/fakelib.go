// Package fakelib builds the fake CUDA driver and fake NVML library used by
// the CUDA backend's tests (plugins/cuda/testdata) with gcc, and tells tests
// whether to use the real driver instead (EnvReal).
package fakelib

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// EnvReal, when "1", makes the tests that support it use the real
// libcuda.so.1 and libnvidia-ml.so.1 instead of the fakes (the GPU check).
const EnvReal = "WCACHE_CUDA_REAL"

// Real reports whether EnvReal is "1" in getenv.
func Real(getenv func(string) string) bool { return getenv(EnvReal) == "1" }

// ErrNoCompiler is returned when gcc is not installed.
var ErrNoCompiler = errors.New("gcc not found: the CUDA backend tests build a fake libcuda.so.1 with gcc (install it: apt-get install gcc)")

// Build compiles the C source src into a shared object at dir/name with
// gcc, adding -D for each define, and returns its path. The output has no
// SONAME, so copies at other paths load as separate instances.
func Build(src, dir, name string, defines ...string) (string, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", ErrNoCompiler
	}
	out := filepath.Join(dir, name)
	args := []string{"-shared", "-fPIC", "-O1", "-Wall", "-o", out}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	args = append(args, "-I", filepath.Join(filepath.Dir(src), "..", "fakecuda"), src, "-lpthread")
	cmd := exec.Command(gcc, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: gcc %v: %w\n%s", name, args, err, b)
	}
	return out, nil
}

// CUDA builds root/testdata/fakecuda/fakecuda.c into dir/libcuda.so.1 (or
// dir/<variant>/libcuda.so.1 when defines are given, variant naming them),
// root being the plugins/cuda directory.
func CUDA(root, dir, variant string, defines ...string) (string, error) {
	if variant != "" {
		dir = filepath.Join(dir, variant)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("fake libcuda variant dir: %w", err)
		}
	}
	return Build(filepath.Join(root, "testdata", "fakecuda", "fakecuda.c"), dir, "libcuda.so.1", defines...)
}

// NVML builds root/testdata/fakenvml/fakenvml.c into dir/libnvidia-ml.so.1.
func NVML(root, dir string) (string, error) {
	return Build(filepath.Join(root, "testdata", "fakenvml", "fakenvml.c"), dir, "libnvidia-ml.so.1")
}

// Copy copies the library at src into a new directory under dir and
// returns the copy's path. The dynamic loader treats the copy as a separate
// library with its own state (the fake reads CUDA_VISIBLE_DEVICES once per
// instance, at cuInit), so one test process can try several environments.
func Copy(src, dir string) (string, error) {
	sub, err := os.MkdirTemp(dir, "lib")
	if err != nil {
		return "", fmt.Errorf("copy fake library: %w", err)
	}
	dst := filepath.Join(sub, filepath.Base(src))
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("copy fake library: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return "", fmt.Errorf("copy fake library: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", fmt.Errorf("copy fake library: %w", err)
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("copy fake library: %w", err)
	}
	return dst, nil
}
