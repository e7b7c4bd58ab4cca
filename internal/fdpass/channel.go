package fdpass

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
)

// ErrChannelClosed: the channel was closed, or its peer went away, before
// the descriptor arrived.
var ErrChannelClosed = errors.New("descriptor channel closed")

// tokenMessageSize is the payload of one Channel message: the token, a
// little-endian uint64.
const tokenMessageSize = 8

// Channel carries tagged descriptors both ways over one SOCK_SEQPACKET
// connection: Send attaches one descriptor to a fresh token and returns the
// token (which the caller passes to the peer by other means, a gRPC field);
// the peer's Take returns the descriptor of a token once it has arrived.
// Every message is 8 bytes (the token, little-endian) with exactly one
// descriptor in SCM_RIGHTS. Tokens are never 0 and never reused by a
// sender. Descriptors nobody takes are closed by Close. It is safe for
// concurrent use.
type Channel struct {
	conn *net.UnixConn

	sendMu sync.Mutex
	next   uint64

	mu      sync.Mutex
	arrived map[uint64]*os.File
	waiters map[uint64]chan struct{}
	err     error // set once the reader stopped
	done    chan struct{}
}

// NewChannel starts reading conn. The channel owns conn.
func NewChannel(conn *net.UnixConn) *Channel {
	ch := &Channel{conn: conn, arrived: map[uint64]*os.File{}, waiters: map[uint64]chan struct{}{}, done: make(chan struct{})}
	go ch.read()
	return ch
}

// Send passes f to the peer and returns its token. f stays open.
func (ch *Channel) Send(f *os.File) (uint64, error) {
	ch.sendMu.Lock()
	defer ch.sendMu.Unlock()
	ch.next++
	token := ch.next
	var msg [tokenMessageSize]byte
	binary.LittleEndian.PutUint64(msg[:], token)
	if err := Send(ch.conn, msg[:], f); err != nil {
		return 0, fmt.Errorf("descriptor channel: %w", err)
	}
	return token, nil
}

// Take waits for the descriptor of token and returns it; the caller owns it.
// It fails when ctx ends or the channel closes first (ErrChannelClosed).
func (ch *Channel) Take(ctx context.Context, token uint64) (*os.File, error) {
	if token == 0 {
		return nil, errors.New("descriptor channel: token 0 names no descriptor")
	}
	for {
		ch.mu.Lock()
		if f, ok := ch.arrived[token]; ok {
			delete(ch.arrived, token)
			ch.mu.Unlock()
			return f, nil
		}
		if ch.err != nil {
			err := ch.err
			ch.mu.Unlock()
			return nil, fmt.Errorf("descriptor %d: %w", token, err)
		}
		w, ok := ch.waiters[token]
		if !ok {
			w = make(chan struct{})
			ch.waiters[token] = w
		}
		ch.mu.Unlock()
		select {
		case <-w:
		case <-ch.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("descriptor %d: %w", token, ctx.Err())
		}
	}
}

// read stores every arriving descriptor under its token until the
// connection fails.
func (ch *Channel) read() {
	buf := make([]byte, tokenMessageSize+1)
	for {
		n, files, err := Recv(ch.conn, buf, 1)
		if err == nil && (n != tokenMessageSize || len(files) != 1) {
			closeAll(files)
			err = fmt.Errorf("malformed message: %d bytes, %d descriptors (want %d and 1)", n, len(files), tokenMessageSize)
		}
		if err != nil {
			ch.mu.Lock()
			ch.err = fmt.Errorf("%w: %v", ErrChannelClosed, err)
			ch.mu.Unlock()
			close(ch.done)
			return
		}
		token := binary.LittleEndian.Uint64(buf[:tokenMessageSize])
		ch.mu.Lock()
		if old, ok := ch.arrived[token]; ok {
			_ = old.Close() // a sender that reuses a token: keep the newest
		}
		ch.arrived[token] = files[0]
		if w, ok := ch.waiters[token]; ok {
			close(w)
			delete(ch.waiters, token)
		}
		ch.mu.Unlock()
	}
}

// Close closes the connection and every descriptor not taken.
func (ch *Channel) Close() error {
	err := ch.conn.Close()
	<-ch.done
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for t, f := range ch.arrived {
		_ = f.Close()
		delete(ch.arrived, t)
	}
	return err
}
