package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/daemonfile"
)

// Run serves until the daemon stops and then shuts it down (see the package
// documentation for the order):
//
//   - a Stop that drained or was forced: Run returns nil;
//   - ctx cancelled (SIGTERM/SIGINT in the serve command): drain for
//     DrainTimeout, end the leases left, return nil;
//   - the plugin exited: end every lease with UNAVAILABLE, remove the files,
//     return an error wrapping ErrPluginExited;
//   - the gRPC server failed: return its error.
func (d *Daemon) Run(ctx context.Context) error {
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
			return d.shutdown(status.Error(codes.Unavailable, "daemon stopped: drain timeout passed"), true)
		case <-d.plugin.Exited():
			return d.pluginExited()
		}
	case <-d.plugin.Exited():
		return d.pluginExited()
	case err := <-d.serveErr:
		serr := fmt.Errorf("serving on %s: %w", d.info.Paths.Socket, err)
		_ = d.shutdown(status.Error(codes.Unavailable, "daemon failed: "+serr.Error()), true)
		return serr
	}
}

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
	n := len(d.reg.list())
	if force {
		d.reg.stop(status.Error(codes.Unavailable, "daemon stopped (forced)"))
		d.requestShutdown()
		return n, nil
	}
	drained, err := d.drain(ctx, timeout, "is stopping")
	if err != nil || !drained {
		return n, err // timed out, or already stopping
	}
	d.reg.stop(status.Error(codes.Unavailable, "daemon stopped"))
	d.reg.endDrain()
	d.requestShutdown()
	return n, nil
}

// drain notifies every lease that the daemon "<what>" and waits up to
// timeout (0: DrainTimeout) for them to go. It reports true with the drain
// still counted (the caller ends it), false when the daemon is already
// stopping, or a *DrainTimeoutError (drain ended, the daemon serves again).
func (d *Daemon) drain(ctx context.Context, timeout time.Duration, what string) (bool, error) {
	if timeout <= 0 {
		timeout = d.opts.DrainTimeout
	}
	deadline := time.Now().Add(timeout)
	notice := &daemonv1.Notice{Kind: daemonv1.Notice_KIND_DRAINING, DeadlineUnixMs: deadline.UnixMilli(),
		Message: fmt.Sprintf("daemon of %s %s: release the lease within %s", d.info.DeviceUUID, what, timeout)}
	if !d.reg.beginDrain(notice) {
		return false, nil
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if d.reg.waitEmpty(wctx) {
		return true, nil
	}
	left := d.leaseInfos()
	d.reg.endDrain()
	return false, &DrainTimeoutError{Timeout: timeout.String(), Leases: left}
}

// shutdown ends what is left and releases everything, in order.
func (d *Daemon) shutdown(leaseErr error, free bool) error {
	d.reg.stop(leaseErr)
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
	var errs []error
	if err := daemonfile.RemoveFiles(d.info.Paths); err != nil {
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
