package backendtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/fdpass"
)

// BuildPlugin builds the main package pkg (as `go build` names it: "." or
// an import path) into dir as wcache-backend-NAME and returns the binary's
// path. env is added to the build's environment (e.g. "CGO_ENABLED=1").
// It takes no *testing.T so that a TestMain can build once for all tests,
// into a folder it made with os.MkdirTemp and removes after m.Run. The
// error carries the compiler's output.
func BuildPlugin(dir, name, pkg string, env ...string) (string, error) {
	bin := filepath.Join(dir, "wcache-backend-"+name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// StartPlugin starts the backend plugin binary at path as a wcache host
// would, through hashicorp/go-plugin with sdk's handshake and gRPC, and
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
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), env...)
	// The plugin descriptor channel, as core/pluginhost opens it, so that
	// descriptor handles (memfd) cross the boundary too.
	fdsConn, remote, err := fdpass.Socketpair()
	if err != nil {
		t.Fatalf("start plugin %s: %v", path, err)
	}
	defer remote.Close()
	fds := fdpass.NewChannel(fdsConn)
	cmd.ExtraFiles = []*os.File{remote}
	cmd.Env = append(cmd.Env, sdk.EnvFDChannel+"=3")
	logs := &testWriter{t: t}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.HandshakeConfig(),
		Plugins:          plugin.PluginSet{sdk.PluginName: &sdk.GRPCPlugin{FDs: fds}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
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
	raw, err := rpc.Dispense(sdk.PluginName)
	if err != nil {
		t.Fatalf("plugin %s: dispense %q: %v", path, sdk.PluginName, err)
	}
	b, ok := raw.(sdk.Backend)
	if !ok {
		t.Fatalf("plugin %s: dispensed %T, not an sdk.Backend", path, raw)
	}
	return b
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
