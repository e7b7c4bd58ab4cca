package testproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/childproc"
	"github.com/wcache/wcache/internal/defaults"
)

// ServeArgs are the arguments of `wcache serve` on the device of ordinal
// gpu of backend, followed by args (--model DIR, --takeover, ...).
func ServeArgs(backend string, gpu int, args ...string) []string {
	return append([]string{"serve", "--backend", backend, "--gpu-id", strconv.Itoa(gpu)}, args...)
}

// ServeOptions describe a daemon started by World.Serve.
type ServeOptions struct {
	// Options start the process: Args are all of its arguments
	// (ServeArgs); a nil Env is the world's (World.Env).
	Options
	// UUID is the device whose ready file must name the process.
	UUID string
	// Timeout bounds the wait for the ready file (default 30 s).
	Timeout time.Duration
	// Started, when set, runs right after fork/exec, before the wait.
	Started func(*Process)
	// Via, when set, starts the process instead of the group's Start
	// (netns.Host.Start: in a network namespace); the group stops it all the same.
	Via func(Options) (*Process, error)
}

// Serve starts a daemon through g and waits until the ready file of its
// device names it. When it exits first, the wait times out or ctx ends,
// it kills the process and returns the error, with the process's output.
func (w *World) Serve(ctx context.Context, g *Group, o ServeOptions) (*Process, error) {
	p, err := w.Paths(o.UUID)
	if err != nil {
		return nil, err
	}
	if o.Env == nil {
		o.Env = w.Env()
	}
	defaults.Positive(&o.Timeout, 30*time.Second)
	start := g.Start
	if o.Via != nil {
		start = func(po Options) (*Process, error) { return g.adopt(o.Via(g.withDefaults(po))) }
	}
	proc, err := start(o.Options)
	if err != nil {
		return nil, err
	}
	if o.Started != nil {
		o.Started(proc)
	}
	if _, err := proc.WaitReady(ctx, p.Ready, o.Timeout); err != nil {
		proc.Kill()
		return nil, err
	}
	return proc, nil
}

// Paths are the default-layout paths of device uuid, as the binaries
// compute them in the world's environment.
func (w *World) Paths(uuid string) (paths.Paths, error) {
	layout, err := w.Layout()
	if err != nil {
		return paths.Paths{}, err
	}
	return layout.For(uuid)
}

// Status dials the daemon of device uuid in the world (discovery by UUID)
// and returns its Status.
func (w *World) Status(ctx context.Context, uuid string) (*client.Status, error) {
	layout, err := w.Layout()
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, client.ByDeviceUUID(layout, uuid), client.Options{ClientName: "testproc"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status(ctx)
}

// PluginPID is the backend plugin of the daemon at pid: its one child
// whose command name starts with "wcache-backend-".
func PluginPID(pid int) (int, error) {
	kids, err := ChildPIDs(pid)
	if err != nil {
		return 0, err
	}
	var plugins []int
	for _, k := range kids {
		comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(k), "comm"))
		if bytes.HasPrefix(comm, []byte("wcache-backend-")) {
			plugins = append(plugins, k)
		}
	}
	if len(plugins) != 1 {
		return 0, fmt.Errorf("pid %d has children %v, want one backend plugin", pid, kids)
	}
	return plugins[0], nil
}

// ModuleRoot is the folder holding the go.mod of the module around the
// working directory.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the wcache module")
	}
	return filepath.Dir(gomod), nil
}

// BuildBinaries builds wcache and the mock plugin into dir as `make build`
// does (CGO_ENABLED=0), and with cuda and gcc on PATH the CUDA plugin
// (with cgo). It builds from ModuleRoot.
func BuildBinaries(dir string, cuda bool) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	type build struct {
		bin, pkg string
		cgo      bool
	}
	builds := []build{{"wcache", "cmd/wcache", false}, {"wcache-backend-mock", "plugins/mock", false}}
	if _, err := exec.LookPath("gcc"); cuda && err == nil {
		builds = append(builds, build{"wcache-backend-cuda", "plugins/cuda", true})
	}
	for _, b := range builds {
		if err := childproc.GoBuild(filepath.Join(dir, b.bin), filepath.Join(root, b.pkg), b.cgo); err != nil {
			return err
		}
	}
	return nil
}

// BuildFakeCUDA compiles the fake CUDA driver of the source tree root
// (plugins/cuda/testdata/fakecuda, with the copy engine and IPC headers it
// shares with the fake HIP in plugins/internal/testkit/fakelib/include) with gcc
// into dir/libcuda.so.1 and returns its path.
func BuildFakeCUDA(root, dir string) (string, error) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return "", errors.New("gcc not found: the fake CUDA driver is built with it")
	}
	lib := filepath.Join(dir, "libcuda.so.1")
	src := filepath.Join(root, "plugins", "cuda", "testdata", "fakecuda", "fakecuda.c")
	include := filepath.Join(root, "plugins", "internal", "testkit", "fakelib", "include")
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-I", include, "-o", lib, src, "-lpthread").CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc %s: %w\n%s", src, err, out)
	}
	return lib, nil
}

// FakeCUDAEnv is the environment of a CUDA plugin on the fake driver lib
// (BuildFakeCUDA, no NVML) with the devices uuids of memory bytes each,
// health checks and direct I/O off.
func FakeCUDAEnv(lib string, memory uint64, uuids ...string) []string {
	return []string{"WCACHE_CUDA_LIBRARY=" + lib, "WCACHE_NVML_LIBRARY=" + filepath.Join(filepath.Dir(lib), "no-nvml.so"),
		"WCACHE_CUDA_HEALTH_INTERVAL=0", "WCACHE_CUDA_DIRECT_IO=0", "FAKECUDA_MEMORY=" + strconv.FormatUint(memory, 10),
		"FAKECUDA_DEVICES=" + strings.Join(uuids, ",")}
}

// InstallBinaries builds the binaries into dir (BuildBinaries) and names
// dir in the environment variable env, where the tests and the processes
// they start look for them.
func InstallBinaries(dir, env string, cuda bool) error {
	if err := BuildBinaries(dir, cuda); err != nil {
		return err
	}
	return os.Setenv(env, dir)
}
