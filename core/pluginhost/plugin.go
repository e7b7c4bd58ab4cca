package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"

	"github.com/wcache/wcache/internal/backendplugin"
	"github.com/wcache/wcache/internal/fdpass"
	"github.com/wcache/wcache/sdk"
)

// exitWait bounds how long a failed call waits for the plugin process to be
// reaped before it reports the plain transport error.
const exitWait = 3 * time.Second

// Plugin is a running backend plugin process.
type Plugin struct {
	name      string
	path      string
	binary    BinaryID
	ring      *logRing
	socketDir string
	logger    hclog.Logger

	client     *plugin.Client
	runner     *procRunner
	backend    sdk.Backend
	versions   []int // the API versions offered
	apiVersion int   // negotiated
	// fds is the plugin descriptor channel: descriptor handles (memfd,
	// cuda-vmm-fd) cross on it (see docs/protocol.md).
	fds *fdpass.Channel

	exited    chan struct{}
	mu        sync.Mutex
	closing   bool
	exitErr   error
	closeOnce sync.Once
}

// Start resolves the plugin (see Resolve), checks the SHA-256 pin when one
// is set, starts the process and completes the handshake. Errors:
// *NotFoundError, *InsecurePluginError, *ChecksumError, *ReplacedError
// (Options.Binary), *APIVersionError,
// *ExitError (the plugin exited or failed before the handshake, with its
// last log lines), *ConfigureError (the plugin refused
// Options.BackendOptions, or speaks API version 1 and some were given), or
// ctx's error. The caller must Close the Plugin.
func Start(ctx context.Context, name string, opts Options) (*Plugin, error) {
	opts = opts.withDefaults()
	path, err := Resolve(name, opts)
	if err != nil {
		return nil, err
	}
	bin, err := binaryID(path)
	if err != nil {
		return nil, err
	}
	if opts.SHA256 != "" {
		if err := verifyChecksum(path, opts.SHA256); err != nil {
			return nil, err
		}
	} else if opts.Binary != nil && *opts.Binary != bin {
		return nil, &ReplacedError{Path: path}
	}
	base, err := socketBase(opts.SocketDir)
	if err != nil {
		return nil, err
	}
	socketDir, err := makeSocketDir(base, opts.Logger)
	if err != nil {
		return nil, err
	}
	p := &Plugin{
		name:      name,
		path:      path,
		binary:    bin,
		ring:      newLogRing(LogLines, newLogForwarder(opts.Logger.Named(filepath.Base(path))).forward),
		socketDir: socketDir,
		logger:    opts.Logger,
		exited:    make(chan struct{}),
	}
	// Later entries win: the caller's Env overrides the host environment
	// and the log level, and go-plugin's variables override everything.
	env := slices.Concat(os.Environ(), []string{backendplugin.EnvLogLevel + "=" + pluginLogLevel(opts.Logger)}, opts.Env)
	fdsConn, remote, err := fdpass.Socketpair()
	if err != nil {
		_ = os.RemoveAll(socketDir)
		return nil, fmt.Errorf("start backend plugin %s: descriptor channel: %w", path, err)
	}
	// The child's copy is its descriptor 3 (ExtraFiles); ours goes once the
	// handshake is over, so that a dead plugin closes the channel.
	defer remote.Close()
	p.fds = fdpass.NewChannel(fdsConn)
	env = append(env, backendplugin.EnvFDChannel+"=3")
	p.versions = opts.APIVersions
	p.client = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  backendplugin.HandshakeConfig(),
		VersionedPlugins: backendplugin.PluginSets(opts.APIVersions, &backendplugin.GRPCPlugin{FDs: p.fds}),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		RunnerFunc: func(l hclog.Logger, cmd *exec.Cmd, _ string) (runner.Runner, error) {
			c := exec.Command(path)
			c.ExtraFiles = []*os.File{remote}
			c.Env = slices.Concat(env, cmd.Env)
			r := newProcRunner(l, c, p.onExit)
			p.mu.Lock()
			p.runner = r
			p.mu.Unlock()
			return r, nil
		},
		SkipHostEnv:      true,
		Logger:           quietLogger{Logger: opts.Logger, binary: filepath.Base(path)},
		Stderr:           p.ring,
		StartTimeout:     opts.StartTimeout,
		UnixSocketConfig: &plugin.UnixSocketConfig{TempDir: socketDir},
	})

	type result struct {
		rpc plugin.ClientProtocol
		err error
	}
	done := make(chan result, 1)
	go func() {
		rpc, err := p.client.Client()
		done <- result{rpc, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		// go-plugin's Start holds its lock until the handshake ends;
		// killing the process ends it at once.
		if r := p.getRunner(); r != nil {
			_ = r.Kill(context.Background())
		}
		<-done
		p.abort()
		return nil, fmt.Errorf("start backend plugin %s: %w", path, ctx.Err())
	}
	if res.err != nil {
		p.abort()
		return nil, p.startError(res.err)
	}
	raw, err := res.rpc.Dispense(backendplugin.Name)
	if err != nil {
		p.abort()
		return nil, fmt.Errorf("start backend plugin %s: %w", path, err)
	}
	inner, ok := raw.(sdk.Backend)
	if !ok {
		p.abort()
		return nil, fmt.Errorf("start backend plugin %s: dispensed %T, not a backend", path, raw)
	}
	p.backend = &backend{inner: inner, p: p}
	p.apiVersion = p.client.NegotiatedVersion()
	if err := p.configure(ctx, opts.BackendOptions); err != nil {
		_ = p.Close()
		return nil, err
	}
	opts.Logger.Debug("backend plugin started", "path", path, "pid", p.PID(), "api_version", p.apiVersion)
	return p, nil
}

