package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/test/testproc"
)

// world is one scenario's private environment, a testproc.World (the
// harness shared with the e2e tests) of one mock device whose
// shared-memory folder is in Options.ShmDir, and the `wcache serve`
// daemons started in it. Every process the scenario starts gets Env();
// Target finds the world's daemon.
type world struct {
	*testproc.World
	o      Options
	UUID   string
	Target client.Target
	ready  string
	// Backend is what `wcache serve` runs ("": the mock).
	Backend string
	daemons *testproc.Group
}

// Timeouts of daemon processes: generous, a healthy daemon of a few GiB is
// ready in seconds even on a busy two-core machine. readyPoll is how often
// the ready file is looked for: the resolution of start-to-ready.
const (
	readyTimeout = 10 * time.Minute
	stopTimeout  = 60 * time.Second
	readyPoll    = 250 * time.Microsecond
)

// newWorld creates the directories of a world named name whose mock device
// holds m and some room.
func newWorld(o Options, name string, m *Model) (*world, error) {
	mockDir, err := os.MkdirTemp(o.ShmDir, "wcache-bench-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("world %s: shared-memory folder: %w", name, err)
	}
	bin, err := filepath.Abs(o.BinDir)
	var pysrc string
	if err == nil {
		pysrc, err = filepath.Abs(filepath.Join(o.RepoDir, "clients", "python", "src"))
	}
	var tw *testproc.World
	if err == nil {
		tw, err = testproc.NewWorld(testproc.WorldOptions{Prefix: "wcb-", MockDir: mockDir, PluginDir: bin})
	}
	if err != nil {
		_ = os.RemoveAll(mockDir)
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	tw.Setenv("WCACHE_MOCK_MEMORY="+strconv.FormatUint(m.Bytes+m.Bytes/8+(64<<20), 10),
		"PYTHONPATH="+pysrc, // the Python helpers import the client from the source tree
		"PYTHONDONTWRITEBYTECODE=1")
	w := &world{World: tw, o: o, UUID: tw.UUIDs[0], daemons: testproc.NewGroup(testproc.Options{})}
	layout, err := w.Layout()
	var p paths.Paths
	if err == nil {
		p, err = layout.For(w.UUID)
	}
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	w.Target, w.ready = client.ByDeviceUUID(layout, w.UUID), p.Ready
	return w, nil
}

// ShmAllocated is the memory held by the mock's allocations: the files of
// the world's shared-memory folder (posix-shm handles) and the memfds that
// the processes pids hold open (memfd handles, each inode once), by their
// allocated blocks (a sparse file counts only the pages written).
func (w *world) ShmAllocated(pids ...int) (uint64, error) {
	var total uint64
	seen := map[[2]uint64]bool{} // device and inode
	count := func(path string, stat func(string, *unix.Stat_t) error) error {
		var st unix.Stat_t
		if err := stat(path, &st); err != nil || seen[[2]uint64{st.Dev, st.Ino}] || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return err
		}
		seen[[2]uint64{st.Dev, st.Ino}], total = true, total+uint64(st.Blocks)*512
		return nil
	}
	for _, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return 0, fmt.Errorf("memfds of pid %d: %w", pid, err)
		}
		for _, fd := range fds {
			link := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
			if target, err := os.Readlink(link); err == nil && strings.HasPrefix(target, "/memfd:") {
				_ = count(link, unix.Stat) // a descriptor closed meanwhile counts nothing
			}
		}
	}
	entries, err := os.ReadDir(w.MockDir)
	if err != nil {
		return 0, fmt.Errorf("shared-memory files: %w", err)
	}
	for _, e := range entries {
		if err := count(filepath.Join(w.MockDir, e.Name()), unix.Lstat); err != nil && !errors.Is(err, unix.ENOENT) {
			return 0, fmt.Errorf("shared-memory files: %w", err)
		}
	}
	return total, nil
}

// Close stops the world's daemons and removes its directories (shared
// memory included).
func (w *world) Close() error {
	w.daemons.StopAll(stopTimeout)
	return w.World.Close()
}

