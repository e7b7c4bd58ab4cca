package daemon

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Connection limits of the daemon's socket. A peer the daemon denies costs
// it almost nothing: it is told why once (PERMISSION_DENIED naming its uid)
// on at most maxDeniedConnsPerUID connections at a time, each closed after
// deniedConnLifetime; more are closed at accept, before any gRPC work.
// Allowed peers hold at most maxConnsPerUID connections per uid (an engine
// needs one or two).
const (
	maxConnsPerUID       = 1024
	maxDeniedConnsPerUID = 2
	deniedConnLifetime   = 2 * time.Second
	// maxConcurrentStreams bounds the RPCs in flight on one connection.
	maxConcurrentStreams = 128
	// maxHeaderListSize bounds a request's metadata (HTTP/2 header list):
	// the daemon reads none beyond gRPC's own.
	maxHeaderListSize = 64 << 10
	// maxConnectionIdle closes a connection with no RPC for this long
	// (clients reconnect when they next call).
	maxConnectionIdle = 5 * time.Minute
)

// peerListener reads each accepted connection's SO_PEERCRED and applies
// the per-uid limits above before gRPC sees the connection.
type peerListener struct {
	net.Listener
	allows func(PeerInfo) bool
	log    hclog.Logger

	mu   sync.Mutex
	open map[uint32]int
}

func newPeerListener(l net.Listener, allows func(PeerInfo) bool, log hclog.Logger) *peerListener {
	return &peerListener{Listener: l, allows: allows, log: log, open: map[uint32]int{}}
}

// Accept returns the next connection within its peer's limits; the others
// are closed as they come.
func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		info, err := readPeerCred(c)
		if err != nil {
			l.log.Warn("closing a connection without peer credentials", "error", err)
			c.Close()
			continue
		}
		allowed := l.allows(info)
		limit := maxConnsPerUID
		if !allowed {
			limit = maxDeniedConnsPerUID
		}
		l.mu.Lock()
		if l.open[info.UID] >= limit {
			l.mu.Unlock()
			l.log.Debug("refusing a connection: too many open for its uid", "uid", info.UID, "pid", info.PID,
				"allowed", allowed, "limit", limit)
			c.Close()
			continue
		}
		l.open[info.UID]++
		l.mu.Unlock()
		pc := &peerConn{Conn: c, info: info, release: func() { l.release(info.UID) }}
		if !allowed {
			time.AfterFunc(deniedConnLifetime, func() { pc.Close() })
		}
		return pc, nil
	}
}

func (l *peerListener) release(uid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[uid]--; l.open[uid] <= 0 {
		delete(l.open, uid)
	}
}

// peerConn is an accepted connection with the credentials read at accept;
// closing it (once) gives its slot back.
type peerConn struct {
	net.Conn
	info    PeerInfo
	once    sync.Once
	release func()
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
