package gputest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/backendtest"
)

// MainOptions describe the test binary of a GPU backend package (Main).
type MainOptions struct {
	// Name names the package in messages and its temporary folder.
	Name string
	// HandleKind and Open are the importing process's (ImporterMain),
	// which the binary becomes when HelperEnv is set; or Helper, when not
	// nil, is the process it becomes (returning its exit status).
	HandleKind string
	HelperEnv  string
	Open       func() (sdk.Backend, func() error, error)
	Helper     func() int
	// Real runs the tests against the real vendor libraries (the GPU
	// check): nothing is built, nothing set.
	Real bool
	// Build builds the fake vendor libraries into dir.
	Build func(dir string) error
	// LibDirEnv is set to that folder, and Env set too, for the tests.
	LibDirEnv string
	Env       map[string]string
	// Plugin, when set, names the plugin the tests start as a process
	// (wcache-backend-<Plugin>, the package in the working directory): it
	// is built with go build into a folder PluginsEnv is set to, unless
	// PluginDirEnv names a folder holding it (the GPU bundle's bin/).
	Plugin, PluginDirEnv, PluginsEnv string
}

// Main is the TestMain of a GPU backend package: the importing process
// (or Helper) when HelperEnv is set, else the tests, over fake libraries built into a
// temporary folder (removed afterwards) and without the user's WCACHE_*
// variables (ClearUserEnv) unless Real, and with the plugin built when
// Plugin is set. It returns the exit status.
func Main(m *testing.M, o MainOptions) int {
	if o.HelperEnv != "" && os.Getenv(o.HelperEnv) != "" {
		if o.Helper != nil {
			return o.Helper()
		}
		return ImporterMain(o.HandleKind, o.Open)
	}
	if !o.Real {
		// On the fakes the user's WCACHE_* are not the tests'; on real
		// hardware (the GPU check) they may name the real libraries.
		ClearUserEnv()
	}
	dir, err := os.MkdirTemp("", o.Name+"-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	if o.Plugin != "" {
		plugins := os.Getenv(o.PluginDirEnv)
		if plugins == "" {
			plugins = filepath.Join(dir, "plugins")
			if _, err := backendtest.BuildPlugin(plugins, o.Plugin, ".", "CGO_ENABLED=1"); err != nil {
				fmt.Fprintf(os.Stderr, "%v\n(or set %s to a folder holding wcache-backend-%s)\n", err, o.PluginDirEnv, o.Plugin)
				return 2
			}
		}
		os.Setenv(o.PluginsEnv, plugins)
	}
	if !o.Real {
		fakes := filepath.Join(dir, "fakes")
		if err := os.Mkdir(fakes, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := o.Build(fakes); err != nil {
			fmt.Fprintf(os.Stderr, "%s tests: %v\n", o.Name, err)
			return 2
		}
		os.Setenv(o.LibDirEnv, fakes)
		for k, v := range o.Env {
			os.Setenv(k, v)
		}
	}
	return m.Run()
}

// OpenFromEnv is an Open for MainOptions: the backend new returns for the
// configuration configFromEnv reads from the environment, closed by its
// Close.
func OpenFromEnv[C any, B interface {
	sdk.Backend
	Close() error
}](configFromEnv func(getenv func(string) string) (C, error), newBackend func(C, hclog.Logger) (B, error)) func() (sdk.Backend, func() error, error) {
	return func() (sdk.Backend, func() error, error) {
		cfg, err := configFromEnv(os.Getenv)
		if err != nil {
			return nil, nil, err
		}
		b, err := newBackend(cfg, nil)
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}
}

// RunConformance runs the conformance suite (sdk/backendtest) in process
// over Backends newBackend makes from one runtime, which it closes at
// cleanup: every instance shares the runtime, as the Backends of one
// process must (legacy IPC cannot open a handle in the process that
// exported it, so the suite's second instance maps the first one's export
// through the runtime's registry). Every Backend is closed at the end of
// its subtest.
func RunConformance[B interface {
	sdk.Backend
	Close() error
}](t *testing.T, rt io.Closer, newBackend func() B, opts backendtest.Options) {
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("Runtime.Close: %v", err)
		}
	})
	backendtest.Run(t, func(t *testing.T) sdk.Backend {
		b := newBackend()
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return b
	}, opts)
}
