package cli

import (
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/sdk"
)

// Defaults of the bounds of a fill from --peers (docs/peer-fill.md,
// "Bounds of a fill"). A fill slower than the storage the files are on is
// worse than reading them; these are set so that a healthy datacenter
// link (10 Gbit/s and up: > 1 GiB/s) never meets them, and a peer that
// stalls or is paced far down (a congested, throttled or hostile source)
// is given up within a minute rather than holding the start for hours.
const (
	// defaultPeerFillTimeout bounds a whole fill: 30 minutes moves 1.8 TB
	// at 1 GB/s; a checkpoint that needs longer over the links at hand is
	// faster read from most storage.
	defaultPeerFillTimeout = 30 * time.Minute
	// defaultPeerFillMinRate (bytes per second, over each
	// defaultPeerFillRateWindow): 32 MiB/s is below any healthy link
	// shared by a node's 8 fillers and above a stalled or trickling one.
	defaultPeerFillMinRate = "32MiB"
	// defaultPeerFillRateWindow: long enough for TCP's slow start, a
	// pause, a busy source; 32 MiB/s × 30 s is 15 times a fill's 4
	// streams × 16 MiB chunks, the unit bytes are counted in.
	defaultPeerFillRateWindow = 30 * time.Second
)

// peerFlags are serve's cross-node peer fill flags (docs/peer-fill.md).
type peerFlags struct {
	listen, cert, key, ca, rate string
	allow, peers                []string
	fillTimeout, rateWindow     time.Duration
	minRate                     string

	fs *pflag.FlagSet
}

func (p *peerFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&p.listen, "peer-listen", "",
		"serve this daemon's weights to other daemons on this TCP address (host:port), over mutual TLS; off by default")
	fs.StringSliceVar(&p.peers, "peers", nil,
		"daemons to fill a --model from before reading its files: host:port entries, or one name resolving to many (a headless Service)")
	fs.StringVar(&p.cert, "peer-cert", "", "PEM certificate chain of this daemon for --peer-listen and --peers (re-read when it changes)")
	fs.StringVar(&p.key, "peer-key", "", "PEM private key of --peer-cert")
	fs.StringVar(&p.ca, "peer-ca", "", "PEM bundle of the CA(s) whose peers are trusted, both ways")
	fs.StringSliceVar(&p.allow, "peer-allow", nil,
		"accept only peers whose certificate names one of these (DNS or URI SAN such as a SPIFFE ID, or common name; repeatable)")
	fs.StringVar(&p.rate, "peer-rate", "",
		"bound what --peer-listen sends per second over all peers (a size such as 2GiB); default: no bound")
	fs.DurationVar(&p.fillTimeout, "peer-fill-timeout", defaultPeerFillTimeout,
		"give a fill from --peers up after this long (the files are read instead; 0: no deadline)")
	fs.StringVar(&p.minRate, "peer-fill-min-rate", defaultPeerFillMinRate,
		"give a fill from --peers up when it receives less than this per second over a --peer-fill-rate-window "+
			"(a size such as 32MiB; the files are read instead; 0: no minimum)")
	fs.DurationVar(&p.rateWindow, "peer-fill-rate-window", defaultPeerFillRateWindow,
		"the window --peer-fill-min-rate is measured over")
	p.fs = fs
}

// fillBoundsSet reports whether a --peer-fill-* flag was given.
func (p *peerFlags) fillBoundsSet() bool {
	if p.fs == nil {
		return false
	}
	for _, n := range []string{"peer-fill-timeout", "peer-fill-min-rate", "peer-fill-rate-window"} {
		if f := p.fs.Lookup(n); f != nil && f.Changed {
			return true
		}
	}
	return false
}

// apply checks the flags and sets opts.Peer. Certificate flags without an
// endpoint or peers, or an endpoint or peers without all three, are usage
// errors; unreadable files fail the start (daemon.Start).
func (p *peerFlags) apply(opts *daemon.Options) error {
	on := p.listen != "" || len(p.peers) > 0
	certs := p.cert != "" || p.key != "" || p.ca != ""
	switch {
	case len(p.peers) == 0 && p.fillBoundsSet():
		return usageErrorf("--peer-fill-timeout, --peer-fill-min-rate and --peer-fill-rate-window need --peers")
	case !on && (certs || len(p.allow) > 0 || p.rate != ""):
		return usageErrorf("--peer-cert, --peer-key, --peer-ca, --peer-allow and --peer-rate need --peer-listen or --peers")
	case !on:
		return nil
	case p.cert == "" || p.key == "" || p.ca == "":
		return usageErrorf("--peer-listen and --peers need --peer-cert, --peer-key and --peer-ca (mutual TLS; there is no unauthenticated mode)")
	case p.rate != "" && p.listen == "":
		return usageErrorf("--peer-rate needs --peer-listen")
	case p.fillTimeout < 0 || p.rateWindow <= 0:
		return usageErrorf("--peer-fill-timeout must be 0 or more and --peer-fill-rate-window above 0")
	}
	po := daemon.PeerOptions{Listen: p.listen,
		Creds: &peer.Credentials{CertFile: p.cert, KeyFile: p.key, CAFile: p.ca, AllowedNames: p.allow}}
	for _, e := range p.peers {
		if e = strings.TrimSpace(e); e != "" {
			po.Peers = append(po.Peers, e)
		}
	}
	po.FillTimeout, po.FillRateWindow = p.fillTimeout, p.rateWindow
	if p.minRate != "0" {
		n, err := sdk.ParseSize(p.minRate)
		if err != nil {
			return usageErrorf("--peer-fill-min-rate %q: want a size such as 32MiB (bytes per second), or 0", p.minRate)
		}
		po.FillMinRate = n
	}
	if p.rate != "" {
		n, err := sdk.ParseSize(p.rate)
		if err != nil || n == 0 {
			return usageErrorf("--peer-rate %q: want a size above 0 such as 2GiB (bytes per second)", p.rate)
		}
		po.Server.RateBytesPerSec = n
	}
	opts.Peer = po
	return nil
}
