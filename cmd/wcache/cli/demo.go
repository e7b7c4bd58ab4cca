package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/launcher"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/pluginhost"
	"github.com/wcache/wcache/core/safetensors"
	"github.com/wcache/wcache/core/safetensors/synth"
	"github.com/wcache/wcache/internal/procstat"
	"github.com/wcache/wcache/sdk"
)

// Demo settings.
const (
	demoDevices      = 4
	demoShardPattern = "model-rank-{tp_rank}-part-*.safetensors"
	demoHidden       = 512
	demoVocab        = 16384
	demoReadyTimeout = 60 * time.Second
	demoStopTimeout  = 30 * time.Second
	demoTailLines    = 60
)

type demoFlags struct {
	dir       string
	keep      bool
	layers    int
	tpSize    int
	pluginDir string
	verbose   bool
}

func newDemoCommand(e *env) *cobra.Command {
	f := &demoFlags{}
	cmd := &cobra.Command{
		Use:   "demo [--dir D] [--keep] [--layers N] [--tp-size T]",
		Short: "Run the whole job end to end on the mock backend, in a private temporary folder",
		Long: `Demo runs what a user runs, on the mock backend, self-contained in a fresh
folder under --dir: it generates a llama-like checkpoint pre-sharded for
--tp-size ranks, starts 'wcache launch' (a real child process, which starts one
'wcache serve' per GPU), attaches a client per rank through the daemon
protocol, compares every tensor's bytes in the shared-memory mapping with the
file, shows that a client with the wrong rank is refused, stops the launcher
with SIGTERM and checks that no socket, ready file or allocation is left.
Everything is removed at the end unless --keep. Exit status 0 means every
step passed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.layers < 1 || f.layers > 256 {
				return usageErrorf("--layers %d: want 1..256", f.layers)
			}
			if f.tpSize < 1 || f.tpSize > demoDevices {
				return usageErrorf("--tp-size %d: want 1..%d (the demo has %d mock GPUs)", f.tpSize, demoDevices, demoDevices)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runDemo(ctx, e, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.dir, "dir", os.TempDir(), "folder in which the demo makes (and removes) its own working folder")
	fs.BoolVar(&f.keep, "keep", false, "keep the working folder (checkpoint, logs) instead of removing it")
	fs.IntVar(&f.layers, "layers", 24, "decoder layers of the generated checkpoint (9 tensors each)")
	fs.IntVar(&f.tpSize, "tp-size", 2, "tensor-parallel size: one daemon per rank, on mock GPUs 0..T-1")
	fs.StringVar(&f.pluginDir, "plugin-dir", "", "folder searched first for wcache-backend-mock")
	fs.BoolVar(&f.verbose, "verbose", false, "show the launcher's and the daemons' log lines as they come")
	return cmd
}

// demo is one run's state.
type demo struct {
	e      *env
	f      *demoFlags
	exe    string
	work   string
	run    string // XDG_RUNTIME_DIR of every process
	shm    string // WCACHE_MOCK_DIR
	model  string
	env    []string
	layout paths.Layout
	step   int
	steps  int
}

func (d *demo) stepf(format string, args ...any) {
	d.step++
	fmt.Fprintf(d.e.stdout, "\n[%d/%d] %s\n", d.step, d.steps, fmt.Sprintf(format, args...))
}

func (d *demo) linef(format string, args ...any) {
	fmt.Fprintf(d.e.stdout, "      "+format+"\n", args...)
}

func runDemo(ctx context.Context, e *env, f *demoFlags) (err error) {
	began := time.Now()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: find own executable: %w", err)
	}
	work, err := os.MkdirTemp(f.dir, "wcache-demo-")
	if err != nil {
		return fmt.Errorf("demo: working folder: %w", err)
	}
	d := &demo{e: e, f: f, exe: exe, work: work, steps: 6,
		run: filepath.Join(work, "run"), shm: filepath.Join(work, "shm"), model: filepath.Join(work, "model")}
	defer func() {
		if f.keep {
			fmt.Fprintf(e.stdout, "\nkept %s (--keep): remove it with rm -rf\n", work)
			return
		}
		if rerr := os.RemoveAll(work); rerr != nil {
			err = errors.Join(err, fmt.Errorf("demo: remove %s: %w", work, rerr))
			return
		}
		fmt.Fprintf(e.stdout, "\nremoved %s\n", work)
	}()
	for _, dir := range []string{d.run, d.shm} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	d.env = demoEnv(os.Environ(), map[string]string{
		"XDG_RUNTIME_DIR":     d.run,
		"WCACHE_MOCK_DIR":     d.shm,
		"WCACHE_MOCK_DEVICES": strconv.Itoa(demoDevices),
	})
	if d.layout, err = paths.NewLayout(paths.Options{Getenv: envLookup(d.env)}); err != nil {
		return fmt.Errorf("demo: path layout: %w", err)
	}
	fmt.Fprintf(e.stdout, "wcache demo: the main job on the mock backend, in %s\n", work)
	fmt.Fprintf(e.stdout, "  (private XDG_RUNTIME_DIR=%s, WCACHE_MOCK_DIR=%s, WCACHE_MOCK_DEVICES=%d)\n", d.run, d.shm, demoDevices)

	if err := d.checkpoint(); err != nil {
		return err
	}
	devs, err := d.devices(ctx)
	if err != nil {
		return err
	}
	lc, err := d.launch(ctx, devs)
	if err != nil {
		return err
	}
	defer func() {
		if lc != nil {
			err = errors.Join(err, lc.stop(d))
		}
	}()
	if err := d.attachAll(ctx, devs); err != nil {
		return lc.fail(err)
	}
	if err := d.mismatch(ctx, devs); err != nil {
		return lc.fail(err)
	}
	d.stepf("stop: SIGTERM to the launcher")
	stopErr := lc.stop(d)
	lc = nil
	if stopErr != nil {
		return stopErr
	}
	if err := d.checkClean(devs); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\ndemo OK: %d daemons launched, attached, verified byte for byte and stopped cleanly in %s\n",
		d.f.tpSize, time.Since(began).Round(time.Millisecond))
	return nil
}

// demoEnv is base without wcache and GPU selection variables that could
// leak in from the user's shell, plus set.
func demoEnv(base []string, set map[string]string) []string {
	keep := []string{pluginhost.EnvPluginDir, envLogLevel}
	var out []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "WCACHE_") && !slices.Contains(keep, k) ||
			k == "XDG_RUNTIME_DIR" || k == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		out = append(out, kv)
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		out = append(out, k+"="+set[k])
	}
	return out
}

// envLookup is a getenv over an environment list (the last value wins).
func envLookup(env []string) func(string) string {
	return func(key string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
				return v
			}
		}
		return ""
	}
}

// checkpoint generates the pre-sharded checkpoint.
func (d *demo) checkpoint() error {
	t0 := time.Now()
	gen, err := synth.Generate(d.model, synth.Options{
		Layers: d.f.layers, HiddenSize: demoHidden, VocabSize: demoVocab, TPSize: d.f.tpSize, Shards: 2, Seed: 1,
	})
	if err != nil {
		return fmt.Errorf("demo: generate checkpoint: %w", err)
	}
	d.stepf("checkpoint: a llama-like model, pre-sharded for TP=%d", d.f.tpSize)
	perRank := len(gen.Tensors) / d.f.tpSize
	d.linef("%d layers, %d tensors per rank (model.embed_tokens, model.layers.N.self_attn.q_proj, ..., lm_head), BF16",
		d.f.layers, perRank)
	d.linef("%d files (%s), %s in all, written in %s", len(gen.Files), demoShardPattern,
		humanBytes(gen.TotalBytes), time.Since(t0).Round(time.Millisecond))
	return nil
}

// devices lists the mock GPUs through the backend plugin, as
// `wcache devices` does.
func (d *demo) devices(ctx context.Context) ([]sdk.Device, error) {
	plugin, err := pluginhost.Start(ctx, "mock", pluginhost.Options{
		PluginDir: d.f.pluginDir,
		Getenv:    envLookup(d.env),
		Env:       d.env,
		Logger:    hostLogger(d.e),
	})
	if err != nil {
		return nil, fmt.Errorf("demo: start the mock backend (build it with make build): %w", err)
	}
	defer plugin.Close()
	devs, err := plugin.Backend().Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("demo: list devices: %w", err)
	}
	if len(devs) < d.f.tpSize {
		return nil, fmt.Errorf("demo: the mock backend has %d devices, TP=%d needs %d", len(devs), d.f.tpSize, d.f.tpSize)
	}
	d.stepf("devices: %d mock GPUs (plugin %s)", len(devs), plugin.Path())
	for _, dev := range devs {
		d.linef("GPU %d  %s  %s  %s", dev.Ordinal, dev.UUID, dev.Name, humanBytes(dev.TotalMemory))
	}
	return devs, nil
}

// launchChild is the running `wcache launch`.
type launchChild struct {
	proc    launcher.Process
	starter *launcher.ExecStarter
	out     *demoOutput
	done    chan struct{}
	status  launcher.ExitStatus
	err     error
}

// demoOutput keeps the launcher's output for failure reports and, with
// --verbose, echoes it.
type demoOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	echo io.Writer
}

func (o *demoOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.echo != nil {
		_, _ = o.echo.Write(p)
	}
	return o.buf.Write(p)
}

// contains reports whether s has been written.
func (o *demoOutput) contains(s string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Contains(o.buf.Bytes(), []byte(s))
}

// tail is the last n lines written.
func (o *demoOutput) tail(n int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	lines := strings.Split(strings.TrimRight(o.buf.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "      | " + strings.Join(lines, "\n      | ")
}

// loadReport is the daemon's own measure of its load, from its Status
// reply (StartPhases): as `wcache serve` prints it, "1.234s (5.6 GiB/s)";
// "(not reported)" when the daemon measured none.
func loadReport(p client.StartPhases) string {
	if p.Load <= 0 {
		return "(not reported)"
	}
	rate := uint64(float64(p.BytesLoaded) / p.Load.Seconds())
	return fmt.Sprintf("%s (%s/s)", p.Load.Round(time.Millisecond), humanBytes(rate))
}

// launch starts `wcache launch` as a child (the same binary) and waits for
// the ready file of every rank's GPU.
func (d *demo) launch(ctx context.Context, devs []sdk.Device) (*launchChild, error) {
	args := []string{"launch", "--backend", "mock", "--model", d.model, "--tp-size", strconv.Itoa(d.f.tpSize),
		"--shard-pattern", demoShardPattern, "--timeout", demoReadyTimeout.String(),
		"--drain-timeout", "5s", "--stop-grace", "20s"}
	if d.f.pluginDir != "" {
		args = append(args, "--plugin-dir", d.f.pluginDir)
	}
	d.stepf("launch: wcache %s", strings.Join(args, " "))
	out := &demoOutput{}
	if d.f.verbose {
		out.echo = d.e.stderr
	}
	// The starter gives the launcher Pdeathsig: if the demo dies, so does
	// the launcher, and with it every daemon.
	starter := launcher.NewExecStarter()
	t0 := time.Now()
	proc, err := starter.Start(launcher.ChildSpec{Path: d.exe, Args: args, Env: d.env, Output: out})
	if err != nil {
		starter.Close()
		return nil, fmt.Errorf("demo: start wcache launch: %w", err)
	}
	lc := &launchChild{proc: proc, starter: starter, out: out, done: make(chan struct{})}
	go func() {
		lc.status, lc.err = proc.Wait()
		close(lc.done)
	}()

	readies := make([]daemonfile.Ready, d.f.tpSize)
	deadline := time.After(demoReadyTimeout + 5*time.Second)
	rank := 0
	allReady := func() (bool, error) {
		for ; rank < d.f.tpSize; rank++ {
			p, err := d.layout.For(devs[rank].UUID)
			if err != nil {
				return false, fmt.Errorf("demo: paths of GPU %d: %w", rank, err)
			}
			r, err := daemonfile.ReadReady(p.Ready)
			if err != nil || procstat.Inspect(r.PID, r.StartTime) != procstat.Alive {
				return false, nil
			}
			readies[rank] = r
		}
		return true, nil
	}
	if held, err := lc.await(ctx, deadline, allReady, "before every daemon was ready", "daemons not ready"); err != nil {
		return held, err
	}
	// The launcher's own word that it is supervising: a SIGTERM before it
	// would interrupt the launch rather than stop a running layout.
	supervising := func() (bool, error) { return out.contains(fmt.Sprintf("%d daemons ready in", d.f.tpSize)), nil }
	if held, err := lc.await(ctx, deadline, supervising, "after its daemons were ready",
		"wcache launch did not report its daemons ready"); err != nil {
		return held, err
	}
	d.linef("launcher pid %d: %d daemons ready in %s", proc.PID(), d.f.tpSize, time.Since(t0).Round(time.Millisecond))
	for rank, r := range readies {
		d.linef("tp %d -> GPU %d %s: daemon pid %d, socket %s", rank, rank, r.DeviceUUID, r.PID, r.Socket)
	}
	return lc, nil
}

// await calls cond every 20 ms until it holds. It fails when cond does,
// when the launcher exits first (the error says so with when, and its last
// output), at deadline (notYet, after demoReadyTimeout) or when ctx ends.
// With the error it returns the launcher the caller must still stop: nil
// when the launcher exited (its starter is closed), else lc.
func (lc *launchChild) await(ctx context.Context, deadline <-chan time.Time, cond func() (bool, error),
	when, notYet string) (*launchChild, error) {
	for {
		ok, err := cond()
		if err != nil {
			return lc, lc.fail(err)
		}
		if ok {
			return lc, nil
		}
		select {
		case <-lc.done:
			lc.starter.Close()
			return nil, fmt.Errorf("demo: wcache launch exited (%s) %s; its last output:\n%s",
				lc.status, when, lc.out.tail(demoTailLines))
		case <-deadline:
			return lc, lc.fail(fmt.Errorf("demo: %s after %s", notYet, demoReadyTimeout))
		case <-ctx.Done():
			return lc, lc.fail(fmt.Errorf("demo: interrupted: %w", ctx.Err()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fail reports err with the launcher's last output.
func (lc *launchChild) fail(err error) error {
	return fmt.Errorf("%w\nlast output of wcache launch:\n%s", err, lc.out.tail(demoTailLines))
}

// stop sends SIGTERM to the launcher and waits for it; it must exit 0.
func (lc *launchChild) stop(d *demo) error {
	defer lc.starter.Close()
	t0 := time.Now()
	_ = lc.proc.Signal(syscall.SIGTERM)
	select {
	case <-lc.done:
	case <-time.After(demoStopTimeout):
		_ = lc.proc.Signal(syscall.SIGKILL)
		<-lc.done
		return lc.fail(fmt.Errorf("demo: wcache launch did not stop within %s of SIGTERM", demoStopTimeout))
	}
	if lc.err != nil || !lc.status.Success() {
		return lc.fail(fmt.Errorf("demo: wcache launch ended with %s (%v)", lc.status, lc.err))
	}
	d.linef("wcache launch stopped every daemon and exited 0 in %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

// rankConfig is the CacheConfig an engine rank would send.
func (d *demo) rankConfig(rank int, dev sdk.Device) (cacheconfig.Config, *safetensors.Checkpoint, error) {
	cfg := cacheconfig.Default()
	cfg.TPSize, cfg.TPRank = uint32(d.f.tpSize), uint32(rank)
	cfg.DeviceCapability = dev.Capability
	ck, cfg, err := openModel(d.model, demoShardPattern, cfg)
	if err != nil {
		return cfg, nil, fmt.Errorf("demo: rank %d files: %w", rank, err)
	}
	return cfg, ck, nil
}

// attachAll attaches a client per rank, as that rank's engine process
// would, and verifies every tensor.
func (d *demo) attachAll(ctx context.Context, devs []sdk.Device) error {
	d.stepf("attach: one client per rank, through the daemon of the rank's GPU (found by UUID)")
	for rank := 0; rank < d.f.tpSize; rank++ {
		cfg, ck, err := d.rankConfig(rank, devs[rank])
		if err != nil {
			return err
		}
		t0 := time.Now()
		c, err := client.Dial(ctx, client.ByDeviceUUID(d.layout, devs[rank].UUID), client.Options{ClientName: "wcache-demo"})
		if err != nil {
			return fmt.Errorf("demo: rank %d: %w", rank, err)
		}
		dialed := time.Now()
		a, err := c.Attach(ctx, cfg)
		attached := time.Now()
		if err != nil {
			c.Close()
			return fmt.Errorf("demo: rank %d: attach: %w", rank, err)
		}
		st, err := c.Status(ctx)
		if err != nil {
			a.Lease.Close()
			c.Close()
			return fmt.Errorf("demo: rank %d: status: %w", rank, err)
		}
		vr, verr := client.Verify(ctx, a.Manifest, ck, client.VerifyOptions{})
		verified := time.Now()
		a.Lease.Close()
		c.Close()
		if verr != nil {
			return fmt.Errorf("demo: rank %d (GPU %d): verify: %w", rank, rank, verr)
		}
		d.linef("tp %d -> GPU %d %s", rank, rank, a.Manifest.DeviceUUID)
		d.linef("   daemon pid %d holds %d tensors, %s in %d handle(s) (%s); loaded in %s", st.PID, st.Tensors,
			humanBytes(st.Bytes), len(a.Manifest.Handles), a.Manifest.Handles[0].Kind, loadReport(st.StartPhases))
		d.linef("   attach %s (dial %s + attach %s), lease %d", attached.Sub(t0).Round(time.Microsecond),
			dialed.Sub(t0).Round(time.Microsecond), attached.Sub(dialed).Round(time.Microsecond), a.Manifest.LeaseID)
		d.linef("   verified %d tensors, %s, byte for byte: shared-memory mapping == checkpoint file (%s)",
			vr.Tensors, humanBytes(vr.Bytes), verified.Sub(attached).Round(time.Millisecond))
	}
	return nil
}

// mismatch shows that a client whose config names another rank is refused
// with the differing fields, instead of silently getting wrong weights.
func (d *demo) mismatch(ctx context.Context, devs []sdk.Device) error {
	d.stepf("safety: a client with the wrong config is refused")
	wrongRank := 1 % d.f.tpSize
	cfg, _, err := d.rankConfig(wrongRank, devs[0])
	if err != nil {
		return err
	}
	cfg.Quantization = "fp8" // not dtype: "auto" matches any dtype when both sides carry a checkpoint digest
	a, err := client.Attach(ctx, client.ByDeviceUUID(d.layout, devs[0].UUID), cfg, client.Options{ClientName: "wcache-demo"})
	if err == nil {
		a.Lease.Close()
		return errors.New("demo: the daemon of GPU 0 accepted a client with another config")
	}
	me, ok := client.IsMismatch(err)
	if !ok {
		return fmt.Errorf("demo: attach with the wrong config: want a config mismatch, got %w", err)
	}
	d.linef("client for tp %d with quantization fp8 -> daemon of GPU 0 (tp 0): refused, %d differing field(s):", wrongRank, len(me.Diffs))
	for _, fd := range me.Diffs {
		d.linef("   %s: daemon=%s client=%s", fd.Field, fd.Daemon, fd.Client)
	}
	return nil
}

// checkClean verifies that no discovery file and no allocation is left.
func (d *demo) checkClean(devs []sdk.Device) error {
	var left []string
	for _, dev := range devs[:d.f.tpSize] {
		p, err := d.layout.For(dev.UUID)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		for _, f := range []string{p.Socket, p.Ready} {
			if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
				left = append(left, f)
			}
		}
	}
	shm, err := os.ReadDir(d.shm)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	for _, e := range shm {
		left = append(left, filepath.Join(d.shm, e.Name()))
	}
	if len(left) > 0 {
		return fmt.Errorf("demo: left behind after stop: %s", strings.Join(left, ", "))
	}
	d.linef("no socket, ready file or shared-memory allocation left (lock files stay, by design)")
	return nil
}
