package fdchannel

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	"github.com/wcache/wcache/internal/fdpass"
)

// DefaultTimeout bounds a Fetch whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// MaxDescriptors bounds how many descriptors one answer may announce (a
// manifest has about bytes/16 GiB handles).
const MaxDescriptors = 4096

// ErrRefused is matched by every *RefusedError.
var ErrRefused = errors.New("descriptor channel refused the request")

// RefusedError: the daemon answered the request with a status other than
// OK. It matches ErrRefused.
type RefusedError struct {
	Path    string
	Op      Op
	Status  Status
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("descriptor channel %s refused the %s request: %s: %s", e.Path, e.Op, e.Status, e.Message)
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// Descriptor is one received descriptor: the handle it belongs to (its
// index in the manifest or plan), the handle's size and the file, which the
// caller owns.
type Descriptor struct {
	Handle uint32
	Size   uint64
	File   *os.File
}

// CloseAll closes every descriptor's file.
func CloseAll(ds []Descriptor) {
	for _, d := range ds {
		if d.File != nil {
			_ = d.File.Close()
		}
	}
}

// Fetch asks the descriptor channel at path (Path of the daemon's socket)
// for the descriptors of req and returns them in the daemon's order. The
// path must be a socket, not a symlink; a refusal is a *RefusedError; a
// connection or format failure is an error naming the path.
func Fetch(ctx context.Context, path string, req Request) ([]Descriptor, error) {
	ds, c, err := exchange(ctx, path, req)
	if c != nil {
		c.close()
	}
	return ds, err
}

// Waiting is an OpAttachWait request sent before its Attach (Await): the
// daemon answers it once that Attach has made its lease.
type Waiting struct{ c *conn }

// Await connects to the descriptor channel at path and sends OpAttachWait
// with token, which the caller then sends as its AttachRequest's
// fd_wait_token. ctx bounds the connection until Receive or Close
// (DefaultTimeout when it has no deadline; the daemon answers within its
// request timeout, 5 s, or refuses). Errors as Fetch's.
func Await(ctx context.Context, path string, token [TokenSize]byte) (*Waiting, error) {
	c, err := dial(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := c.send(Request{Op: OpAttachWait, Token: token}); err != nil {
		c.close()
		return nil, err
	}
	return &Waiting{c: c}, nil
}

// Receive receives the daemon's answer, as Fetch returns it: the lease's
// descriptors, or a *RefusedError (StatusNoLease: the Attach failed, or
// never came; StatusBadRequest: a daemon older than OpAttachWait). within
// (> 0) bounds the wait from now, inside Await's bound: a daemon answers as
// soon as the Attach made its lease, before it sends the manifest, so a
// caller holding the manifest need not wait long for an answer that should
// be there already (a request that reached another daemon than the Attach,
// during a takeover, is answered only after the daemon's own timeout). It
// closes the connection.
func (w *Waiting) Receive(within time.Duration) ([]Descriptor, error) {
	defer w.c.close()
	if within > 0 {
		dl := time.Now().Add(within)
		if cur, ok := w.c.deadline(); !ok || dl.Before(cur) {
			_ = w.c.SetDeadline(dl)
		}
	}
	return w.c.receive(OpAttachWait)
}

// Close closes the connection without an answer: an Attach that failed, or
// whose manifest has no descriptor handles.
func (w *Waiting) Close() { w.c.close() }

// Takeover is a successor's op TAKEOVER in progress: the daemon's
// writable descriptors, and the connection on which the successor
// acknowledges their import (Imported) — the daemon hands over only then.
type Takeover struct {
	Descriptors []Descriptor
	// PeerListener is the daemon's peer endpoint socket (a listening TCP
	// socket), passed with "released" when it has one: the successor
	// serves peers on it, so the port never closes during a takeover. The
	// caller owns it (Close does not close it).
	PeerListener *os.File
	c            *conn
}

// RequestTakeover sends op TAKEOVER (req.Op is set) and receives the
// descriptors as Fetch does, keeping the connection open for Imported. The
// caller closes the Takeover; closing it without Imported leaves the daemon
// serving.
func RequestTakeover(ctx context.Context, path string, req Request) (*Takeover, error) {
	req.Op = OpTakeover
	ds, c, err := exchange(ctx, path, req)
	if err != nil {
		if c != nil {
			c.close()
		}
		return nil, err
	}
	return &Takeover{Descriptors: ds, c: c}, nil
}

// Imported tells the daemon that every descriptor was imported and waits
// for its "released": it stopped accepting, removed its socket, channel
// and ready file and released its identity lock, which the successor may
// take now. It keeps its memory and leases until Serving; the connection's
// deadline (the ctx of RequestTakeover) bounds the wait.
func (t *Takeover) Imported() error {
	if err := fdpass.Send(t.c.UnixConn, MarshalAck(AckImported)); err != nil {
		return fmt.Errorf("descriptor channel %s: acknowledge the takeover: %w", t.c.path, err)
	}
	buf := make([]byte, AckSize+1)
	n, files, err := fdpass.Recv(t.c.UnixConn, buf, 1)
	if err == nil {
		err = ParseAck(buf[:n], AckReleased)
	}
	if err != nil || len(files) > 1 {
		for _, f := range files {
			_ = f.Close()
		}
		if err == nil {
			err = fmt.Errorf("%w: %d descriptors with %s, want at most 1", ErrMalformed, len(files), AckReleased)
		}
		return fmt.Errorf("descriptor channel %s: wait for the daemon to release its lock: %w", t.c.path, err)
	}
	if len(files) == 1 {
		t.PeerListener = files[0]
	}
	return nil
}

// Serving tells the daemon that the successor holds the identity lock,
// listens and wrote its ready file: the daemon then ends its leases with
// HandoverMessage and exits. Without it (the successor closes or dies
// first) the daemon takes its lock back and serves on.
func (t *Takeover) Serving() error {
	_ = t.c.SetDeadline(time.Now().Add(DefaultTimeout))
	if err := fdpass.Send(t.c.UnixConn, MarshalAck(AckServing)); err != nil {
		return fmt.Errorf("descriptor channel %s: tell the daemon this one serves: %w", t.c.path, err)
	}
	return nil
}

// Close closes the connection (not the descriptors, which are the caller's).
func (t *Takeover) Close() { t.c.close() }

// conn is a connection to the channel with what bounds it.
type conn struct {
	*net.UnixConn
	path   string
	cancel func()
	// until is the deadline dial set (zero: none).
	until time.Time
}

// deadline is the deadline dial set, if any.
func (c *conn) deadline() (time.Time, bool) { return c.until, !c.until.IsZero() }

func (c *conn) close() {
	c.cancel()
	_ = c.UnixConn.Close()
}

// exchange sends req and receives the answer; the connection comes back
// (nil when none was made) for the caller to close.
func exchange(ctx context.Context, path string, req Request) ([]Descriptor, *conn, error) {
	c, err := dial(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	if err := c.send(req); err != nil {
		return nil, c, err
	}
	ds, err := c.receive(req.Op)
	return ds, c, err
}

// dial connects to the channel at path, which must be a socket and not a
// symlink, bounded by ctx (DefaultTimeout when it has no deadline) until
// the conn is closed.
func dial(ctx context.Context, path string) (*conn, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("descriptor channel %s: absent (a daemon older than descriptor handles?): %w", path, err)
		}
		return nil, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("descriptor channel %s is not a socket (%s): refusing it", path, fi.Mode().Type())
	}
	cancel := func() {}
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	uc := nc.(*net.UnixConn)
	var until time.Time
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
		until = dl
	}
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	return &conn{UnixConn: uc, path: path, cancel: func() { stop(); cancel() }, until: until}, nil
}

