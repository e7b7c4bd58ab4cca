package daemon

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/daemon/fill"
	"github.com/wcache/wcache/core/daemon/handover"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/sdk"
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
	srv, err := peer.NewServer(d.peerSource(), po.Creds, opts)
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
	var ids []string
	d.reg.ForEachServing(func(g *generation) {
		if g.Manifest != nil {
			ids = append(ids, weightsIdentity(g))
		}
	})
	for _, id := range ids {
		if id == "" {
			continue
		}
		if g, err := d.peerSource().Open(ctx, id); err == nil {
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

// peerSource is the daemon's generations as a peer.Source (fill.Source).
func (d *Daemon) peerSource() fill.Source {
	return fill.Source{Gens: servedGens{d}, Daemon: fillHost{d}, Log: d.log}
}

// servedGens are the daemon's generations as the endpoint lends them
// (fill.Generations).
type servedGens struct{ d *Daemon }

// Lend returns the serving generation of identity (peer.ErrNotHeld when
// none), with duplicates of its arenas' descriptors.
func (s servedGens) Lend(identity string) (fill.Lent, error) {
	d := s.d
	var allocs []sdk.AllocationID
	var sizes []uint64
	g := d.reg.FirstServing(func(o *generation) bool {
		return o.Manifest != nil && weightsIdentity(o) == identity
	}, func(g *generation) {
		allocs, sizes = slices.Clone(g.Allocs), arenaSizes(g)
	})
	if g == nil {
		return fill.Lent{}, fmt.Errorf("identity %s: %w", identity, peer.ErrNotHeld)
	}
	files, err := g.Manifest.files.descriptors(false)
	if err != nil {
		return fill.Lent{}, fmt.Errorf("generation %d: %w", g.ID, peer.ErrGenerationChanged)
	}
	byArena := make([]*os.File, len(sizes))
	for _, f := range files {
		if int(f.Handle) < len(byArena) {
			byArena[f.Handle] = f.File
		}
	}
	return fill.Lent{ID: g.ID, Allocs: allocs, Sizes: sizes, Files: byArena, Digests: &g.PeerDigests,
		Serves: func() bool { return d.reg.Serves(g) }}, nil
}

// weightsIdentity is g's weights identity: a publication's by the published
// rule, any other (a file load, one taken over) by the files' rule. ""
// when g has none (a file load without a checkpoint digest).
func weightsIdentity(g *generation) string {
	kind := cacheconfig.WeightsFromFiles
	if g.Manifest != nil && g.Manifest.published {
		kind = cacheconfig.WeightsPublished
	}
	id, err := cacheconfig.WeightsIdentity(g.Config, kind)
	if err != nil {
		return ""
	}
	return id
}

// arenaSizes are the sizes a peer is offered: the plan's arena sizes for a
// load (what a peer's own plan of the same files allocates), the exported
// handles' otherwise. The registry's lock held.
func arenaSizes(g *generation) []uint64 {
	if g.ArenaBytes != nil {
		return slices.Clone(g.ArenaBytes)
	}
	out := make([]uint64, len(g.Manifest.handles))
	for i, h := range g.Manifest.handles {
		out[i] = h.GetSize()
	}
	return out
}
