package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
)

// fakeProc is a daemon that exists only in the test: it exits when told to
// or when signalled (SIGTERM unless it ignores it, SIGKILL always).
type fakeProc struct {
	pid        int
	spec       ChildSpec
	ignoreTerm bool
	exitCh     chan ExitStatus

	mu      sync.Mutex
	signals []syscall.Signal
	exited  bool
}

func (p *fakeProc) PID() int { return p.pid }

func (p *fakeProc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	p.signals = append(p.signals, sig)
	p.mu.Unlock()
	switch {
	case sig == syscall.SIGKILL:
		p.exit(ExitStatus{Code: -1, Signal: syscall.SIGKILL})
	case sig == syscall.SIGTERM && !p.ignoreTerm:
		p.exit(ExitStatus{Code: 0})
	}
	return nil
}

// exit makes Wait return st; only the first exit counts.
func (p *fakeProc) exit(st ExitStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		p.exited = true
		p.exitCh <- st
	}
}

func (p *fakeProc) Wait() (ExitStatus, error) { return <-p.exitCh, nil }

func (p *fakeProc) gotSignals() []syscall.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.signals)
}

// fakeWorld is the launcher's environment in unit tests: devices, paths,
// cleanup, ready files and a process starter, all in memory.
type fakeWorld struct {
	t     *testing.T
	uuids map[int]string // GPU ordinal → UUID

	mu       sync.Mutex
	nextPID  int
	procs    []*fakeProc
	ready    map[string]daemonfile.Ready // ready path → content
	cleanups []daemonfile.CleanupOptions
	cleaned  []string // UUIDs

	// Hooks set by tests.
	onStart    func(p *fakeProc) // default: ready at once
	startErr   map[int]error     // by GPU
	cleanupErr map[string]error  // by UUID
	ignoreTerm map[int]bool      // by GPU
}

func newFakeWorld(t *testing.T, gpus int) *fakeWorld {
	w := &fakeWorld{t: t, uuids: map[int]string{}, nextPID: 1000, ready: map[string]daemonfile.Ready{},
		startErr: map[int]error{}, cleanupErr: map[string]error{}, ignoreTerm: map[int]bool{}}
	for i := 0; i < gpus; i++ {
		w.uuids[i] = fmt.Sprintf("GPU-fake-%04d", i)
	}
	w.onStart = func(p *fakeProc) { w.setReady(p, p.pid) }
	return w
}

func (w *fakeWorld) DeviceUUID(_ context.Context, ordinal int) (string, error) {
	u, ok := w.uuids[ordinal]
	if !ok {
		return "", fmt.Errorf("ordinal %d: no such device", ordinal)
	}
	return u, nil
}

func (w *fakeWorld) For(uuid string) (paths.Paths, error) {
	if err := paths.ValidateDeviceUUID(uuid); err != nil {
		return paths.Paths{}, err
	}
	ready := "/fake/" + uuid + ".ready.json"
	return paths.Paths{DeviceUUID: uuid, Socket: "/fake/" + uuid + ".sock", Ready: ready, Lock: ready + ".lock"}, nil
}

func (w *fakeWorld) cleanup(_ context.Context, p paths.Paths, opts daemonfile.CleanupOptions) (daemonfile.CleanupResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cleanups = append(w.cleanups, opts)
	w.cleaned = append(w.cleaned, p.DeviceUUID)
	if err := w.cleanupErr[p.DeviceUUID]; err != nil {
		return daemonfile.CleanupResult{}, err
	}
	return daemonfile.CleanupResult{Action: "none"}, nil
}

func (w *fakeWorld) readReady(path string) (daemonfile.Ready, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.ready[path]
	if !ok {
		return daemonfile.Ready{}, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
	}
	return r, nil
}

// setReady writes p's ready file naming pid.
func (w *fakeWorld) setReady(p *fakeProc, pid int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	path := "/fake/" + p.spec.DeviceUUID + ".ready.json"
	w.ready[path] = daemonfile.Ready{PID: pid, DeviceUUID: p.spec.DeviceUUID, Socket: "/fake/" + p.spec.DeviceUUID + ".sock"}
}

