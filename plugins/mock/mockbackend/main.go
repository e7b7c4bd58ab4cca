package mockbackend

import (
	"fmt"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/sdk"
)

// Main runs the mock backend as a wcache plugin and returns the process
// exit status: 0 after the host closed the plugin, 1 when the configuration
// is invalid or the folder unusable (the reason is logged, so the host
// shows it).
//
// Cleanup: the allocation files are removed when the host closes the
// plugin, and on SIGTERM or SIGHUP. The host starts plugins with
// Pdeathsig=SIGKILL; Main replaces it with SIGTERM, so that a host killed
// with SIGKILL still gets its files removed. Only a SIGKILL of the plugin
// itself (or an injected crash) leaves files behind, and the next mock
// started on the same folder removes them. Replacing the signal works only
// when Main runs on the main thread: call it from main with the main
// goroutine locked there by runtime.LockOSThread in an init function.
func Main() int {
	if !sdk.StartedByHost(os.Getenv) {
		fmt.Fprintln(os.Stderr, sdk.PluginHint("wcache-backend-mock", "docs/mock-backend.md"))
		return 1
	}
	logger := sdk.NewLogger("mock")
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		logger.Error("invalid configuration", "error", err)
		return 1
	}
	b, err := New(cfg, logger)
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	defer b.Close()

	// Ask for SIGTERM instead of the host's SIGKILL when the host dies.
	// The old setting stays in force until this call, so there is no
	// window in which a dying host goes unnoticed. The setting belongs to
	// a thread: only the main thread inherited the host's, so only there
	// can it be replaced (the binary's init locks main to that thread).
	if unix.Gettid() != os.Getpid() {
		logger.Warn("not on the main thread; a killed host leaves allocation files until the next mock start")
	} else if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		logger.Warn("cannot set the parent-death signal; a killed host leaves allocation files until the next mock start", "error", err)
	}
	// When the host is gone, so is the read end of our stderr: a log line
	// would raise SIGPIPE and kill us before the files are removed. Ignored,
	// the write fails with EPIPE instead.
	signal.Ignore(unix.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGHUP)
	go func() {
		s := <-sigs
		err := b.Close() // first: logging may fail if the host is gone
		logger.Info("signal received, allocations released", "signal", s.String())
		if err != nil {
			logger.Error("release allocations", "error", err)
		}
		os.Exit(0)
	}()

	sdk.ServeWith(b, sdk.ServeOptions{Logger: logger})
	if err := b.Close(); err != nil {
		logger.Error("release allocations", "error", err)
		return 1
	}
	return 0
}
