package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonctl"
	"github.com/wcache/wcache/core/paths"
)

func newStopCommand(e *env) *cobra.Command {
	var (
		force   bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stop (--device-uuid UUID | --all)",
		Short: "Stop daemons: drain their leases (or end them with --force), free the memory, exit",
		Long: `Stop asks a daemon to stop. By default it drains: every attached client is
told the daemon is going, and the daemon waits up to --timeout for them to
release their leases. If leases remain, the stop fails (exit 1) naming them
and the daemon keeps serving; --force ends every lease at once. wcache stop
returns once the daemon process has exited.`,
		Args: cobra.NoArgs,
	}
	df := addDevicesFlags(cmd.Flags(), "stop the daemon of this device", "stop every daemon of this user")
	cmd.Flags().BoolVar(&force, "force", false, "end every lease at once instead of draining")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long to wait for leases (0: the daemon's drain timeout, 30s by default)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		targets, err := df.targets(daemonctl.Find)
		if err != nil {
			return err
		}
		return forEachDaemon(e.stdout, targets, func(t daemonctl.Found) (string, error) {
			return stopDaemon(cmd.Context(), t.Paths, force, timeout)
		})
	}
	return cmd
}

// devicesFlags are stop's and cleanup's choice of daemons, --device-uuid
// or --all, with the path layout flags.
type devicesFlags struct {
	layout *layoutFlags
	uuid   string
	all    bool
}

// addDevicesFlags registers the layout flags, --device-uuid and --all on
// fs; one and every say what the command does to the device or to all.
func addDevicesFlags(fs *pflag.FlagSet, one, every string) *devicesFlags {
	f := &devicesFlags{layout: addLayoutFlags(fs)}
	fs.StringVar(&f.uuid, "device-uuid", "", one)
	fs.BoolVar(&f.all, "all", false, every)
	return f
}

// targets resolves the layout and the daemons the flags name
// (selectDaemons, with find for --all).
func (f *devicesFlags) targets(find findDaemons) ([]daemonctl.Found, error) {
	layout, err := f.layout.layout()
	if err != nil {
		return nil, err
	}
	return selectDaemons(layout, f.uuid, f.all, find)
}

// findDaemons lists the daemons of a layout: daemonctl.Find, or
// FindWithLocks (cleanup).
type findDaemons func(paths.Layout) ([]daemonctl.Found, error)

// selectDaemons resolves --device-uuid / --all into daemons to act on,
// those find lists for --all.
func selectDaemons(layout paths.Layout, uuid string, all bool, find findDaemons) ([]daemonctl.Found, error) {
	switch {
	case uuid != "" && all:
		return nil, usageErrorf("--device-uuid and --all exclude each other")
	case uuid != "":
		p, err := layout.Derive(uuid)
		if err != nil {
			return nil, withCode(ExitUsage, err)
		}
		return []daemonctl.Found{{UUID: uuid, Paths: p}}, nil
	case all:
		found, err := find(layout)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, withCode(ExitNoDaemon, errNoDaemons)
		}
		return found, nil
	}
	return nil, usageErrorf("name a daemon with --device-uuid, or pass --all")
}

// stopDaemon stops one daemon and waits for its process to exit; a device
// without a running daemon exits 3.
func stopDaemon(ctx context.Context, p paths.Paths, force bool, timeout time.Duration) (string, error) {
	s, err := daemonctl.Stop(ctx, p, force, timeout)
	if errors.Is(err, client.ErrNoDaemon) {
		return "", withCode(ExitNoDaemon, err)
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("stopped daemon of %s (pid %d, %d lease(s) at stop)", p.DeviceUUID, s.PID, s.Leases), nil
}

// forEachDaemon acts on every target at once, prints each success message
// as it comes, and joins the failures (joinCommandErrors).
func forEachDaemon[T any](w io.Writer, targets []T, act func(T) (string, error)) error {
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, err := act(t)
			errs[i] = err
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				fmt.Fprintln(w, msg)
			}
		}()
	}
	wg.Wait()
	return joinCommandErrors(errs)
}

// joinCommandErrors joins per-daemon errors; the exit code is 1 if any
// failed for another reason than a missing daemon, else 3.
func joinCommandErrors(errs []error) error {
	var all []error
	code := ExitNoDaemon
	for _, err := range errs {
		if err == nil {
			continue
		}
		all = append(all, err)
		var xe *exitError
		if !errors.As(err, &xe) || xe.code != ExitNoDaemon {
			code = ExitFailure
		}
	}
	if len(all) == 0 {
		return nil
	}
	return withCode(code, errors.Join(all...))
}
