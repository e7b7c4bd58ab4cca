package gputest

import (
	"fmt"
	"os"
	"testing"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
)

// MainOptions describe the test binary of a GPU backend package (Main).
type MainOptions struct {
	// Name names the package in messages and its temporary folder.
	Name string
	// HandleKind and Open are the importing process's (ImporterMain),
	// which the binary becomes when HelperEnv is set.
	HandleKind string
	HelperEnv  string
	Open       func() (sdk.Backend, func() error, error)
	// Real runs the tests against the real vendor libraries (the GPU
	// check): nothing is built, nothing set.
	Real bool
	// Build builds the fake vendor libraries into dir.
	Build func(dir string) error
	// LibDirEnv is set to that folder, and Env set too, for the tests.
	LibDirEnv string
	Env       map[string]string
}

// Main is the TestMain of a GPU backend package: the importing process
// when HelperEnv is set, else the tests, over fake libraries built into a
// temporary folder (removed afterwards) unless Real. It returns the exit
// status.
func Main(m *testing.M, o MainOptions) int {
	if os.Getenv(o.HelperEnv) != "" {
		return ImporterMain(o.HandleKind, o.Open)
	}
	if o.Real {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", o.Name+"-fakes-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	if err := o.Build(dir); err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: %v\n", o.Name, err)
		return 2
	}
	os.Setenv(o.LibDirEnv, dir)
	for k, v := range o.Env {
		os.Setenv(k, v)
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