// daemonProc is a running `wcache serve`, in its own process group so that
// its plugin goes with it.
type daemonProc struct {
	*testproc.Process
	// StartToReady is fork/exec until the ready file first named it.
	StartToReady time.Duration
}

// startServe starts `wcache serve` on the world's device 0 with args after
// --gpu-id (--model DIR, --takeover) and returns once its ready file names
// it (an error if it exits first or readyTimeout passes). onStart, when
// set, runs right after fork/exec.
func (w *world) startServe(ctx context.Context, onStart func(pid int), args ...string) (*daemonProc, error) {
	backend := w.Backend
	if backend == "" {
		backend = "mock"
	}
	p, err := w.daemons.Start(testproc.Options{Path: filepath.Join(w.o.BinDir, "wcache"),
		Args: append([]string{"serve", "--backend", backend, "--gpu-id", "0"}, args...), Env: w.Env(), Poll: readyPoll})
	if err != nil {
		return nil, err
	}
	if onStart != nil {
		onStart(p.PID())
	}
	if _, err := p.WaitReady(ctx, w.ready, readyTimeout); err != nil {
		p.Kill()
		return nil, err
	}
	return &daemonProc{Process: p, StartToReady: time.Since(p.Started)}, nil
}

// serving is a new world whose daemon serves m, with the config an engine
// sends for m; on an error it leaves nothing behind.
func serving(ctx context.Context, o Options, name string, m *Model) (*world, *daemonProc, cacheconfig.Config, error) {
	var cfg cacheconfig.Config
	w, err := newWorld(o, name, m)
	if err != nil {
		return nil, nil, cfg, err
	}
	d, err := w.startServe(ctx, nil, "--model", m.Dir)
	if err == nil {
		cfg, err = w.engineConfig(ctx, m.Dir)
		err = d.withOutput(err)
	}
	if err != nil {
		_ = w.Close()
		return nil, nil, cfg, err
	}
	return w, d, cfg, nil
}

// Stop sends SIGTERM and waits for the daemon to drain and exit; after
// stopTimeout it kills the whole process group. It returns nil for a
// clean exit, else an error with the daemon's output.
func (d *daemonProc) Stop() error { return d.Process.Stop(stopTimeout) }

// withOutput adds the tail of the daemon's output to err (nil stays nil).
func (d *daemonProc) withOutput(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w\nwcache serve (pid %d) output:\n%s", err, d.PID(), tail(d.Output()))
}

// PluginPID finds the daemon's backend plugin: its child process.
func (d *daemonProc) PluginPID() (int, error) {
	kids, err := testproc.ChildPIDs(d.PID())
	if err != nil {
		return 0, err
	}
	if len(kids) != 1 {
		return 0, fmt.Errorf("pid %d has children %v, want one backend plugin", d.PID(), kids)
	}
	return kids[0], nil
}

// status dials the world's daemon and asks for its status.
func (w *world) status(ctx context.Context) (*client.Status, error) {
	c, err := client.Dial(ctx, w.Target, client.Options{ClientName: "wcache-bench"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status(ctx)
}

// loaded is the start-up phases the world's daemon d reports (Status),
// which must show a load of m's bytes.
func (w *world) loaded(ctx context.Context, d *daemonProc, m *Model) (client.StartPhases, error) {
	st, err := w.status(ctx)
	if err != nil {
		return client.StartPhases{}, d.withOutput(err)
	}
	if p := st.StartPhases; p.Load <= 0 || p.BytesLoaded != m.Bytes {
		return p, d.withOutput(fmt.Errorf("daemon reports a load of %d bytes in %s, the checkpoint has %d bytes",
			p.BytesLoaded, p.Load, m.Bytes))
	}
	return st.StartPhases, nil
}

// engineConfig is the config an engine sends for the checkpoint in dir to
// the world's daemon, whose device capability it knows from its runtime.
func (w *world) engineConfig(ctx context.Context, dir string) (cacheconfig.Config, error) {
	st, err := w.status(ctx)
	if err != nil {
		return cacheconfig.Config{}, err
	}
	return engineConfig(dir, st.Config.DeviceCapability)
}
