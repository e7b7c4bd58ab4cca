package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/internal/defaults"
)

// Defaults of Options.
const (
	DefaultReadyTimeout = 10 * time.Minute
	DefaultStopGrace    = 30 * time.Second
	DefaultPollInterval = 50 * time.Millisecond
	// DefaultHandoverWait is Options.HandoverWait's default.
	DefaultHandoverWait = 10 * time.Second
	DefaultTailLines    = 20
	// killWait bounds the wait for a child after SIGKILL.
	killWait = 10 * time.Second
)

// DeviceResolver maps a device ordinal, as this process sees it, to its
// UUID. Every sdk.Backend is one; the launcher starts the backend plugin
// once and asks it for every GPU it places a rank on.
type DeviceResolver interface {
	DeviceUUID(ctx context.Context, ordinal int) (string, error)
}

// PathLayout derives a device's discovery paths. paths.Layout is one.
type PathLayout interface {
	For(uuid string) (paths.Paths, error)
}

// CleanupFunc removes stale discovery files of one device or refuses a live
// daemon; daemonfile.Cleanup is the default.
type CleanupFunc func(ctx context.Context, p paths.Paths, opts daemonfile.CleanupOptions) (daemonfile.CleanupResult, error)

// ReadReadyFunc reads a ready file; daemonfile.ReadReady is the default.
type ReadReadyFunc func(path string) (daemonfile.Ready, error)

// Options configures Launch. Devices and Layout are required.
type Options struct {
	// Topology says which ranks this node hosts and on which GPUs.
	Topology Topology
	// Devices resolves GPU ordinals to UUIDs. The daemons resolve their
	// ordinal themselves too, so they must see the same devices: they get
	// Env, which should be the environment Devices' plugin got.
	Devices DeviceResolver
	// Layout derives the socket, ready and lock paths from a UUID; it must
	// be the layout the daemons compute from ServeArgs and Env.
	Layout PathLayout

	// Executable is the wcache binary run as `wcache serve` ("" → this
	// process's own executable, os.Executable).
	Executable string
	// ServeArgs are appended to every daemon's command line after the
	// per-rank flags (ServeCommand): backend, model, config and layout flags.
	ServeArgs []string
	// Env is every daemon's environment (nil → os.Environ()).
	Env []string

	// Force takes over live daemons found on the GPUs (TERM, grace, KILL)
	// instead of refusing with *daemonfile.LiveDaemonError. It is not
	// passed on to the daemons.
	Force bool
	// ForceGrace is the TERM→KILL grace of a takeover (0 → daemonfile's
	// default).
	ForceGrace time.Duration
	// Takeover starts every daemon with `serve --takeover`: a live daemon
	// on a GPU hands its memory over to the new one instead of being
	// refused or stopped (a daemon with nothing to hand over, or none at
	// all, starts as usual). The launch locks are taken once the daemons
	// are ready, waiting for the previous launcher to let them go (see
	// Group.Supervise). Exclusive with Force.
	Takeover bool
	// HandoverWait is how long Supervise waits, after a daemon exited with
	// status 0, for a successor's ready file on its GPU before it takes the
	// exit for a requested stop (default 10 s).
	HandoverWait time.Duration

	// ReadyTimeout bounds the wait for every ready file (default 10 min).
	ReadyTimeout time.Duration
	// StopGrace is how long a stop waits after SIGTERM before SIGKILL
	// (default 30 s). A daemon drains its leases on SIGTERM, so this should
	// exceed the daemon's drain timeout.
	StopGrace time.Duration
	// PollInterval is how often ready files are checked (default 50 ms).
	PollInterval time.Duration
	// TailLines is how many output lines of each daemon a failure report
	// quotes (default 20).
	TailLines int

	// Output receives every daemon's stdout and stderr, line by line, each
	// line prefixed with "[gpu N tp R pp P] " (nil → discarded).
	Output io.Writer
	// Logf receives the launcher's own progress messages (nil → silent).
	Logf func(format string, args ...any)

	// Starter starts the daemons (nil → a new ExecStarter, closed when the
	// group has stopped).
	Starter Starter
	// Cleanup and ReadReady default to the daemonfile functions.
	Cleanup   CleanupFunc
	ReadReady ReadReadyFunc
	// LaunchLock takes one GPU's launch lock (default LockLaunchFile).
	LaunchLock LaunchLockFunc
}

// withDefaults validates o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Devices == nil {
		return o, errors.New("launcher: Options.Devices is required")
	}
	if o.Layout == nil {
		return o, errors.New("launcher: Options.Layout is required")
	}
	if o.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("launcher: find own executable: %w", err)
		}
		o.Executable = exe
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Force && o.Takeover {
		return o, errors.New("launcher: Force and Takeover exclude each other")
	}
	defaults.Positive(&o.ReadyTimeout, DefaultReadyTimeout)
	defaults.Positive(&o.HandoverWait, DefaultHandoverWait)
	defaults.Positive(&o.StopGrace, DefaultStopGrace)
	defaults.Positive(&o.PollInterval, DefaultPollInterval)
	defaults.Positive(&o.TailLines, DefaultTailLines)
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Cleanup == nil {
		o.Cleanup = daemonfile.Cleanup
	}
	if o.LaunchLock == nil {
		o.LaunchLock = LockLaunchFile
	}
	if o.ReadReady == nil {
		o.ReadReady = daemonfile.ReadReady
	}
	return o, nil
}

// ServeCommand is the command line (without argv[0]) of the daemon of rank
// r in topology t: `serve --gpu-id G --tp-size T --tp-rank R --pp-size P
// --pp-rank Q` followed by extra. The launcher owns these five flags; extra
// must not repeat them.
func ServeCommand(t Topology, r Rank, extra []string) []string {
	args := []string{
		"serve",
		"--gpu-id", strconv.Itoa(r.GPUID),
		"--tp-size", strconv.Itoa(t.TPSize),
		"--tp-rank", strconv.Itoa(r.TPRank),
		"--pp-size", strconv.Itoa(t.PPSize),
		"--pp-rank", strconv.Itoa(r.PPRank),
	}
	return append(args, extra...)
}

// OwnedServeFlags returns the names of the serve flags ServeCommand sets per
// rank; a caller passing flags through must leave them out of ServeArgs.
func OwnedServeFlags() []string {
	return []string{"gpu-id", "tp-size", "tp-rank", "pp-size", "pp-rank"}
}
