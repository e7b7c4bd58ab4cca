package daemon

import (
	"fmt"
	"net"
	"os"

	"github.com/wcache/wcache/core/daemon/handover"
)

// peerListen returns the peer endpoint's listener for addr
// (--peer-listen): the listener inherited from the daemon taken over when
// it is bound to that address (same port, same or unspecified IP), else a
// new one. The inherited file is closed either way (the listener has its
// own descriptor).
func (d *Daemon) peerListen(addr string, inherited *os.File) (*handover.PeerListener, error) {
	if inherited != nil {
		l, err := net.FileListener(inherited)
		_ = inherited.Close()
		tl, ok := l.(*net.TCPListener)
		switch {
		case err != nil:
			d.log.Warn("peer endpoint: the listener of the daemon taken over is unusable; listening anew", "error", err)
		case !ok:
			_ = l.Close()
			d.log.Warn("peer endpoint: the daemon taken over passed no TCP listener; listening anew", "type", fmt.Sprintf("%T", l))
		case !sameListenAddr(addr, tl.Addr()):
			_ = l.Close()
			d.log.Info("peer endpoint: the daemon taken over listened elsewhere; listening anew", "theirs", tl.Addr().String(), "ours", addr)
		default:
			d.log.Info("peer endpoint: serving on the listener of the daemon taken over", "addr", tl.Addr().String())
			return handover.NewPeerListener(tl), nil
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return handover.NewPeerListener(l.(*net.TCPListener)), nil
}

// sameListenAddr reports whether a listener bound to got is what
// --peer-listen spec asks for: the same port (never 0: "any port" asks
// for a new one), and the same IP or, for a spec without one, the
// unspecified address.
func sameListenAddr(spec string, got net.Addr) bool {
	want, err := net.ResolveTCPAddr("tcp", spec)
	g, ok := got.(*net.TCPAddr)
	if err != nil || !ok || want.Port == 0 || want.Port != g.Port {
		return false
	}
	if want.IP == nil || want.IP.IsUnspecified() {
		return g.IP.IsUnspecified()
	}
	return want.IP.Equal(g.IP)
}

// pausePeer pauses the peer endpoint for a takeover and returns a
// duplicate of its socket to pass to the successor (nil, nil without an
// endpoint).
func (d *Daemon) pausePeer() (*os.File, error) {
	if d.peer.lis == nil {
		return nil, nil
	}
	return d.peer.lis.Pause()
}

// resumePeer accepts peers again after a takeover that did not happen.
func (d *Daemon) resumePeer() {
	if d.peer.lis != nil {
		d.peer.lis.Resume()
	}
}
