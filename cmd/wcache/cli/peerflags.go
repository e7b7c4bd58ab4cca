package cli

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/peer"
	"github.com/wcache/wcache/sdk"
)

// peerFlags are serve's cross-node peer fill flags (docs/peer-fill.md).
type peerFlags struct {
	listen, cert, key, ca, rate string
	allow, peers                []string
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
}

// apply checks the flags and sets opts.Peer. Certificate flags without an
// endpoint or peers, or an endpoint or peers without all three, are usage
// errors; unreadable files fail the start (daemon.Start).
func (p *peerFlags) apply(opts *daemon.Options) error {
	on := p.listen != "" || len(p.peers) > 0
	certs := p.cert != "" || p.key != "" || p.ca != ""
	switch {
	case !on && (certs || len(p.allow) > 0 || p.rate != ""):
		return usageErrorf("--peer-cert, --peer-key, --peer-ca, --peer-allow and --peer-rate need --peer-listen or --peers")
	case !on:
		return nil
	case p.cert == "" || p.key == "" || p.ca == "":
		return usageErrorf("--peer-listen and --peers need --peer-cert, --peer-key and --peer-ca (mutual TLS; there is no unauthenticated mode)")
	case p.rate != "" && p.listen == "":
		return usageErrorf("--peer-rate needs --peer-listen")
	}
	po := daemon.PeerOptions{Listen: p.listen,
		Creds: &peer.Credentials{CertFile: p.cert, KeyFile: p.key, CAFile: p.ca, AllowedNames: p.allow}}
	for _, e := range p.peers {
		if e = strings.TrimSpace(e); e != "" {
			po.Peers = append(po.Peers, e)
		}
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
