package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
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
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	w.Target = client.ByDeviceUUID(layout, w.UUID)
	return w, nil
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
// it (an error if it exits first or readyTimeout passes). started, when
// set, runs right after fork/exec.
func (w *world) startServe(ctx context.Context, started func(pid int), args ...string) (*daemonProc, error) {
	backend := w.Backend
	if backend == "" {
		backend = "mock"
	}
	o := testproc.ServeOptions{Options: testproc.Options{Path: filepath.Join(w.o.BinDir, "wcache"),
		Args: testproc.ServeArgs(backend, 0, args...), Poll: readyPoll}, UUID: w.UUID, Timeout: readyTimeout}
	if started != nil {
		o.Started = func(p *testproc.Process) { started(p.PID()) }
	}
	p, err := w.Serve(ctx, w.daemons, o)
	if err != nil {
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
func (d *daemonProc) PluginPID() (int, error) { return testproc.PluginPID(d.PID()) }

// status dials the world's daemon and asks for its status.
func (w *world) status(ctx context.Context) (*client.Status, error) { return w.Status(ctx, w.UUID) }

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
	return testproc.EngineConfig(dir, st.Config.DeviceCapability)
}