// configure sends the --backend-opt values: through Configure from API
// version 2 on (always, so that the plugin knows its configuration before
// any other call); a plugin of version 1 takes none.
func (p *Plugin) configure(ctx context.Context, values map[string]string) error {
	if p.apiVersion < 2 {
		if len(values) > 0 {
			return &ConfigureError{Path: p.path, Err: fmt.Errorf("the plugin speaks backend API version %d, which has no options "+
				"(Configure came with version 2): rebuild it with a current github.com/wcache/wcache/sdk, or drop --backend-opt", p.apiVersion)}
		}
		return nil
	}
	if err := sdk.Configure(ctx, p.backend, values); err != nil {
		return &ConfigureError{Path: p.path, Err: err}
	}
	return nil
}

// APIVersion is the backend API version negotiated in the handshake: the
// newest that this host and the plugin both speak.
func (p *Plugin) APIVersion() int { return p.apiVersion }

// pluginLogLevel is the level the plugin logs at: the host's level, but at
// least info, so that a crash report has context even when the host
// forwards only warnings.
func pluginLogLevel(l hclog.Logger) string {
	level := l.GetLevel()
	if level == hclog.NoLevel || level > hclog.Info {
		level = hclog.Info
	}
	return level.String()
}

// verifyChecksum checks path against a hex SHA-256 pin with go-plugin's
// SecureConfig, and names both digests when they differ.
func verifyChecksum(path, pin string) error {
	want, err := hex.DecodeString(strings.ToLower(strings.TrimSpace(pin)))
	if err != nil || len(want) != sha256.Size {
		return fmt.Errorf("backend plugin sha256 pin %q: want 64 hex digits", pin)
	}
	ok, err := (&plugin.SecureConfig{Checksum: want, Hash: sha256.New()}).Check(path)
	if err != nil {
		return fmt.Errorf("checksum backend plugin %s: %w", path, err)
	}
	if ok {
		return nil
	}
	got := "unknown"
	if f, err := os.Open(path); err == nil {
		h := sha256.New()
		if _, err := io.Copy(h, f); err == nil {
			got = hex.EncodeToString(h.Sum(nil))
		}
		f.Close()
	}
	return &ChecksumError{Path: path, Expected: hex.EncodeToString(want), Got: got}
}

