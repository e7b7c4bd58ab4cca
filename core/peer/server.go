package peer

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/defaults"
	peerv1 "github.com/wcache/wcache/proto/wcache/peer/v1"
)

// Defaults of ServerOptions.
const (
	DefaultMaxConns         = 64
	DefaultMaxConnsPerPeer  = 16
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 2 * time.Minute
	// DefaultWriteTimeout bounds one write of a chunk to a peer that does
	// not read.
	DefaultWriteTimeout = 30 * time.Second
	// serveChunk is the size of each read from the Source and write to
	// the connection.
	serveChunk = 4 << 20
)

// ServerOptions configure NewServer. The zero value of each field selects
// its default.
type ServerOptions struct {
	// MaxConns bounds the authenticated connections served at once
	// (default DefaultMaxConns); MaxConnsPerPeer those of one client
	// certificate (default DefaultMaxConnsPerPeer). A connection over
	// either limit is answered CODE_BUSY at its first request and closed.
	MaxConns, MaxConnsPerPeer int
	// Before TLS (limits.go), by source address (an IPv6 source by its
	// /64): MaxConnsPerSource bounds a source's connections in any state
	// (default DefaultMaxConnsPerSource), MaxHandshakesPerSource its
	// handshakes in progress (default DefaultMaxHandshakesPerSource), and
	// MaxHandshakes the handshakes in progress of all sources (default
	// DefaultMaxHandshakes). A connection over any of them is closed at
	// accept, before a byte is read, and logged once per source while it
	// stays at its limit: connections that send nothing cannot hold the
	// endpoint's slots, only their own source's.
	MaxConnsPerSource, MaxHandshakesPerSource, MaxHandshakes int
	// RateBytesPerSec bounds the bytes sent per second over every
	// connection together (0: no limit), so that a fill does not starve
	// the node's own engine of its network or PCIe.
	RateBytesPerSec uint64
	// HandshakeTimeout bounds the TLS handshake; IdleTimeout the wait for
	// a connection's next request; WriteTimeout one chunk's write.
	HandshakeTimeout, IdleTimeout, WriteTimeout time.Duration
	// Logger (nil: none) receives refused handshakes and served reads.
	Logger hclog.Logger
}

// Server serves a Source's generations to authenticated peers: only a
// client whose certificate verifies against the Credentials' CA completes
// the handshake (any other is refused before a request is read).
type Server struct {
	src   Source
	creds *Credentials
	opts  ServerOptions
	rate  *rateLimiter
	log   hclog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	sources *sourceLimits

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	perPeer  map[string]int
	admitted int // connections counted in perPeer
	wg       sync.WaitGroup
}

// NewServer returns a server of src with creds (checked now: a missing or
// bad file is an error here, not at the first connection).
func NewServer(src Source, creds *Credentials, opts ServerOptions) (*Server, error) {
	if src == nil || creds == nil {
		return nil, errors.New("peer server: a source and credentials are required")
	}
	if err := creds.Check(); err != nil {
		return nil, err
	}
	defaults.Positive(&opts.MaxConns, DefaultMaxConns)
	defaults.Positive(&opts.MaxConnsPerPeer, DefaultMaxConnsPerPeer)
	defaults.Positive(&opts.MaxConnsPerSource, DefaultMaxConnsPerSource)
	defaults.Positive(&opts.MaxHandshakesPerSource, DefaultMaxHandshakesPerSource)
	defaults.Positive(&opts.MaxHandshakes, DefaultMaxHandshakes)
	defaults.Positive(&opts.HandshakeTimeout, DefaultHandshakeTimeout)
	defaults.Positive(&opts.IdleTimeout, DefaultIdleTimeout)
	defaults.Positive(&opts.WriteTimeout, DefaultWriteTimeout)
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	s := &Server{src: src, creds: creds, opts: opts, log: opts.Logger,
		conns: map[net.Conn]struct{}{}, perPeer: map[string]int{}, sources: newSourceLimits(opts)}
	if opts.RateBytesPerSec > 0 {
		s.rate = newRateLimiter(opts.RateBytesPerSec, max(opts.RateBytesPerSec/10, serveChunk))
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Serve accepts connections on l (a TCP listener: the server adds TLS)
// until Close; it returns nil after Close and the accept error otherwise.
// A connection over a source limit (ServerOptions.MaxConnsPerSource,
// MaxHandshakesPerSource, MaxHandshakes) is closed here, before TLS.
func (s *Server) Serve(l net.Listener) error {
	cfg := s.creds.ServerConfig()
	stop := context.AfterFunc(s.ctx, func() { l.Close() })
	defer stop()
	for {
		raw, err := l.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("peer server: accept: %w", err)
		}
		src := sourceKey(raw.RemoteAddr())
		if r := s.sources.accept(src); r != nil {
			raw.Close()
			if r.log {
				s.log.Warn("peer refused before TLS: source limit (further refusals of this source are logged at debug while it stays at its limit)",
					"remote", raw.RemoteAddr().String(), "error", r.err)
			} else {
				s.log.Debug("peer refused before TLS: source limit", "remote", raw.RemoteAddr().String(), "refused", r.refused, "error", r.err)
			}
			continue
		}
		c := tls.Server(raw, cfg)
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			c.Close()
			s.sources.closed(src, true)
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(c, src)
		}()
	}
}

