package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/sdk/procstat"
)

// stopExitWait bounds waiting for a stopped daemon's process to exit.
const stopExitWait = 60 * time.Second

func newStopCommand(e *env) *cobra.Command {
	var (
		uuid    string
		all     bool
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
	lf := addLayoutFlags(cmd.Flags())
	cmd.Flags().StringVar(&uuid, "device-uuid", "", "stop the daemon of this device")
	cmd.Flags().BoolVar(&all, "all", false, "stop every daemon of this user")
	cmd.Flags().BoolVar(&force, "force", false, "end every lease at once instead of draining")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long to wait for leases (0: the daemon's drain timeout, 30s by default)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		layout, err := lf.layout()
		if err != nil {
			return err
		}
		targets, err := selectDaemons(layout, uuid, all)
		if err != nil {
			return err
		}
		errs := make([]error, len(targets))
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, t := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg, err := stopDaemon(cmd.Context(), t.Paths, force, timeout)
				errs[i] = err
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					fmt.Fprintln(e.stdout, msg)
				}
			}()
		}
		wg.Wait()
		return joinCommandErrors(errs)
	}
	return cmd
}

// selectDaemons resolves --device-uuid / --all into daemons to act on.
func selectDaemons(layout paths.Layout, uuid string, all bool) ([]foundDaemon, error) {
	switch {
	case uuid != "" && all:
		return nil, usageErrorf("--device-uuid and --all exclude each other")
	case uuid != "":
		p, err := layout.Derive(uuid)
		if err != nil {
			return nil, withCode(ExitUsage, err)
		}
		return []foundDaemon{{UUID: uuid, Paths: p}}, nil
	case all:
		found, err := findDaemons(layout)
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

// stopDaemon stops one daemon and waits for its process to exit.
func stopDaemon(ctx context.Context, p paths.Paths, force bool, timeout time.Duration) (string, error) {
	r, err := daemonfile.ReadReady(p.Ready)
	if errors.Is(err, fs.ErrNotExist) {
		return "", withCode(ExitNoDaemon, fmt.Errorf("device %s: no daemon (no ready file %s)", p.DeviceUUID, p.Ready))
	}
	if err != nil {
		return "", fmt.Errorf("device %s: %w", p.DeviceUUID, err)
	}
	if ps := procstat.Inspect(r.PID, r.StartTime); ps != procstat.Alive {
		return "", withCode(ExitNoDaemon, fmt.Errorf("device %s: the daemon (pid %d) is gone (%s) and left stale files; run `wcache cleanup --device-uuid %s`",
			p.DeviceUUID, r.PID, processName(ps), p.DeviceUUID))
	}
	c, err := client.Dial(ctx, client.BySocket(p.Socket), client.Options{})
	if err != nil {
		if errors.Is(err, client.ErrNoDaemon) {
			return "", withCode(ExitNoDaemon, err)
		}
		return "", err
	}
	defer c.Close()
	// The RPC lasts as long as the drain; give it room beyond the timeout.
	rpcTimeout := timeout
	if rpcTimeout <= 0 {
		rpcTimeout = 30 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, rpcTimeout+15*time.Second)
	defer cancel()
	n, err := c.Stop(rctx, force, timeout)
	if err != nil {
		return "", fmt.Errorf("device %s: %w", p.DeviceUUID, err)
	}
	if err := waitProcessExit(ctx, r.PID, r.StartTime, stopExitWait); err != nil {
		return "", fmt.Errorf("device %s: %w", p.DeviceUUID, err)
	}
	return fmt.Sprintf("stopped daemon of %s (pid %d, %d lease(s) at stop)", p.DeviceUUID, r.PID, n), nil
}

// waitProcessExit polls until the process is no longer alive.
func waitProcessExit(ctx context.Context, pid int, start uint64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for procstat.Inspect(pid, start) == procstat.Alive {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still running %s after it accepted the stop", pid, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
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
