package fill

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/wcache/wcache/core/peer"
)

// PeerOptions configure the daemon's cross-node peer fill
// (docs/peer-fill.md): the endpoint it serves its generations on, and the
// peers it fills a file load from. The zero value turns both off.
type PeerOptions struct {
	// Listen, when set, is the TCP address (host:port) of the peer
	// endpoint: other daemons whose client certificate verifies against
	// Creds' CA read the generations this daemon serves, by weights
	// identity (peer.Server, bounded by Server's limits). "": no endpoint.
	Listen string
	// Peers are the daemons asked, in order, for a file load's weights
	// before the files are read: host:port entries, or a name resolving to
	// many (peer.ResolvePeers). nil: every load reads the files.
	Peers []string
	// Creds are the mutual-TLS credentials of both sides (required with
	// Listen or Peers).
	Creds *peer.Credentials
	// Server bounds the endpoint (its zero fields select peer's
	// defaults); Server.Logger is the daemon's.
	Server peer.ServerOptions
	// Transport, when set, replaces the TCP transport of a fill (tests:
	// another network namespace's dialer). nil: peer.TCPTransport over
	// Creds.
	Transport peer.Transport
	// Streams is the number of parallel reads of a fill (0:
	// peer.DefaultStreams).
	Streams int
	// StageWindowBytes is the staging window of a fill into arenas the
	// daemon cannot write (device memory: netstage.go), the unit the
	// plugin loads and the bound of host memory per window held (0:
	// DefaultStageWindowBytes). Memfd arenas are written directly.
	StageWindowBytes uint64
	// FillTimeout bounds a fill from Peers as a whole, and FillMinRate
	// (bytes per second, over each FillRateWindow: 0 selects
	// peer.DefaultRateWindow) its rate once the arenas are allocated; a
	// fill past either is given up, its arenas freed, the reason logged
	// and in fill_fallback, and the files read (peer.FetchOptions'
	// Deadline, MinRate, RateWindow). 0: no bound (serve sets its flags'
	// defaults: --peer-fill-timeout, --peer-fill-min-rate).
	FillTimeout    time.Duration
	FillMinRate    uint64
	FillRateWindow time.Duration
}

// ErrPeerOptions: the peer options are incomplete or malformed.
var ErrPeerOptions = errors.New("peer fill options")

// Check refuses an incomplete configuration (an error wrapping
// ErrPeerOptions).
func (o PeerOptions) Check() error {
	if o.Listen == "" && len(o.Peers) == 0 {
		return nil
	}
	if o.Creds == nil || o.Creds.CertFile == "" || o.Creds.KeyFile == "" || o.Creds.CAFile == "" {
		return fmt.Errorf("%w: a peer endpoint or peers need a certificate, its key and a CA bundle", ErrPeerOptions)
	}
	if o.Listen != "" {
		if _, _, err := net.SplitHostPort(o.Listen); err != nil {
			return fmt.Errorf("%w: listen address %q: %w", ErrPeerOptions, o.Listen, err)
		}
	}
	for _, p := range o.Peers {
		if _, _, err := net.SplitHostPort(p); err != nil {
			return fmt.Errorf("%w: peer %q: %w", ErrPeerOptions, p, err)
		}
	}
	if err := o.Creds.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrPeerOptions, err)
	}
	return nil
}
