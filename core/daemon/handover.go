package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/wcache/wcache/core/daemonfile"
)

// handoverListener is the gRPC server's listener: it can be paused (its
// socket closed, Accept waiting) and resumed on a new socket without
// ending Serve, so that a daemon handing over to a successor keeps its
// gRPC connections, and so its leases, while it has no socket, and can
// serve on if the successor fails (takeover.go).
type handoverListener struct {
	mu     sync.Mutex
	cond   *sync.Cond
	l      net.Listener
	paused bool
	closed bool
}

func newHandoverListener(l net.Listener) *handoverListener {
	h := &handoverListener{l: l}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// Accept returns the next connection; while paused it waits for resume.
// It fails with net.ErrClosed once Close was called.
func (h *handoverListener) Accept() (net.Conn, error) {
	for {
		h.mu.Lock()
		for h.paused && !h.closed {
			h.cond.Wait()
		}
		if h.closed {
			h.mu.Unlock()
			return nil, net.ErrClosed
		}
		l := h.l
		h.mu.Unlock()
		c, err := l.Accept()
		if err == nil {
			return c, nil
		}
		h.mu.Lock()
		swapped := !h.closed && (h.paused || h.l != l)
		h.mu.Unlock()
		if !swapped {
			return nil, err
		}
	}
}

// pause closes the socket (Accept waits).
func (h *handoverListener) pause() {
	h.mu.Lock()
	h.paused = true
	l := h.l
	h.mu.Unlock()
	_ = l.Close()
}

// resume serves on l.
func (h *handoverListener) resume(l net.Listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.l, h.paused = l, false
	h.cond.Broadcast()
}

// Close closes the socket for good.
func (h *handoverListener) Close() error {
	h.mu.Lock()
	h.closed = true
	l := h.l
	h.cond.Broadcast()
	h.mu.Unlock()
	return l.Close()
}

// Addr is the socket's address.
func (h *handoverListener) Addr() net.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l.Addr()
}

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
	d.glis.pause()
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
	d.glis.resume(lis)
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

// testDieAfter names the point of a takeover at which a successor kills
// itself (SIGKILL), from WCACHE_TEST_TAKEOVER_DIE_AFTER. It is read only
// by the end-to-end tests (test/e2e): "imported" dies once the old daemon
// has released its lock for the successor, before the successor listens.
func testDieAfter(point string) {
	if os.Getenv("WCACHE_TEST_TAKEOVER_DIE_AFTER") == point {
		p, err := os.FindProcess(os.Getpid())
		if err == nil {
			_ = p.Kill()
		}
	}
}
