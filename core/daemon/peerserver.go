package daemon

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/wcache/wcache/core/daemon/handover"
	"github.com/wcache/wcache/core/peer"
)

// peerEndpoint is the daemon's peer endpoint (nil srv: none).
type peerEndpoint struct {
	srv  *peer.Server
	addr string
	// lis is the listener, paused during a takeover (handover.PeerListener).
	lis *handover.PeerListener
	// ctx ends when the endpoint stops (background digests stop with it).
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
}

// startPeerServer listens on Options.Peer.Listen and serves the daemon's
// generations to authenticated peers (peer.Server: mutual TLS, connection
// limits, timeouts, Peer.Server.RateBytesPerSec) until stopPeerServer; it
// also computes the content digests of what the daemon already holds, so
// the first peer does not wait for them. Without Listen it does nothing.
// inherited (may be nil) is the listener of a daemon taken over, used when
// it is bound to Listen (peerListen).
func (d *Daemon) startPeerServer(inherited *os.File) error {
	po := d.opts.Peer
	if po.Listen == "" {
		if inherited != nil {
			_ = inherited.Close()
		}
		return nil
	}
	opts := po.Server
	opts.Logger = d.log.Named("peer")
	srv, err := peer.NewServer(peerSource{d: d}, po.Creds, opts)
	if err != nil {
		if inherited != nil {
			_ = inherited.Close()
		}
		return fmt.Errorf("peer endpoint: %w", err)
	}
	l, err := d.peerListen(po.Listen, inherited)
	if err != nil {
		return fmt.Errorf("peer endpoint: %w", err)
	}
	d.peer.srv, d.peer.addr, d.peer.lis = srv, l.Addr().String(), l
	go func() {
		if err := srv.Serve(l); err != nil {
			d.log.Error("peer endpoint stopped", "addr", d.peer.addr, "error", err)
		}
	}()
	d.log.Info("peer endpoint listening", "addr", d.peer.addr, "rate_bytes_per_second", opts.RateBytesPerSec)
	go d.warmPeerDigests()
	return nil
}

// warmPeerDigests computes the arena digests of every serving generation.
func (d *Daemon) warmPeerDigests() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(d.peerCtx(), cancel)
	defer stop()
	d.reg.mu.Lock()
	var ids []string
	for _, g := range d.reg.gens {
		if g.state == StateServing && g.manifest != nil {
			ids = append(ids, weightsIdentity(g))
		}
	}
	d.reg.mu.Unlock()
	for _, id := range ids {
		if id == "" {
			continue
		}
		if g, err := (peerSource{d: d}).Open(ctx, id); err == nil {
			g.Release()
		} else if ctx.Err() == nil {
			d.log.Warn("arena content digests for peers", "identity", id, "error", err)
		}
	}
}

// peerCtx ends when the peer endpoint stops.
func (d *Daemon) peerCtx() context.Context {
	d.peer.once.Do(func() { d.peer.ctx, d.peer.cancel = context.WithCancel(context.Background()) })
	return d.peer.ctx
}

// stopPeerServer closes the endpoint and its connections and waits for
// their holds to be released (before the daemon frees its memory).
func (d *Daemon) stopPeerServer() {
	d.peerCtx()
	d.peer.cancel()
	if d.peer.srv != nil {
		_ = d.peer.srv.Close()
		d.log.Info("peer endpoint closed", "addr", d.peer.addr)
	}
}

// PeerAddr is the peer endpoint's address ("" without one).
func (d *Daemon) PeerAddr() string { return d.peer.addr }