func (w *fakeWorld) Start(spec ChildSpec) (Process, error) {
	if err := w.startErr[spec.Rank.GPUID]; err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.nextPID++
	p := &fakeProc{pid: w.nextPID, spec: spec, ignoreTerm: w.ignoreTerm[spec.Rank.GPUID], exitCh: make(chan ExitStatus, 1)}
	w.procs = append(w.procs, p)
	w.mu.Unlock()
	w.onStart(p)
	return p, nil
}

func (w *fakeWorld) started() []*fakeProc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.procs)
}

// options are launcher options over the fake world for tp ranks on one node.
// launchSupervised launches tp fake daemons and supervises them in the
// background; Supervise's result comes on the channel.
func (w *fakeWorld) launchSupervised(t *testing.T, tp int) ([]*fakeProc, <-chan error) {
	t.Helper()
	g, err := Launch(context.Background(), w.options(tp, nil))
	if err != nil {
		t.Fatal(err)
	}
	procs := w.started()
	errc := make(chan error, 1)
	go func() { errc <- g.Supervise(context.Background()) }()
	return procs, errc
}

func (w *fakeWorld) options(tp int, out *bytes.Buffer) Options {
	o := Options{
		Topology:     Topology{TPSize: tp, PPSize: 1, NNodes: 1, GPUIDStep: 1},
		Devices:      w,
		Layout:       w,
		Executable:   "/bin/wcache",
		ServeArgs:    []string{"--backend", "mock", "--model", "/m"},
		Env:          []string{"A=1"},
		ReadyTimeout: 5 * time.Second,
		StopGrace:    5 * time.Second,
		PollInterval: 5 * time.Millisecond,
		Logf:         w.t.Logf,
		Starter:      w,
		Cleanup:      w.cleanup,
		LaunchLock:   func(paths.Paths) (func(), error) { return func() {}, nil },
		ReadReady:    w.readReady,
	}
	if out != nil {
		o.Output = out
	}
	return o
}

