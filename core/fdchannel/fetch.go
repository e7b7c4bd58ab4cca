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
}

func (c *conn) close() {
	c.cancel()
	_ = c.UnixConn.Close()
}

// exchange sends req and receives the answer; the connection comes back
// (nil when none was made) for the caller to close.
func exchange(ctx context.Context, path string, req Request) (_ []Descriptor, _ *conn, err error) {
	fi, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("descriptor channel %s: absent (a daemon older than descriptor handles?): %w", path, err)
		}
		return nil, nil, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return nil, nil, fmt.Errorf("descriptor channel %s is not a socket (%s): refusing it", path, fi.Mode().Type())
	}
	cancel := func() {}
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	uc := nc.(*net.UnixConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	c := &conn{UnixConn: uc, path: path, cancel: func() { stop(); cancel() }}
	if err := fdpass.Send(uc, req.Marshal()); err != nil {
		return nil, c, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	buf := make([]byte, ReplyHeader+MaxMessage)
	n, files, err := fdpass.Recv(uc, buf, 0)
	if err != nil {
		return nil, c, fmt.Errorf("descriptor channel %s: reply: %w", path, err)
	}
	fdpassClose(files)
	rep, err := ParseReply(buf[:n])
	if err != nil {
		return nil, c, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	if rep.Status != StatusOK {
		return nil, c, &RefusedError{Path: path, Op: req.Op, Status: rep.Status, Message: rep.Message}
	}
	if rep.Count > MaxDescriptors {
		return nil, c, fmt.Errorf("descriptor channel %s: %w: %d descriptors announced", path, ErrMalformed, rep.Count)
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
			return nil, c, fmt.Errorf("descriptor channel %s: descriptor %d of %d: %w", path, len(out)+1, rep.Count, err)
		}
		h, perr := ParseDescriptor(buf[:n])
		if perr == nil && len(files) != 1 {
			perr = fmt.Errorf("%w: descriptor message with %d descriptors", ErrMalformed, len(files))
		}
		if perr != nil {
			fdpassClose(files)
			return nil, c, fmt.Errorf("descriptor channel %s: %w", path, perr)
		}
		out = append(out, Descriptor{Handle: h.Handle, Size: h.Size, File: files[0]})
	}
	return out, c, nil
}

func fdpassClose(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
