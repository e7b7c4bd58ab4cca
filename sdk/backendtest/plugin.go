package backendtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/wcache/wcache/internal/backendplugin"
	"github.com/wcache/wcache/internal/fdpass"
	"github.com/wcache/wcache/sdk"
)

// BuildPlugin builds the main package pkg (as `go build` names it: "." or
// an import path) into dir as wcache-backend-NAME and returns the binary's
// path. env is added to the build's environment (e.g. "CGO_ENABLED=1").
//
// pkg may also be the folder of a separate module (it holds a go.mod), as
// an outside author's plugin is: the build then runs in that module with
// GOWORK=off and GOFLAGS=-mod=readonly, so that the module's own go.mod and
// go.sum decide every version and nothing is rewritten; modules come from
// the module cache (GOFLAGS=-mod=mod or GOPROXY=off in env change that).
//
// It takes no *testing.T so that a TestMain can build once for all tests,
// into a folder it made with os.MkdirTemp and removes after m.Run. The
// error carries the compiler's output.
func BuildPlugin(dir, name, pkg string, env ...string) (string, error) {
	bin, err := filepath.Abs(filepath.Join(dir, "wcache-backend-"+name))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = os.Environ()
	if st, err := os.Stat(filepath.Join(pkg, "go.mod")); err == nil && st.Mode().IsRegular() {
		cmd.Dir, cmd.Args[len(cmd.Args)-1] = pkg, "."
		cmd.Env = append(cmd.Env, "GOWORK=off", "GOFLAGS=-mod=readonly")
	}
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// BuildPluginT is BuildPlugin into a private folder of the test (mode
// 0700, removed when the test ends), failing the test when the build
// fails. With StartPlugin and Run it runs the suite through the plugin
// boundary:
//
//	bin := backendtest.BuildPluginT(t, "acme", ".")
//	backendtest.Run(t, func(t *testing.T) sdk.Backend { return backendtest.StartPlugin(t, bin) }, opts)
func BuildPluginT(t testing.TB, name, pkg string, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	bin, err := BuildPlugin(dir, name, pkg, env...)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// StartOptions tune StartPluginWith.
type StartOptions struct {
	// Env is added to this process's environment for the plugin.
	Env []string
	// APIVersions are offered in the handshake (the plugin picks the
	// newest it speaks too). nil → sdk.APIVersions().
	APIVersions []int
	// Options, when not nil, are sent with Configure right after the
	// handshake, as a host sends --backend-opt (a refusal fails the test).
	// nil: no Configure call, so a plugin served with plugin.WithSchema
	// builds its backend from the environment at the first call.
	Options map[string]string
}

// StartPlugin starts the backend plugin binary at path as a wcache host
// would, through hashicorp/go-plugin with sdk/plugin's handshake and gRPC, and
// returns the backend it serves: every call crosses the process boundary,
// so Run through it tests what a host sees (errors carried as sdk kinds,
// handles imported by another process). The plugin runs with this
// process's environment plus env; its log lines go to t.Log. It is killed
// when the test ends. A plugin that fails the handshake ends the test.
//
// Unlike core/pluginhost it checks no permissions or checksums and sets
// no parent-death signal: a test binary killed by SIGKILL may leave the
// plugin running.
func StartPlugin(t testing.TB, path string, env ...string) sdk.Backend {
	t.Helper()
	b, _ := StartPluginWith(t, path, StartOptions{Env: env})
	return b
}

// StartPluginWith is StartPlugin with options; it also returns the
// backend API version the handshake settled on.
func StartPluginWith(t testing.TB, path string, opts StartOptions) (sdk.Backend, int) {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), opts.Env...)
	// The plugin descriptor channel, as core/pluginhost opens it, so that
	// descriptor handles (memfd) cross the boundary too.
	fdsConn, remote, err := fdpass.Socketpair()
	if err != nil {
		t.Fatalf("start plugin %s: %v", path, err)
	}
	defer remote.Close()
	fds := fdpass.NewChannel(fdsConn)
	cmd.ExtraFiles = []*os.File{remote}
	cmd.Env = append(cmd.Env, backendplugin.EnvFDChannel+"=3")
	logs := &testWriter{t: t}
	versions := opts.APIVersions
	if versions == nil {
		versions = sdk.APIVersions()
	}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  backendplugin.HandshakeConfig(),
		VersionedPlugins: backendplugin.PluginSets(versions, &backendplugin.GRPCPlugin{FDs: fds}),
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger: hclog.New(&hclog.LoggerOptions{Name: filepath.Base(path), Level: hclog.Info,
			Output: logs}),
	})
	t.Cleanup(func() {
		client.Kill()
		_ = fds.Close()
		logs.stop()
	})
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("start plugin %s: %v", path, err)
	}
	raw, err := rpc.Dispense(backendplugin.Name)
	if err != nil {
		t.Fatalf("plugin %s: dispense %q: %v", path, backendplugin.Name, err)
	}
	b, ok := raw.(sdk.Backend)
	if !ok {
		t.Fatalf("plugin %s: dispensed %T, not an sdk.Backend", path, raw)
	}
	if opts.Options != nil {
		if err := sdk.Configure(t.Context(), b, opts.Options); err != nil {
			t.Fatalf("plugin %s: Configure(%v): %v", path, opts.Options, err)
		}
	}
	return b, client.NegotiatedVersion()
}

// testWriter writes log lines to t.Log until stop: t.Log after the test
// ended would panic, and go-plugin may log from its goroutines late.
type testWriter struct {
	t       testing.TB
	mu      sync.Mutex
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

// CheckRunByHand runs the plugin binary at path as a user would, outside
// a host (with only PATH in its environment), and checks that it exits
// with status 1 saying it is a wcache backend plugin, and each of want
// (a page of its documentation, say).
func CheckRunByHand(t testing.TB, path string, want ...string) {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("running the plugin by hand: %v\n%s\nwant exit status 1 and an explanation", err, out)
	}
	for _, w := range append([]string{"wcache backend plugin"}, want...) {
		if !strings.Contains(string(out), w) {
			t.Errorf("running the plugin by hand printed no %q:\n%s", w, out)
		}
	}
}
