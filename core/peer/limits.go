package peer

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// Defaults of the limits a Server applies to a connection before its TLS
// handshake (ServerOptions), when nothing about the peer is known but its
// address.
const (
	// DefaultMaxHandshakes bounds the connections of all sources whose TLS
	// handshake has not completed. A silent connection costs a socket and
	// a goroutine until HandshakeTimeout, so this is a resource bound, set
	// high enough that it takes DefaultMaxHandshakes /
	// DefaultMaxHandshakesPerSource (32) distinct addresses to fill it.
	DefaultMaxHandshakes = 1024
	// DefaultMaxHandshakesPerSource bounds the handshakes in progress from
	// one source: room for 8 daemons of one node (a node's GPUs behind one
	// address) each opening 4 streams at the same moment.
	DefaultMaxHandshakesPerSource = 32
	// DefaultMaxConnsPerSource bounds every connection of one source,
	// handshaking or served: 8 daemons × (4 streams + a Describe), with
	// room to spare.
	DefaultMaxConnsPerSource = 64
)

// ErrSourceLimit: a connection refused before TLS because its source
// address (or the endpoint's unauthenticated connections in all) is at a
// limit. It is logged by the server; the refused peer sees its connection
// closed during its handshake.
var ErrSourceLimit = fmt.Errorf("source limit: %w", ErrBusy)

// sourceKey names a connection's source: its IP address, IPv4-mapped IPv6
// addresses as IPv4, and an IPv6 address by its /64 (one host is commonly
// given a whole /64, so a per-address count would not bound it).
func sourceKey(a net.Addr) netip.Prefix {
	var ip netip.Addr
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ = netip.AddrFromSlice(ta.IP)
	} else if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		ip = ap.Addr()
	}
	ip = ip.Unmap()
	if !ip.IsValid() {
		return netip.Prefix{} // one bucket for whatever cannot be parsed
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p
	}
	return netip.PrefixFrom(ip, 32)
}

// sourceLimits counts each source's connections, and the unauthenticated
// ones in all, so that a connection over a limit is closed before the
// server spends a handshake on it. Its zero value is not usable: see
// newSourceLimits.
type sourceLimits struct {
	maxPending, maxPendingPerSource, maxPerSource int

	mu      sync.Mutex
	pending int
	sources map[netip.Prefix]*sourceCount
	// refused and logged are the refusals by the bound of all sources
	// together, as sourceCount's are for one source.
	refused uint64
	logged  bool
}

// sourceCount is one source's connections: open (handshaking or served),
// pending (handshaking), and whether a refusal was logged since it was
// last under its limits (a flood is logged once, not per connection).
type sourceCount struct {
	open, pending int
	refused       uint64
	logged        bool
}

func newSourceLimits(o ServerOptions) *sourceLimits {
	return &sourceLimits{maxPending: o.MaxHandshakes, maxPendingPerSource: o.MaxHandshakesPerSource,
		maxPerSource: o.MaxConnsPerSource, sources: map[netip.Prefix]*sourceCount{}}
}

// refusal describes a connection refused at accept.
type refusal struct {
	err error
	// log is true for the first refusal of a source since it was last
	// under its limits; refused counts its refusals since then.
	log     bool
	refused uint64
}

// accept counts a new connection of src as open and handshaking, or
// refuses it (a refusal wrapping ErrSourceLimit) when src has
// MaxConnsPerSource connections open or MaxHandshakesPerSource
// handshaking, or every source together MaxHandshakes handshaking.
func (l *sourceLimits) accept(src netip.Prefix) *refusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.sources[src]
	if c == nil {
		c = &sourceCount{}
		l.sources[src] = c
	}
	switch {
	case c.open >= l.maxPerSource:
		return c.refuse(fmt.Errorf("%w: %s has %d connections open, at most %d", ErrSourceLimit, src, c.open, l.maxPerSource))
	case c.pending >= l.maxPendingPerSource:
		return c.refuse(fmt.Errorf("%w: %s has %d TLS handshakes in progress, at most %d", ErrSourceLimit, src, c.pending, l.maxPendingPerSource))
	case l.pending >= l.maxPending:
		if c.open == 0 {
			delete(l.sources, src) // keep no entry for a source without connections
		}
		l.refused++
		r := &refusal{err: fmt.Errorf("%w: %d TLS handshakes in progress from all sources, at most %d", ErrSourceLimit, l.pending, l.maxPending),
			log: !l.logged, refused: l.refused}
		l.logged = true
		return r
	}
	c.open++
	c.pending++
	l.pending++
	return nil
}

// refuse counts a refusal of the source.
func (c *sourceCount) refuse(err error) *refusal {
	c.refused++
	r := &refusal{err: err, log: !c.logged, refused: c.refused}
	c.logged = true
	return r
}

// handshaken moves one of src's connections from handshaking to served.
func (l *sourceLimits) handshaken(src netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.sources[src]; c != nil && c.pending > 0 {
		c.pending--
		l.pending--
		c.quietIfUnder(l)
	}
}

// closed forgets one of src's connections (pending: its handshake had not
// completed).
func (l *sourceLimits) closed(src netip.Prefix, pending bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.sources[src]
	if c == nil {
		return
	}
	if pending && c.pending > 0 {
		c.pending--
		l.pending--
	}
	c.open--
	c.quietIfUnder(l)
	if c.open <= 0 {
		delete(l.sources, src)
	}
}

// quietIfUnder rearms the refusal log once the source is under its own
// limits again.
func (c *sourceCount) quietIfUnder(l *sourceLimits) {
	if c.open < l.maxPerSource && c.pending < l.maxPendingPerSource {
		c.logged, c.refused = false, 0
	}
	if l.pending < l.maxPending {
		l.logged, l.refused = false, 0
	}
}