func TestLaunchHappyPathAndStopOnCancel(t *testing.T) {
	w := newFakeWorld(t, 4)
	var out bytes.Buffer
	opts := w.options(2, &out)
	opts.Topology.BaseGPUID = 2
	g, err := Launch(context.Background(), opts)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	ds := g.Daemons()
	if len(ds) != 2 {
		t.Fatalf("%d daemons, want 2", len(ds))
	}
	procs := w.started()
	for i, d := range ds {
		wantUUID := w.uuids[2+i]
		if d.Rank.GPUID != 2+i || d.Rank.TPRank != i || d.DeviceUUID != wantUUID || d.PID != procs[i].pid ||
			d.Ready.PID != d.PID || d.Paths.Ready != "/fake/"+wantUUID+".ready.json" {
			t.Errorf("daemon %d = %+v", i, d)
		}
		wantArgs := []string{"serve", "--gpu-id", fmt.Sprint(2 + i), "--tp-size", "2", "--tp-rank", fmt.Sprint(i),
			"--pp-size", "1", "--pp-rank", "0", "--backend", "mock", "--model", "/m"}
		if spec := procs[i].spec; spec.Path != "/bin/wcache" || !reflect.DeepEqual(spec.Args, wantArgs) ||
			!reflect.DeepEqual(spec.Env, []string{"A=1"}) {
			t.Errorf("spec %d = %+v, want args %v", i, spec, wantArgs)
		}
	}
	if !reflect.DeepEqual(w.cleaned, []string{w.uuids[2], w.uuids[3]}) && !reflect.DeepEqual(w.cleaned, []string{w.uuids[3], w.uuids[2]}) {
		t.Errorf("cleaned %v", w.cleaned)
	}
	for _, c := range w.cleanups {
		if c.Force {
			t.Errorf("cleanup forced without Options.Force")
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Supervise(ctx) }()
	select {
	case err := <-errc:
		t.Fatalf("Supervise returned before cancel: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Supervise after cancel: %v", err)
	}
	for _, p := range procs {
		if got := p.gotSignals(); !reflect.DeepEqual(got, []syscall.Signal{syscall.SIGTERM}) {
			t.Errorf("pid %d got signals %v, want one SIGTERM", p.pid, got)
		}
	}
	if err := g.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestLaunchEarlyExitStopsSiblingsFirst(t *testing.T) {
	w := newFakeWorld(t, 4)
	var out bytes.Buffer
	w.onStart = func(p *fakeProc) {
		if p.spec.Rank.TPRank == 2 {
			fmt.Fprintf(p.spec.Output, "loading shard 1\nload failed: injected fault\npartial")
			p.exit(ExitStatus{Code: 3})
			return
		}
		// The others never become ready: they are loading.
	}
	_, err := Launch(context.Background(), w.options(4, &out))
	var de *DaemonError
	if !errors.As(err, &de) || !errors.Is(err, ErrExitedEarly) {
		t.Fatalf("Launch = %v, want *DaemonError ErrExitedEarly", err)
	}
	if de.Rank.TPRank != 2 || de.Rank.GPUID != 2 || de.DeviceUUID != w.uuids[2] || de.Status != "exit status 3" {
		t.Errorf("DaemonError = %+v", de)
	}
	if want := []string{"loading shard 1", "load failed: injected fault", "partial"}; !reflect.DeepEqual(de.Tail, want) {
		t.Errorf("Tail = %q, want %q", de.Tail, want)
	}
	for _, s := range []string{"gpu 2 tp 2 pp 0", w.uuids[2], "exit status 3", "load failed: injected fault"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	// Every sibling was terminated, and had exited, before Launch returned.
	for _, p := range w.started() {
		if p.spec.Rank.TPRank == 2 {
			if len(p.gotSignals()) != 0 {
				t.Errorf("the failed daemon was signalled: %v", p.gotSignals())
			}
			continue
		}
		if got := p.gotSignals(); !reflect.DeepEqual(got, []syscall.Signal{syscall.SIGTERM}) {
			t.Errorf("sibling %s got %v, want SIGTERM", p.spec.Rank, got)
		}
		if !p.exited {
			t.Errorf("sibling %s still running after Launch returned", p.spec.Rank)
		}
	}
	if !strings.Contains(out.String(), "[gpu 2 tp 2 pp 0] load failed: injected fault\n") {
		t.Errorf("output not forwarded with prefix:\n%s", out.String())
	}
}

func TestLaunchReadyTimeoutNamesPendingDaemons(t *testing.T) {
	w := newFakeWorld(t, 2)
	w.onStart = func(p *fakeProc) {
		if p.spec.Rank.TPRank == 0 {
			w.setReady(p, p.pid)
			return
		}
		fmt.Fprintln(p.spec.Output, "still loading 10%")
	}
	opts := w.options(2, nil)
	opts.ReadyTimeout = 100 * time.Millisecond
	start := time.Now()
	_, err := Launch(context.Background(), opts)
	var te *ReadyTimeoutError
	if !errors.As(err, &te) || !errors.Is(err, ErrReadyTimeout) || !errors.Is(err, ErrNotReady) {
		t.Fatalf("Launch = %v, want *ReadyTimeoutError", err)
	}
	if time.Since(start) < opts.ReadyTimeout {
		t.Errorf("returned after %s, before the timeout", time.Since(start))
	}
	if len(te.Pending) != 1 || te.Pending[0].Rank.TPRank != 1 || !slices.Equal(te.Pending[0].Tail, []string{"still loading 10%"}) {
		t.Fatalf("Pending = %+v", te.Pending)
	}
	for _, p := range w.started() {
		if !p.exited || !slices.Equal(p.gotSignals(), []syscall.Signal{syscall.SIGTERM}) {
			t.Errorf("%s: exited=%v signals=%v, want stopped by SIGTERM", p.spec.Rank, p.exited, p.gotSignals())
		}
	}
}

func TestLaunchIgnoresReadyFileOfAnotherPID(t *testing.T) {
	w := newFakeWorld(t, 1)
	w.onStart = func(p *fakeProc) {
		w.setReady(p, 4242) // a stale file of someone else
		go func() {
			time.Sleep(30 * time.Millisecond)
			w.setReady(p, p.pid)
		}()
	}
	start := time.Now()
	g, err := Launch(context.Background(), w.options(1, nil))
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	defer g.Stop()
	if d := g.Daemons()[0]; d.Ready.PID != d.PID || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("ready accepted too early or wrong: %+v after %s", d, time.Since(start))
	}
}

func TestLaunchStubbornDaemonIsKilled(t *testing.T) {
	w := newFakeWorld(t, 2)
	w.ignoreTerm[1] = true
	opts := w.options(2, nil)
	opts.StopGrace = 50 * time.Millisecond
	g, err := Launch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	err = g.Stop()
	var se *StopError
	if !errors.As(err, &se) || !errors.Is(err, ErrStopIncomplete) {
		t.Fatalf("Stop = %v, want *StopError", err)
	}
	if len(se.Problems) != 1 || !strings.Contains(se.Problems[0], "gpu 1 tp 1 pp 0") || !strings.Contains(se.Problems[0], "killed after") {
		t.Fatalf("Problems = %q", se.Problems)
	}
	p := w.started()[1]
	if !slices.Equal(p.gotSignals(), []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}) {
		t.Errorf("signals %v, want TERM then KILL", p.gotSignals())
	}
}

func TestSuperviseDaemonDeathStopsTheRest(t *testing.T) {
	w := newFakeWorld(t, 3)
	procs, errc := w.launchSupervised(t, 3)
	fmt.Fprintln(procs[1].spec.Output, "backend plugin exited: segfault")
	procs[1].exit(ExitStatus{Code: -1, Signal: syscall.SIGSEGV})
	var de *DaemonError
	err := <-errc
	if !errors.As(err, &de) || !errors.Is(err, ErrDaemonDied) {
		t.Fatalf("Supervise = %v, want ErrDaemonDied", err)
	}
	if de.Rank.GPUID != 1 || de.Status != "killed by signal segmentation fault" || !slices.Equal(de.Tail, []string{"backend plugin exited: segfault"}) {
		t.Errorf("DaemonError = %+v", de)
	}
	for _, i := range []int{0, 2} {
		if !procs[i].exited || !slices.Equal(procs[i].gotSignals(), []syscall.Signal{syscall.SIGTERM}) {
			t.Errorf("daemon %d not stopped: %v", i, procs[i].gotSignals())
		}
	}
}

func TestLaunchRefusesLiveDaemonsUnlessForced(t *testing.T) {
	w := newFakeWorld(t, 2)
	for i := 0; i < 2; i++ {
		w.cleanupErr[w.uuids[i]] = &daemonfile.LiveDaemonError{PID: 77 + i, DeviceUUID: w.uuids[i], Ready: "/fake/r" + fmt.Sprint(i)}
	}
	_, err := Launch(context.Background(), w.options(2, nil))
	var le *daemonfile.LiveDaemonError
	if !errors.As(err, &le) {
		t.Fatalf("Launch = %v, want *LiveDaemonError", err)
	}
	// Both live daemons are named, not just the first.
	for _, s := range []string{w.uuids[0], w.uuids[1], "77", "78"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	if n := len(w.started()); n != 0 {
		t.Fatalf("%d daemons started despite live daemons", n)
	}

	w2 := newFakeWorld(t, 2)
	opts := w2.options(2, nil)
	opts.Force = true
	opts.ForceGrace = 3 * time.Second
	g, err := Launch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	for _, c := range w2.cleanups {
		if !c.Force || c.Grace != 3*time.Second {
			t.Errorf("cleanup options %+v, want Force and Grace 3s", c)
		}
	}
	for _, p := range w2.started() {
		if slices.Contains(p.spec.Args, "--force") {
			t.Errorf("--force passed on to the daemon: %v", p.spec.Args)
		}
	}
}

func TestLaunchRefusesBeforeSpawning(t *testing.T) {
	t.Run("same device twice", func(t *testing.T) {
		w := newFakeWorld(t, 2)
		w.uuids[1] = w.uuids[0]
		_, err := Launch(context.Background(), w.options(2, nil))
		if !errors.Is(err, ErrSameDevice) || len(w.started()) != 0 || len(w.cleaned) != 0 {
			t.Fatalf("Launch = %v (started %d, cleaned %d), want ErrSameDevice before anything", err, len(w.started()), len(w.cleaned))
		}
	})
	t.Run("unknown GPU", func(t *testing.T) {
		w := newFakeWorld(t, 2)
		_, err := Launch(context.Background(), w.options(4, nil))
		if err == nil || !strings.Contains(err.Error(), "resolve the UUID of GPU 2") || len(w.started()) != 0 {
			t.Fatalf("Launch = %v", err)
		}
	})
	t.Run("hostile UUID", func(t *testing.T) {
		w := newFakeWorld(t, 1)
		w.uuids[0] = "../../etc/passwd"
		_, err := Launch(context.Background(), w.options(1, nil))
		var ie *paths.InvalidUUIDError
		if !errors.As(err, &ie) || len(w.started()) != 0 {
			t.Fatalf("Launch = %v, want *InvalidUUIDError", err)
		}
	})
	t.Run("bad topology", func(t *testing.T) {
		w := newFakeWorld(t, 2)
		opts := w.options(2, nil)
		opts.Topology.GPUs = []int{0}
		_, err := Launch(context.Background(), opts)
		if !errors.Is(err, ErrInvalidTopology) || len(w.cleaned) != 0 {
			t.Fatalf("Launch = %v", err)
		}
	})
	t.Run("missing dependencies", func(t *testing.T) {
		if _, err := Launch(context.Background(), Options{Topology: Topology{TPSize: 1, PPSize: 1, NNodes: 1, GPUIDStep: 1}}); err == nil {
			t.Fatal("Launch without Devices succeeded")
		}
	})
}

func TestLaunchStartFailureStopsStartedOnes(t *testing.T) {
	w := newFakeWorld(t, 3)
	w.startErr[1] = errors.New("exec: permission denied")
	_, err := Launch(context.Background(), w.options(3, nil))
	var de *DaemonError
	if !errors.As(err, &de) || !errors.Is(err, ErrStartFailed) || de.Rank.GPUID != 1 || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Launch = %v", err)
	}
	procs := w.started()
	if len(procs) != 1 || !procs[0].exited {
		t.Fatalf("started %d, first exited=%v; want only GPU 0 started, then stopped", len(procs), len(procs) > 0 && procs[0].exited)
	}
}

func TestLaunchInterruptedWhileLoading(t *testing.T) {
	w := newFakeWorld(t, 2)
	w.onStart = func(*fakeProc) {}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	_, err := Launch(ctx, w.options(2, nil))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Launch = %v, want context.Canceled", err)
	}
	for _, p := range w.started() {
		if !p.exited {
			t.Errorf("%s still running", p.spec.Rank)
		}
	}
}

