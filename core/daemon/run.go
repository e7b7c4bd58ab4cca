package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/daemonfile"
	"github.com/wcache/wcache/internal/defaults"
)

// Run serves until the daemon stops and then shuts it down (see the package
// documentation for the order):
//
//   - a Stop that drained or was forced: Run returns nil;
//   - ctx cancelled (SIGTERM/SIGINT in the serve command): drain for
//     DrainTimeout, end the leases left, return nil;
//   - the plugin exited: with descriptor handles and Options.RestartPlugin,
//     start a new plugin, import every allocation into it and serve on
//     (replacePlugin); otherwise end every lease with UNAVAILABLE, remove
//     the files, return an error wrapping ErrPluginExited;
//   - the gRPC server failed: return its error;
//   - its socket, ready file or lock file was removed or replaced (checked
//     every second): drain as for ctx, then return an error wrapping
//     daemonfile.ErrFileLost. Its identity lock no longer keeps a second
//     daemon off the device, and new clients cannot reach it.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.watchMu.Lock()
	d.runCtx, d.runCancel = ctx, cancel
	d.watchMu.Unlock()
	d.watchFiles()
	stopVerify := d.startHubBlobVerify(ctx)
	defer stopVerify()
	for {
		select {
		case <-d.stopCh:
			return d.shutdown(status.Error(codes.Unavailable, "daemon stopped"), true)
		case <-ctx.Done():
			d.log.Info("stop requested: draining", "timeout", d.opts.DrainTimeout)
			drained := make(chan error, 1)
			go func() {
				_, err := d.Stop(context.Background(), false, d.opts.DrainTimeout)
				drained <- err
			}()
			select {
			case err := <-drained:
				if err != nil {
					d.log.Warn("drain timed out: ending the leases left", "error", err)
				}
				serr := d.shutdown(status.Error(codes.Unavailable, "daemon stopped: drain timeout passed"), true)
				if cause := context.Cause(ctx); errors.Is(cause, daemonfile.ErrFileLost) {
					return errors.Join(cause, serr)
				}
				return serr
			case <-d.plugin.Exited():
				return d.pluginExited()
			}
		case <-d.plugin.Exited():
			if d.replacePlugin(ctx) {
				continue
			}
			return d.pluginExited()
		case err := <-d.serveErr:
			serr := fmt.Errorf("serving on %s: %w", d.info.Paths.Socket, err)
			_ = d.shutdown(status.Error(codes.Unavailable, "daemon failed: "+serr.Error()), true)
			return serr
		}
	}
}

// fileCheckInterval is how often Run checks that its files are in place.
const fileCheckInterval = time.Second

// pluginExited ends every lease with UNAVAILABLE and shuts down without
// freeing (the memory went with the plugin process).
func (d *Daemon) pluginExited() error {
	perr := fmt.Errorf("%w: %v", ErrPluginExited, d.plugin.ExitError())
	d.log.Error("backend plugin exited: ending every lease", "error", perr)
	_ = d.shutdown(status.Error(codes.Unavailable, perr.Error()), false)
	return perr
}

// requestShutdown makes Run shut the daemon down.
func (d *Daemon) requestShutdown() {
	d.stopOnce.Do(func() { close(d.stopCh) })
}

// Stop stops the daemon as the Stop RPC does. With force, every lease ends
// at once. Otherwise every lease gets a KIND_DRAINING notice and Stop waits
// up to timeout (0: DrainTimeout) for them to go; if some are still there it
// returns a *DrainTimeoutError and the daemon keeps serving. On success Run
// shuts the daemon down. It returns the number of leases when it began.
func (d *Daemon) Stop(ctx context.Context, force bool, timeout time.Duration) (int, error) {
	n := len(d.reg.List())
	if force {
		d.reg.Stop(status.Error(codes.Unavailable, "daemon stopped (forced)"))
		d.requestShutdown()
		return n, nil
	}
	drained, err := d.drain(ctx, timeout, "is stopping")
	if err != nil || !drained {
		return n, err // timed out, or already stopping
	}
	d.reg.Stop(status.Error(codes.Unavailable, "daemon stopped"))
	d.reg.EndDrain()
	d.requestShutdown()
	return n, nil
}

// drain notifies every lease that the daemon "<what>" and waits up to
// timeout (0: DrainTimeout) for them to go. It reports true with the drain
// still counted (the caller ends it), false when the daemon is already
// stopping, or a *DrainTimeoutError (drain ended, the daemon serves again).
func (d *Daemon) drain(ctx context.Context, timeout time.Duration, what string) (bool, error) {
	defaults.Positive(&timeout, d.opts.DrainTimeout)
	deadline := time.Now().Add(timeout)
	notice := drainNotice(deadline, fmt.Sprintf("daemon of %s %s: release the lease within %s",
		d.info.DeviceUUID, what, timeout))
	if !d.reg.BeginDrain(notice) {
		return false, nil
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if d.reg.WaitEmpty(wctx, nil) {
		return true, nil
	}
	left := d.leaseInfos()
	d.reg.EndDrain()
	return false, &DrainTimeoutError{Timeout: timeout.String(), Leases: left}
}

// shutdown ends what is left and releases everything, in order.
func (d *Daemon) shutdown(leaseErr error, free bool) error {
	d.reg.Stop(leaseErr)
	d.stopPeerServer()
	done := make(chan struct{})
	go func() {
		d.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(gracefulStopTimeout):
		d.srv.Stop()
		<-done
	}
	d.mu.RLock()
	fdLis := d.fdLis
	d.mu.RUnlock()
	fdLis.Close()
	var errs []error
	if err := d.lock.RemoveOwned(); err != nil {
		errs = append(errs, fmt.Errorf("removing files: %w", err))
	}
	if free {
		d.freeAll()
	}
	if err := d.plugin.Close(); err != nil {
		// The plugin's memory is released either way; a kill is expected.
		d.log.Warn("closing the backend plugin", "error", err)
	}
	if err := d.lock.Release(); err != nil {
		errs = append(errs, fmt.Errorf("releasing the lock: %w", err))
	}
	d.log.Info("stopped")
	return errors.Join(errs...)
}
