package fdchannel

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	"github.com/wcache/wcache/sdk/fdpass"
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
func Fetch(ctx context.Context, path string, req Request) (_ []Descriptor, err error) {
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
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	c := nc.(*net.UnixConn)
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := fdpass.Send(c, req.Marshal()); err != nil {
		return nil, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	buf := make([]byte, ReplyHeader+MaxMessage)
	n, files, err := fdpass.Recv(c, buf, 0)
	if err != nil {
		return nil, fmt.Errorf("descriptor channel %s: reply: %w", path, err)
	}
	fdpassClose(files)
	rep, err := ParseReply(buf[:n])
	if err != nil {
		return nil, fmt.Errorf("descriptor channel %s: %w", path, err)
	}
	if rep.Status != StatusOK {
		return nil, &RefusedError{Path: path, Op: req.Op, Status: rep.Status, Message: rep.Message}
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
		n, files, err := fdpass.Recv(c, buf, 1)
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
