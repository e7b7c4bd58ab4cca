package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/wcache/wcache/core/daemonfile"
)

// watchFiles makes Run stop (cause daemonfile.ErrFileLost) once a daemon
// file is lost, until stopWatch. Before Run it does nothing.
func (d *Daemon) watchFiles() {
	d.watchMu.Lock()
	defer d.watchMu.Unlock()
	if d.runCtx == nil {
		return
	}
	ctx, stop := context.WithCancel(d.runCtx)
	d.watchStop = stop
	go func() {
		if err, ok := <-d.lock.Watch(ctx, fileCheckInterval); ok {
			d.log.Error("stopping: lost a daemon file", "error", err)
			d.runCancel(err)
		}
	}()
}

// stopWatch stops watchFiles.
func (d *Daemon) stopWatch() {
	d.watchMu.Lock()
	defer d.watchMu.Unlock()
	if d.watchStop != nil {
		d.watchStop()
		d.watchStop = nil
	}
}

// releaseIdentity is the old daemon's side of a takeover once the
// successor imported the descriptors: it stops accepting (gRPC and
// descriptor channel; the gRPC connections and so the leases stay),
// removes its socket, channel and ready file and releases its identity
// lock, keeping its memory. retakeIdentity undoes it.
func (d *Daemon) releaseIdentity() error {
	d.stopWatch()
	d.glis.Pause()
	d.mu.Lock() // against rewriteReady (Publish, Evict)
	defer d.mu.Unlock()
	d.released = true
	d.fdLis.Close()
	rerr := d.lock.RemoveOwned()
	if err := d.lock.Release(); err != nil {
		return errors.Join(rerr, err)
	}
	return rerr
}

// retakeIdentity takes the identity lock back after releaseIdentity (the
// successor failed before it served), listens again on the socket and
// the descriptor channel and rewrites the ready file. A successor that
// holds the lock after all is a *daemonfile.LiveDaemonError.
func (d *Daemon) retakeIdentity(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.lock.Retake(ctx, d.info.Paths, daemonfile.CleanupOptions{
		Logf: func(format string, args ...any) { d.log.Info(fmt.Sprintf(format, args...)) },
	}); err != nil {
		return err
	}
	lis, err := ListenUnix(d.info.Paths.Socket, d.opts.SocketGID)
	if err != nil {
		return err
	}
	d.glis.Resume(lis)
	fdLis, err := d.listenFDChannel()
	if err != nil {
		return err
	}
	d.fdLis = fdLis
	go d.serveFDChannel(fdLis)
	if err := d.writeReady(); err != nil {
		return err
	}
	if err := d.ownFiles(); err != nil {
		return err
	}
	d.released = false
	d.watchFiles()
	return nil
}
