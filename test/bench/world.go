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

// world is one scenario's private environment: a testproc.World of one
// mock device, its shared memory in Options.ShmDir, and the daemons
// started in it (serving Backend, "" for the mock). Every process it
// starts gets Env(); Target finds its daemon.
type world struct {
	*testproc.World
	o             Options
	UUID, Backend string
	Target        client.Target
	daemons       *testproc.Group
	// via, when set, starts the daemons (testproc.ServeOptions.Via).
	via func(testproc.Options) (*testproc.Process, error)
}

// Timeouts of daemon processes, generous for a busy machine; readyPoll,
// how often the ready file is looked for, is the resolution of
// start-to-ready.
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
	layout, err := tw.Layout()
	if err != nil {
		_ = tw.Close()
		return nil, fmt.Errorf("world %s: %w", name, err)
	}
	return &world{World: tw, o: o, UUID: tw.UUIDs[0], Target: client.ByDeviceUUID(layout, tw.UUIDs[0]),
		daemons: testproc.NewGroup(testproc.Options{})}, nil
}

// Close stops the world's daemons and removes its directories (shared
// memory included).
func (w *world) Close() error {
	w.daemons.StopAll(stopTimeout)
	return w.World.Close()
}

// daemonProc is a running `wcache serve` (in its own process group, with
// its plugin); StartToReady is fork/exec until its ready file named it.
type daemonProc struct {
	*testproc.Process
	StartToReady time.Duration
}

// startServe starts `wcache serve` on the world's device of ordinal gpu
// with args (--model DIR, --takeover) and returns once it is ready.
// started, when set, runs right after fork/exec.
func (w *world) startServe(ctx context.Context, gpu int, started func(pid int), args ...string) (*daemonProc, error) {
	backend := w.Backend
	if backend == "" {
		backend = "mock"
	}
	o := testproc.ServeOptions{Options: testproc.Options{Path: filepath.Join(w.o.BinDir, "wcache"),
		Args: testproc.ServeArgs(backend, gpu, args...), Poll: readyPoll}, UUID: w.UUIDs[gpu], Timeout: readyTimeout, Via: w.via}
	if started != nil {
		o.Started = func(p *testproc.Process) { started(p.PID()) }
	}
	p, err := w.Serve(ctx, w.daemons, o)
	if err != nil {
		return nil, err
	}
	return &daemonProc{Process: p, StartToReady: time.Since(p.Started)}, nil
}

// A server is a world whose daemon d serves m; cfg is the config an
// engine sends for m, c a connection to d (serveTargets opens it) and laps
// the times taken on it.
type server struct {
	*world
	d    *daemonProc
	m    *Model
	cfg  cacheconfig.Config
	c    *client.Client
	laps laps
}

// serving is a new world whose daemon loads the models of load in order
// (none: an empty daemon, for a publish of m) and whose engine config is
// m's; on an error it leaves nothing behind.
func serving(ctx context.Context, o Options, name string, m *Model, load ...*Model) (*server, error) {
	room := *m // the mock device holds m and every other model loaded
	var args []string
	for _, b := range load {
		if args = append(args, "--model", b.Dir); b != m {
			room.Bytes += b.Bytes
		}
	}
	w, err := newWorld(o, name, &room)
	if err != nil {
		return nil, err
	}
	s := &server{world: w, m: m, laps: laps{}}
	if s.d, err = w.startServe(ctx, 0, nil, args...); err == nil {
		s.cfg, err = w.engineConfig(ctx, m.Dir)
		err = s.d.withOutput(err)
	}
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	return s, nil
}

// serve is serving of the checkpoint of spec, generated if need be.
func (e *Env) serve(ctx context.Context, name string, spec ModelSpec) (*server, error) {
	m, err := e.Model(spec)
	if err != nil {
		return nil, err
	}
	return serving(ctx, e.Options, name, m, m)
}

// connect opens s.c, a connection to the daemon named for name, and makes
// one Status round trip on it (an error carries the daemon's output).
func (s *server) connect(ctx context.Context, name string) (err error) {
	if s.c, err = client.Dial(ctx, s.Target, client.Options{ClientName: "wcache-bench " + name}); err == nil {
		_, err = s.c.Status(ctx)
	}
	return s.d.withOutput(err)
}

// Close closes the connection to the daemon, stops it and removes the world.
func (s *server) Close() error {
	if s.c != nil {
		s.c.Close()
	}
	return s.world.Close()
}

// Stop stops the daemon (testproc.Process.Stop) with stopTimeout of grace.
func (d *daemonProc) Stop() error { return d.Process.Stop(stopTimeout) }

// withOutput adds the tail of the daemon's output to err (nil stays nil).
func (d *daemonProc) withOutput(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w\nwcache serve (pid %d) output:\n%s", err, d.PID(), tail(d.Output()))
}

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
