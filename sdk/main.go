package sdk

import (
	"fmt"
	"io"
	"os"
	"os/signal"

	hclog "github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Factory builds the backend a plugin serves, logging through logger (the
// logger Main made with NewLogger). An error ends the plugin with exit
// status 1; the host shows the logged reason. A backend that can start but
// not work (no driver, say) should rather return a Backend whose calls fail
// with ErrUnavailable, so that the host can print why.
type Factory func(logger hclog.Logger) (Backend, error)

// MainOptions tunes MainWith. The zero value is what Main uses.
type MainOptions struct {
	// Doc is the page a binary run by hand points to. Default: "the
	// documentation of the NAME backend".
	Doc string
	// CloseOnTermination makes the plugin release its backend (Close) also
	// when told to end rather than closed by the host: on SIGTERM and
	// SIGHUP, and when the host dies, because Main then asks for SIGTERM
	// as the parent-death signal instead of the host's SIGKILL. For a
	// backend whose resources outlive its process (files, shared memory).
	// The parent-death signal belongs to a thread and only the main thread
	// inherited the host's: lock main to it with runtime.LockOSThread in an
	// init function of package main. Elsewhere Main logs a warning and a
	// killed host leaves the resources behind.
	CloseOnTermination bool
	// Serve is passed to ServeWith; a nil Serve.Logger becomes Main's logger.
	Serve ServeOptions
}

// Main runs a backend plugin named name (binary wcache-backend-NAME) and
// returns the process exit status, for
//
//	func main() { os.Exit(sdk.Main("acme", acme.New)) }
//
// Run by hand (no magic cookie, see StartedByHost) it prints PluginHint and
// returns 1. Otherwise it makes the logger (NewLogger(name)), builds the
// backend with factory (an error: logged, 1), serves it until the host
// closes the plugin, and then, when the backend implements io.Closer,
// closes it: 0, or 1 when Close fails.
func Main(name string, factory Factory) int {
	return MainWith(name, factory, MainOptions{})
}

// MainWith is Main with options.
func MainWith(name string, factory Factory, opts MainOptions) int {
	return mainWith(name, opts, func(logger hclog.Logger) (*GRPCPlugin, io.Closer, error) {
		b, err := factory(logger)
		if err != nil {
			return nil, nil, err
		}
		closer, _ := b.(io.Closer)
		return &GRPCPlugin{Impl: b}, closer, nil
	})
}

// mainWith is Main's body: makePlugin builds what is served and what is
// closed at the end (nil: nothing).
func mainWith(name string, opts MainOptions, makePlugin func(hclog.Logger) (*GRPCPlugin, io.Closer, error)) int {
	binary := "wcache-backend-" + name
	if !StartedByHost(os.Getenv) {
		doc := opts.Doc
		if doc == "" {
			doc = "the documentation of the " + name + " backend"
		}
		fmt.Fprintln(os.Stderr, PluginHint(binary, doc))
		return 1
	}
	logger := NewLogger(name)
	p, closer, err := makePlugin(logger)
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	if opts.CloseOnTermination && closer != nil {
		closeOnTermination(closer, logger)
	}
	serve := opts.Serve
	if serve.Logger == nil {
		serve.Logger = logger
	}
	servePlugin(p, serve)
	if closer != nil {
		if err := closer.Close(); err != nil {
			logger.Error("release the backend", "error", err)
			return 1
		}
	}
	return 0
}

// closeOnTermination closes c and exits 0 on SIGTERM or SIGHUP, and asks
// for SIGTERM when the host dies.
func closeOnTermination(c io.Closer, logger hclog.Logger) {
	// The host's SIGKILL stays in force until this call, so there is no
	// window in which a dying host goes unnoticed.
	if unix.Gettid() != os.Getpid() {
		logger.Warn("not on the main thread; a killed host leaves the backend's resources behind")
	} else if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		logger.Warn("cannot set the parent-death signal; a killed host leaves the backend's resources behind", "error", err)
	}
	// When the host is gone, so is the read end of our stderr: a log line
	// would raise SIGPIPE and kill us before Close ran. Ignored, the write
	// fails with EPIPE instead.
	signal.Ignore(unix.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGHUP)
	go func() {
		s := <-sigs
		err := c.Close() // first: logging may fail if the host is gone
		logger.Info("signal received, backend released", "signal", s.String())
		if err != nil {
			logger.Error("release the backend", "error", err)
		}
		os.Exit(0)
	}()
}
