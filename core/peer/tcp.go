package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/wcache/wcache/internal/defaults"
	peerv1 "github.com/wcache/wcache/proto/wcache/peer/v1"
)

// Defaults of TCPTransport.
const (
	DefaultDialTimeout = 10 * time.Second
	// DefaultIOTimeout bounds each control message and each piece of a
	// range (ioPiece bytes): a peer that stops sending is an error after
	// this long, not a hang.
	DefaultIOTimeout = 30 * time.Second
	ioPiece          = 4 << 20
)

// TCPTransport is the Transport over TCP with mutual TLS (Credentials'
// ClientConfig). Each Describe uses a connection of its own; each Session
// holds one.
type TCPTransport struct {
	Creds *Credentials
	// DialTimeout (default DefaultDialTimeout) bounds connecting and the
	// TLS handshake; IOTimeout (default DefaultIOTimeout) each read and
	// write after it.
	DialTimeout, IOTimeout time.Duration
	// Dial, when set, opens the TCP connection instead of a net.Dialer
	// (TLS is added over it): a source address, a socket mark, or (in the
	// tests) another network namespace. nil: net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

var _ Transport = (*TCPTransport)(nil)

func (t *TCPTransport) ioTimeout() time.Duration {
	if t.IOTimeout > 0 {
		return t.IOTimeout
	}
	return DefaultIOTimeout
}

// dial connects to peer (host:port) and completes the TLS handshake.
func (t *TCPTransport) dial(ctx context.Context, peer string) (*tcpConn, error) {
	if t.Creds == nil {
		return nil, errors.New("peer transport: no credentials")
	}
	timeout := t.DialTimeout
	defaults.Positive(&timeout, DefaultDialTimeout)
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := t.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(dctx, "tcp", peer)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer, err)
	}
	c := tls.Client(raw, t.Creds.ClientConfig())
	if err := c.HandshakeContext(dctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("peer %s: %w", peer, err)
	}
	return &tcpConn{peer: peer, c: c, br: bufio.NewReaderSize(c, 64<<10), timeout: t.ioTimeout()}, nil
}

// Describe asks peer what it holds under identity.
func (t *TCPTransport) Describe(ctx context.Context, peer, identity string) (Offer, error) {
	c, err := t.dial(ctx, peer)
	if err != nil {
		return Offer{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.c.Close() })
	defer stop()
	resp, err := c.roundTrip(&peerv1.Request{Version: ProtocolVersion, Identity: identity, Op: &peerv1.Request_Describe{Describe: &peerv1.Describe{}}})
	if err != nil {
		return Offer{}, ctxErr(ctx, err)
	}
	if resp.GetOffer() == nil {
		return Offer{}, fmt.Errorf("peer %s answered a describe without an offer: protocol violation", peer)
	}
	return offerFromProto(resp.GetOffer()), nil
}

// Open starts a session over a connection of its own.
func (t *TCPTransport) Open(ctx context.Context, peer string, offer Offer) (Session, error) {
	c, err := t.dial(ctx, peer)
	if err != nil {
		return nil, err
	}
	return &tcpSession{tcpConn: c, offer: offer}, nil
}

// tcpConn is one connection to a peer.
type tcpConn struct {
	peer    string
	c       net.Conn
	br      *bufio.Reader
	timeout time.Duration
}

func (c *tcpConn) Close() error { return c.c.Close() }

// roundTrip sends req and reads the response; a peer's error comes back
// as a *RemoteError.
func (c *tcpConn) roundTrip(req *peerv1.Request) (*peerv1.Response, error) {
	_ = c.c.SetDeadline(time.Now().Add(c.timeout))
	if err := writeMsg(c.c, req); err != nil {
		return nil, fmt.Errorf("peer %s: %w", c.peer, err)
	}
	var resp peerv1.Response
	if err := readMsg(c.br, &resp); err != nil {
		return nil, fmt.Errorf("peer %s: %w", c.peer, err)
	}
	if resp.GetError() != nil {
		return nil, errorFromProto(c.peer, resp.GetError())
	}
	return &resp, nil
}

type tcpSession struct {
	*tcpConn
	offer Offer
}

// ReadRange asks for the range and reads exactly len(p) bytes, each
// ioPiece within the IO timeout; cancelling ctx closes the connection.
func (s *tcpSession) ReadRange(ctx context.Context, arena int, off uint64, p []byte) error {
	stop := context.AfterFunc(ctx, func() { s.c.Close() })
	defer stop()
	resp, err := s.roundTrip(&peerv1.Request{Version: ProtocolVersion, Identity: s.offer.Identity,
		Op: &peerv1.Request_Read{Read: &peerv1.Read{Generation: s.offer.Generation, Arena: uint32(arena), Offset: off, Length: uint64(len(p))}}})
	if err != nil {
		return ctxErr(ctx, err)
	}
	if resp.GetLength() != uint64(len(p)) {
		return fmt.Errorf("peer %s answered %d bytes for a read of %d: protocol violation", s.peer, resp.GetLength(), len(p))
	}
	for done := 0; done < len(p); {
		piece := p[done:min(len(p), done+ioPiece)]
		_ = s.c.SetReadDeadline(time.Now().Add(s.timeout))
		n, err := io.ReadFull(s.br, piece)
		done += n
		if err != nil {
			return ctxErr(ctx, fmt.Errorf("peer %s: arena %d: stream ended after %d of %d bytes at %d: %w", s.peer, arena, done, len(p), off, err))
		}
	}
	return nil
}

// ctxErr prefers ctx's error (the connection was closed because ctx
// ended) over the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if cerr := context.Cause(ctx); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}
