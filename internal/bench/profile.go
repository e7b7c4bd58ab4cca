package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/plan"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/plugins/mock/mockbackend"
	"github.com/wcache/wcache/sdk"
)

// Profiles of slow paths. They run in the harness process, so that
// runtime/pprof sees them: the mock backend in-process (the same code the
// plugin runs) and, for start-up and attach, the daemon in-process on top
// of it (the same core/daemon that `wcache serve` runs, minus the process
// and plugin start).
const (
	// profileTopLines is how many functions a summary keeps.
	profileTopLines = 12
	// profileFillLines is how many the fill's keeps: enough for the
	// mock's read and write paths below the system-call frames.
	profileFillLines = 16
)

// profile runs fn under the CPU profiler and returns the top of `go tool
// pprof -top` of the result; pprofArgs are extra pprof options (e.g.
// -ignore to leave out a path that is measured elsewhere).
func profile(dir string, fn func() error, pprofArgs ...string) (string, error) {
	f, err := os.CreateTemp(dir, "cpu-*.pprof")
	if err != nil {
		return "", fmt.Errorf("profile: %w", err)
	}
	defer os.Remove(f.Name())
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return "", fmt.Errorf("profile: %w", err)
	}
	ferr := fn()
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("profile: %w", err)
	}
	if ferr != nil {
		return "", ferr
	}
	return pprofTop(f.Name(), pprofArgs...)
}

// pprofTop summarises a profile written by this process (runtime/pprof
// profiles carry their symbols) with `go tool pprof -top`, once by own
// time and once by cumulative time.
func pprofTop(path string, extra ...string) (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, mode := range []struct{ title, flag string }{{"by own time (flat)", ""}, {"by cumulative time (cum)", "-cum"}} {
		args := append([]string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", profileTopLines)}, extra...)
		if mode.flag != "" {
			args = append(args, mode.flag)
		}
		out, err := exec.Command(goBin, append(args, path)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go tool pprof: %w\n%s", err, out)
		}
		keep := []string{"# " + mode.title}
		for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
			if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Time:") ||
				strings.HasPrefix(line, "Type:") || strings.HasPrefix(line, "Dropped") || strings.HasPrefix(line, "Showing") {
				continue
			}
			keep = append(keep, line)
		}
		parts = append(parts, strings.Join(keep, "\n"))
	}
	return strings.Join(parts, "\n\n"), nil
}

// inProcPlugin runs a mock backend in this process behind daemon.Plugin.
type inProcPlugin struct {
	b      *mockbackend.Backend
	exited chan struct{}
}

func (p *inProcPlugin) Backend() sdk.Backend    { return p.b }
func (p *inProcPlugin) Exited() <-chan struct{} { return p.exited }
func (p *inProcPlugin) ExitError() error        { return errors.New("in-process mock backend never exits") }
func (p *inProcPlugin) Close() error            { return p.b.Close() }

// newInProcMock is a mock backend of the world's device in this process.
func newInProcMock(w *world, memory uint64) (*mockbackend.Backend, error) {
	cfg := mockbackend.DefaultConfig()
	cfg.DeviceUUIDs, cfg.Memory, cfg.Dir = []string{w.UUID}, memory, w.MockDir
	return mockbackend.New(cfg, nil)
}

// loadWorkerFrames matches the mock's Load workers (copyChunks and its
// goroutines) in pprof's -focus and -ignore.
const loadWorkerFrames = `mockbackend\.\(\*Backend\)\.copyChunks`