// Close stops accepting, closes every connection and waits for their
// handlers (so every Generation is released when it returns).
func (s *Server) Close() error {
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// peerKey names a client by its leaf certificate (SHA-256 of its DER).
func peerKey(cs tls.ConnectionState) string {
	sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
	return hex.EncodeToString(sum[:8])
}

// admit counts a connection against the limits; the returned func undoes
// it. Over a limit it returns an error wrapping ErrBusy that names the
// limit.
func (s *Server) admit(key string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.admitted; n >= s.opts.MaxConns {
		return nil, fmt.Errorf("%d connections open, at most %d: %w", n, s.opts.MaxConns, ErrBusy)
	}
	if n := s.perPeer[key]; n >= s.opts.MaxConnsPerPeer {
		return nil, fmt.Errorf("this client has %d connections open, at most %d: %w", n, s.opts.MaxConnsPerPeer, ErrBusy)
	}
	s.perPeer[key]++
	s.admitted++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.admitted--
		if s.perPeer[key]--; s.perPeer[key] == 0 {
			delete(s.perPeer, key)
		}
	}, nil
}

// handle serves one connection of source src: the TLS handshake within
// HandshakeTimeout, then requests until the peer closes, goes idle past
// IdleTimeout, or the server closes.
func (s *Server) handle(c *tls.Conn, src netip.Prefix) {
	pending := true
	defer func() {
		c.Close()
		s.sources.closed(src, pending)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	hctx, cancel := context.WithTimeout(s.ctx, s.opts.HandshakeTimeout)
	err := c.HandshakeContext(hctx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// Silent connections end here, many at a time in a flood:
			// debug (the source-limit refusal says the flood once).
			s.log.Debug("peer refused: TLS handshake failed", "remote", c.RemoteAddr().String(), "error", err)
		} else {
			s.log.Warn("peer refused: TLS handshake failed", "remote", c.RemoteAddr().String(), "error", err)
		}
		return
	}
	pending = false
	s.sources.handshaken(src)
	key := peerKey(c.ConnectionState())
	br := bufio.NewReader(c)
	release, err := s.admit(key)
	if err != nil {
		s.log.Warn("peer refused: connection limit", "remote", c.RemoteAddr().String(), "peer", key, "error", err)
		_ = c.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
		var req peerv1.Request
		if readMsg(br, &req) == nil {
			_ = writeMsg(c, &peerv1.Response{Error: errorToProto(err)})
		}
		return
	}
	defer release()
	buf := make([]byte, serveChunk)
	for {
		_ = c.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout))
		var req peerv1.Request
		if err := readMsg(br, &req); err != nil {
			return // the client closed, went idle or sent garbage
		}
		_ = c.SetReadDeadline(time.Time{})
		if err := s.serve(c, &req, buf); err != nil {
			s.log.Debug("peer connection ended", "remote", c.RemoteAddr().String(), "error", err)
			return
		}
	}
}

// serve answers one request. A returned error ends the connection (the
// bytes of a read may have been cut short); errors the peer should know
// are answered and return nil.
func (s *Server) serve(c *tls.Conn, req *peerv1.Request, buf []byte) error {
	answer := func(err error) error {
		_ = c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		return writeMsg(c, &peerv1.Response{Error: errorToProto(err)})
	}
	if req.GetVersion() != ProtocolVersion {
		return answer(fmt.Errorf("protocol version %d, this server speaks %d: %w", req.GetVersion(), ProtocolVersion, ErrInvalid))
	}
	gen, err := s.src.Open(s.ctx, req.GetIdentity())
	if err != nil {
		return answer(err)
	}
	defer gen.Release()
	switch op := req.GetOp().(type) {
	case *peerv1.Request_Describe:
		offer := Offer{Identity: req.GetIdentity(), Generation: gen.ID(), Arenas: gen.Arenas()}
		_ = c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		return writeMsg(c, &peerv1.Response{Offer: offerToProto(offer)})
	case *peerv1.Request_Read:
		return s.serveRead(c, gen, op.Read, buf, answer)
	default:
		return answer(fmt.Errorf("request without an operation: %w", ErrInvalid))
	}
}

func (s *Server) serveRead(c *tls.Conn, gen Generation, r *peerv1.Read, buf []byte, answer func(error) error) error {
	if r.GetGeneration() != gen.ID() {
		return answer(fmt.Errorf("generation %q is not served (now %q): %w", r.GetGeneration(), gen.ID(), ErrGenerationChanged))
	}
	arenas := gen.Arenas()
	i, off, n := int(r.GetArena()), r.GetOffset(), r.GetLength()
	if i < 0 || i >= len(arenas) || off > arenas[i].Size || n > arenas[i].Size-off {
		return answer(fmt.Errorf("read arena %d [%d, +%d) outside the generation: %w", i, off, n, ErrInvalid))
	}
	_ = c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	if err := writeMsg(c, &peerv1.Response{Length: n}); err != nil {
		return err
	}
	for n > 0 {
		p := buf[:min(uint64(len(buf)), n)]
		if err := gen.ReadAt(s.ctx, i, p, off); err != nil {
			return fmt.Errorf("read arena %d at %d: %w", i, off, err) // the client sees a short stream
		}
		if err := s.rate.wait(s.ctx, len(p)); err != nil {
			return err
		}
		_ = c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		if _, err := c.Write(p); err != nil {
			return err
		}
		off += uint64(len(p))
		n -= uint64(len(p))
	}
	return nil
}