// startError explains a failed handshake; call it after abort, when the
// process has been reaped and its output read. A plugin that exited
// before the handshake is reported by its exit status, what it printed
// instead of a handshake and its log lines rather than by go-plugin's
// generic message.
func (p *Plugin) startError(err error) error {
	r := p.getRunner()
	if r == nil || r.pid == 0 {
		return &ExitError{Path: p.path, Err: err, Logs: p.ring.Lines()}
	}
	if got, ok := r.stdout.apiVersion(); ok && !slices.Contains(p.versions, got) {
		return &APIVersionError{Path: p.path, Expected: slices.Max(p.versions), Got: got, Supported: slices.Clone(p.versions)}
	}
	select {
	case <-r.reaped:
	default:
		return &ExitError{Path: p.path, Err: fmt.Errorf("pid %d: %w", r.pid, err), Logs: p.ring.Lines()}
	}
	p.logger.Debug("plugin handshake failed", "path", p.path, "error", err)
	var msg strings.Builder
	switch {
	case r.killed.Load() && killedBySIGKILL(r.waitErr):
		fmt.Fprintf(&msg, "no valid handshake from pid %d; stopped it", r.pid)
	case r.waitErr != nil:
		fmt.Fprintf(&msg, "exited before the handshake (pid %d: %v)", r.pid, r.waitErr)
	default:
		fmt.Fprintf(&msg, "exited before the handshake (pid %d: exit status 0)", r.pid)
	}
	if line := r.stdout.firstLine(); line != "" {
		fmt.Fprintf(&msg, "; it printed %q instead of a go-plugin handshake: is it a wcache backend built with sdk/plugin.Serve?", line)
	}
	return &ExitError{Path: p.path, Err: errors.New(msg.String()), Logs: p.ring.Lines()}
}

// killedBySIGKILL reports whether a wait status is death by SIGKILL.
func killedBySIGKILL(err error) bool {
	var xe *exec.ExitError
	if !errors.As(err, &xe) {
		return false
	}
	ws, ok := xe.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// abort cleans up after a failed start.
func (p *Plugin) abort() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.client.Kill()
	_ = p.fds.Close()
	_ = os.RemoveAll(p.socketDir)
}

// onExit runs once when the process has been reaped and its output read.
func (p *Plugin) onExit(pid int, err error) {
	p.mu.Lock()
	if !p.closing {
		p.exitErr = &ExitError{Path: p.path, PID: pid, Err: err, Logs: p.ring.Lines()}
		p.logger.Error("backend plugin exited unexpectedly", "path", p.path, "pid", pid, "error", err)
	}
	p.mu.Unlock()
	close(p.exited)
}

// Backend is the plugin's sdk.Backend. When a call fails because the
// plugin process died, the error is the *ExitError (wrapping
// sdk.ErrUnavailable) with the plugin's last log lines.
func (p *Plugin) Backend() sdk.Backend { return p.backend }

// Exited is closed when the plugin process has exited, for whatever reason.
func (p *Plugin) Exited() <-chan struct{} { return p.exited }

// ExitError is nil while the plugin runs and after Close; after an
// unexpected exit it is the *ExitError with the last log lines.
func (p *Plugin) ExitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Path is the plugin binary that was started.
func (p *Plugin) Path() string { return p.path }

// Binary identifies the file the plugin was started from (Options.Binary
// of a restart).
func (p *Plugin) Binary() BinaryID { return p.binary }

// Name is the backend name, e.g. "mock".
func (p *Plugin) Name() string { return p.name }

// getRunner returns the runner once go-plugin has created it.
func (p *Plugin) getRunner() *procRunner {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runner
}

// PID is the plugin's process id.
func (p *Plugin) PID() int {
	if r := p.getRunner(); r != nil {
		return r.pid
	}
	return 0
}

// Logs returns the plugin's last log lines, oldest first.
func (p *Plugin) Logs() []string { return p.ring.Lines() }

// Close ends the plugin: go-plugin asks it to shut down (it then releases
// its device memory), waits up to 2 s, then kills it. Close returns when
// the process is gone and its socket folder removed. It is idempotent.
func (p *Plugin) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closing = true
		p.mu.Unlock()
		p.client.Kill()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.logger.Warn("backend plugin did not report its exit", "path", p.path, "pid", p.PID())
		}
		_ = p.fds.Close()
		if err := os.RemoveAll(p.socketDir); err != nil {
			p.logger.Warn("cannot remove the plugin socket folder", "dir", p.socketDir, "error", err)
		}
	})
	return nil
}

// diedDuring turns a transport failure into the plugin's *ExitError once
// the process is known to have exited.
func (p *Plugin) diedDuring(op string, err error) error {
	var te *sdk.TransportError
	if !errors.As(err, &te) {
		return err
	}
	select {
	case <-p.exited:
	case <-time.After(exitWait):
		return err
	}
	if xerr := p.ExitError(); xerr != nil {
		return fmt.Errorf("backend %s: %s: %w", p.name, op, xerr)
	}
	return err
}