// profileFill profiles the mock's Load of m in this process, each load
// into fresh allocations as the daemon's is: every round allocates the
// plan's arenas, loads them and frees them, until o.ProfileLoop has passed
// (at least one round). The summary keeps only the load workers' samples
// (-focus), so allocation and freeing stay out of it, as they are out of
// the daemon's load time.
func profileFill(ctx context.Context, o Options, m *Model) (string, error) {
	memory := m.Bytes + m.Bytes/8 + (64 << 20)
	w, err := newWorld(o, "profile-fill", memory)
	if err != nil {
		return "", err
	}
	defer w.Close()
	b, err := newInProcMock(w, memory)
	if err != nil {
		return "", err
	}
	defer b.Close()
	ck, err := safetensors.OpenCheckpoint(m.Dir)
	if err != nil {
		return "", err
	}
	pl, err := plan.Build(ck, plan.Options{})
	if err != nil {
		return "", err
	}
	round := func() error {
		ids := make([]sdk.AllocationID, 0, len(pl.Allocations))
		defer func() {
			for _, id := range ids {
				_ = b.Free(ctx, id)
			}
		}()
		for _, a := range pl.Allocations {
			id, _, err := b.Allocate(ctx, 0, a.Bytes)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		for i, a := range pl.Allocations {
			if err := b.Load(ctx, ids[i], a.Extents, nil); err != nil {
				return err
			}
		}
		return nil
	}
	return profile(w.Root, func() error {
		for end := time.Now().Add(o.ProfileLoop); ; {
			if err := round(); err != nil {
				return err
			}
			if time.Now().After(end) {
				return nil
			}
		}
	}, "-focus="+loadWorkerFrames, fmt.Sprintf("-nodecount=%d", profileFillLines))
}

// startInProcDaemon starts core/daemon on an in-process mock for m.
func startInProcDaemon(ctx context.Context, w *world, m *Model) (*daemon.Daemon, error) {
	b, err := newInProcMock(w, m.Bytes+m.Bytes/8+(64<<20))
	if err != nil {
		return nil, err
	}
	return daemon.Start(ctx, &inProcPlugin{b: b, exited: make(chan struct{})},
		daemon.Options{GPU: 0, Model: m.Dir, Config: cacheconfig.Default(), Layout: w.Layout})
}

// stopInProcDaemon forces the daemon down and waits for Run.
func stopInProcDaemon(d *daemon.Daemon, run <-chan error) error {
	if _, err := d.Stop(context.Background(), true, 0); err != nil {
		return err
	}
	return <-run
}

// profileStartup profiles core/daemon.Start of m in this process (plugin
// and process start excluded: they are not in this process). The load's
// own samples are left out of the summary: start-up overhead is the time
// beside the load.
func profileStartup(ctx context.Context, o Options, m *Model) (string, error) {
	w, err := newWorld(o, "profile-startup", m.Bytes+m.Bytes/8+(64<<20))
	if err != nil {
		return "", err
	}
	defer w.Close()
	var d *daemon.Daemon
	top, err := profile(w.Root, func() error {
		var err error
		d, err = startInProcDaemon(ctx, w, m)
		return err
	}, "-ignore="+loadWorkerFrames)
	if err != nil {
		return "", err
	}
	run := make(chan error, 1)
	go func() { run <- d.Run(ctx) }()
	return top, stopInProcDaemon(d, run)
}

// profileAttach profiles attach + release in a loop against core/daemon
// in this process, client and daemon sides in one profile.
func profileAttach(ctx context.Context, o Options, m *Model) (string, error) {
	w, err := newWorld(o, "profile-attach", m.Bytes+m.Bytes/8+(64<<20))
	if err != nil {
		return "", err
	}
	defer w.Close()
	d, err := startInProcDaemon(ctx, w, m)
	if err != nil {
		return "", err
	}
	run := make(chan error, 1)
	go func() { run <- d.Run(ctx) }()
	cfg, err := w.engineConfig(ctx, m.Dir)
	if err != nil {
		return "", err
	}
	c, err := client.Dial(ctx, client.ByDeviceUUID(w.Layout, w.UUID), client.Options{ClientName: "wcache-bench profile"})
	if err != nil {
		return "", err
	}
	top, err := profile(w.Root, func() error {
		for end := time.Now().Add(o.ProfileLoop); time.Now().Before(end); {
			a, err := c.Attach(ctx, cfg)
			if err != nil {
				return err
			}
			if err := a.Lease.Close(); err != nil {
				return err
			}
		}
		return nil
	})
	c.Close()
	if serr := stopInProcDaemon(d, run); err == nil {
		err = serr
	}
	return top, err
}

// profileRestartAttach profiles what the Go attach helper does — digest,
// dial, attach, map every handle, unmap, release — in a loop against
// core/daemon in this process.
func profileRestartAttach(ctx context.Context, o Options, m *Model) (string, error) {
	w, err := newWorld(o, "profile-restart", m.Bytes+m.Bytes/8+(64<<20))
	if err != nil {
		return "", err
	}
	defer w.Close()
	d, err := startInProcDaemon(ctx, w, m)
	if err != nil {
		return "", err
	}
	run := make(chan error, 1)
	go func() { run <- d.Run(ctx) }()
	capability, err := w.deviceCapability(ctx)
	if err != nil {
		return "", err
	}
	top, err := profile(w.Root, func() error {
		for end := time.Now().Add(o.ProfileLoop); time.Now().Before(end); {
			digest, err := cacheconfig.CheckpointDigestDir(m.Dir)
			if err != nil {
				return err
			}
			cfg := cacheconfig.Default()
			cfg.Model, cfg.DeviceCapability, cfg.CheckpointDigest = m.Dir, capability, digest
			a, err := client.Attach(ctx, client.ByDeviceUUID(w.Layout, w.UUID), cfg, client.Options{})
			if err != nil {
				return err
			}
			maps, err := mapHandles(a.Manifest.Handles)
			if err != nil {
				a.Lease.Close()
				return err
			}
			unmapAll(maps)
			if err := a.Lease.Close(); err != nil {
				return err
			}
		}
		return nil
	})
	if serr := stopInProcDaemon(d, run); err == nil {
		err = serr
	}
	return top, err
}

// profilePythonAttach runs the Python attach helper against a real daemon
// of m with cProfile over rounds attaches and returns the pstats summary.
func profilePythonAttach(ctx context.Context, o Options, m *Model, rounds int) (string, error) {
	w, err := newWorld(o, "profile-python", m.Bytes+m.Bytes/8+(64<<20))
	if err != nil {
		return "", err
	}
	defer w.Close()
	d, err := w.startServe(ctx, m.Dir, true, nil)
	if err != nil {
		return "", err
	}
	defer d.Stop()
	capability, err := w.deviceCapability(ctx)
	if err != nil {
		return "", d.withOutput(err)
	}
	out := filepath.Join(w.Root, "attach.pstats.txt")
	cmd, err := w.pythonCmd(ctx, "attach_torch.py", pyAttachTorch, m.Dir, w.UUID, capability, out, fmt.Sprint(rounds))
	if err != nil {
		return "", err
	}
	if _, err := runFresh(ctx, cmd); err != nil {
		return "", d.withOutput(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return "", fmt.Errorf("python profile: %w", err)
	}
	return trimPstats(string(b)), d.Stop()
}

// trimPstats drops pstats' blank lines and its "Ordered by"/"List reduced"
// chatter, keeping the table lines.
func trimPstats(s string) string {
	var keep []string
	for line := range strings.SplitSeq(s, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "Ordered by") || strings.HasPrefix(t, "List reduced") {
			continue
		}
		keep = append(keep, strings.TrimRight(line, " "))
	}
	return strings.Join(keep, "\n")
}

// goTool finds the go command: on PATH, else in $GOROOT/bin.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); isExecutable(p) {
			return p, nil
		}
	}
	return "", errors.New("the go command is not on PATH (nor in $GOROOT/bin): it runs `go tool pprof` and `go test -bench`")
}

// isExecutable reports whether path is an executable regular file.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
