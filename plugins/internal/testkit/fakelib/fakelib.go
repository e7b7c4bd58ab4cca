// Package fakelib builds the fake vendor libraries that the GPU backends'
// tests load instead of the real driver (the fake libcuda and NVML of
// plugins/cuda/testdata, the fake libamdhip64 and libamd_smi of
// plugins/rocm/testdata): C sources compiled with gcc by the tests, so that
// every backend is tested through its real dlopen path on a machine without
// a GPU. The fake drivers share one core, include/fakecore.h (allocations,
// pinned memory, streams and the paced copy engine, copies, IPC, the
// sticky error); each vendor's file maps its entry points onto it.
package fakelib

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// ErrNoCompiler is returned when gcc is not installed.
var ErrNoCompiler = errors.New("gcc not found: the GPU backend tests build fake vendor libraries with gcc (install it: apt-get install gcc)")

// Build compiles the C source src into a shared object at dir/name with
// gcc, with -I for each of includes (src's own folder is always searched)
// and -D for each define, linked with -lpthread, and returns its path. The
// output has no SONAME, so copies at other paths load as separate
// instances (see Copy).
func Build(src, dir, name string, includes []string, defines ...string) (string, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", ErrNoCompiler
	}
	out := filepath.Join(dir, name)
	args := []string{"-shared", "-fPIC", "-O1", "-Wall", "-o", out}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	for _, inc := range includes {
		args = append(args, "-I", inc)
	}
	args = append(args, src, "-lpthread")
	cmd := exec.Command(gcc, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: gcc %v: %w\n%s", name, args, err, b)
	}
	return out, nil
}

// Variant returns dir/variant, created, for a build with other defines
// (dir itself, created, when variant is "").
func Variant(dir, variant string) (string, error) {
	dir = filepath.Join(dir, variant)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("fake library variant dir: %w", err)
	}
	return dir, nil
}

// Set is one vendor's fake libraries: Lib builds the fake vendor library
// in a variant (see Variant), Mgmt the fake management library (NVML,
// amdsmi), both from the vendor's folder root (plugins/<vendor>).
type Set struct {
	Lib  func(root, dir, variant string, defines ...string) (string, error)
	Mgmt func(root, dir string) (string, error)
}

// Build builds s.Lib into dir in every variant of variants (a variant's
// name and its defines; "" for the full library), then s.Mgmt.
func (s Set) Build(root, dir string, variants map[string][]string) error {
	for variant, defines := range variants {
		if _, err := s.Lib(root, dir, variant, defines...); err != nil {
			return err
		}
	}
	_, err := s.Mgmt(root, dir)
	return err
}

// Copy copies the library at src into a new directory under dir and
// returns the copy's path. The dynamic loader treats the copy as a separate
// library with its own state (the fakes read their environment once per
// instance, at initialisation), so one test process can try several
// environments.
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