func TestServeCommand(t *testing.T) {
	got := ServeCommand(Topology{TPSize: 8, PPSize: 2}, Rank{GPUID: 5, TPRank: 5, PPRank: 1}, []string{"--model", "/m"})
	want := []string{"serve", "--gpu-id", "5", "--tp-size", "8", "--tp-rank", "5", "--pp-size", "2", "--pp-rank", "1", "--model", "/m"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ServeCommand = %q", got)
	}
	for _, f := range OwnedServeFlags() {
		if !slices.Contains(got, "--"+f) {
			t.Errorf("OwnedServeFlags lists %q, which ServeCommand does not set", f)
		}
	}
}

// TestSuperviseRequestedStopIsClean: `wcache stop` makes a daemon exit 0;
// the launcher stops the rest and reports a clean stop, not a death.
func TestSuperviseRequestedStopIsClean(t *testing.T) {
	w := newFakeWorld(t, 2)
	procs, errc := w.launchSupervised(t, 2)
	procs[0].exit(ExitStatus{Code: 0})
	if err := <-errc; err != nil {
		t.Fatalf("Supervise after a daemon exited 0 = %v, want nil", err)
	}
	if !procs[1].exited || !slices.Equal(procs[1].gotSignals(), []syscall.Signal{syscall.SIGTERM}) {
		t.Errorf("the other daemon was not stopped: %v", procs[1].gotSignals())
	}
}