// send sends req.
func (c *conn) send(req Request) error {
	if err := fdpass.Send(c.UnixConn, req.Marshal()); err != nil {
		return fmt.Errorf("descriptor channel %s: %w", c.path, err)
	}
	return nil
}

// receive receives the answer to a request of op: the reply, then its
// descriptors.
func (c *conn) receive(op Op) (_ []Descriptor, err error) {
	path, uc := c.path, c.UnixConn
	buf := make([]byte, ReplyHeader+MaxMessage)
	n, files, err := fdpass.Recv(uc, buf, 0)
	if err != nil {
		return nil, fmt.Errorf("descriptor channel %s: reply: %w", path, err)
	}
	fdpassClose(files)
	rep, err := ParseReply(buf[:n])
	if err != nil {
		return nil, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	if rep.Status != StatusOK {
		return nil, &RefusedError{Path: path, Op: op, Status: rep.Status, Message: rep.Message}
	}
	if rep.Count > MaxDescriptors {
		return nil, fmt.Errorf("descriptor channel %s: %w: %d descriptors announced", path, ErrMalformed, rep.Count)
	}
	out := make([]Descriptor, 0, rep.Count)
	defer func() {
		if err != nil {
			CloseAll(out)
		}
	}()
	for range rep.Count {
		n, files, err := fdpass.Recv(uc, buf, 1)
		if err != nil {
			return nil, fmt.Errorf("descriptor channel %s: descriptor %d of %d: %w", path, len(out)+1, rep.Count, err)
		}
		h, perr := ParseDescriptor(buf[:n])
		if perr == nil && len(files) != 1 {
			perr = fmt.Errorf("%w: descriptor message with %d descriptors", ErrMalformed, len(files))
		}
		if perr != nil {
			fdpassClose(files)
			return nil, fmt.Errorf("descriptor channel %s: %w", path, perr)
		}
		out = append(out, Descriptor{Handle: h.Handle, Size: h.Size, File: files[0]})
	}
	return out, nil
}

func fdpassClose(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
