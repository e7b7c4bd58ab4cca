// Package fdpass sends and receives file descriptors over Unix sockets with
// SCM_RIGHTS, and multiplexes tagged descriptors over one socketpair
// (Channel). The daemon's descriptor channel, the client side of it and the
// plugin descriptor channel (docs/protocol.md) are built on it. It needs a
// SOCK_SEQPACKET socket (net "unixpacket") so that every message keeps its
// boundaries and its descriptors.
package fdpass

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// MaxFiles is the most descriptors one message may carry (the kernel's
// SCM_MAX_FD is 253).
const MaxFiles = 253

// ErrTruncated: a message arrived cut (its payload or its descriptors did
// not fit the buffers); the descriptors that did arrive were closed.
var ErrTruncated = errors.New("message or its descriptors truncated")

// Send writes payload with files attached as one message. The files stay
// open (the kernel gives the receiver its own descriptors).
func Send(c *net.UnixConn, payload []byte, files ...*os.File) error {
	if len(files) > MaxFiles {
		return fmt.Errorf("send %d descriptors: at most %d per message", len(files), MaxFiles)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(payload, oob, nil)
	if err != nil {
		return fmt.Errorf("send message: %w", err)
	}
	if n != len(payload) || oobn != len(oob) {
		return fmt.Errorf("send message: wrote %d of %d bytes, %d of %d control bytes", n, len(payload), oobn, len(oob))
	}
	return nil
}

// Recv reads one message into buf and returns its length and the
// descriptors it carried (at most maxFiles; more is ErrTruncated). The
// descriptors are close-on-exec; the caller owns them. A peer that closed
// the connection is an error wrapping net.ErrClosed.
func Recv(c *net.UnixConn, buf []byte, maxFiles int) (int, []*os.File, error) {
	oob := make([]byte, unix.CmsgSpace(4*max(maxFiles, 1)))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if errors.Is(err, io.EOF) {
		// Linux answers a non-blocking SOCK_SEQPACKET read that found the
		// queue empty with 0 bytes (Go: io.EOF) when the peer has shut
		// down by the time it checks — even if the peer's last message
		// was queued in between (net/unix/af_unix.c, "Signal EOF on
		// disconnected non-blocking SEQPACKET socket"). A peer that sends
		// and closes at once then loses its last message about once in
		// 10^4 reads on a loaded machine. Shutdown is final, so one more
		// read settles it: the queued message, or EOF for good.
		n, oobn, flags, _, err = c.ReadMsgUnix(buf, oob)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("receive message: %w", err)
	}
	files, perr := parseRights(oob[:oobn])
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(files) > maxFiles {
		closeAll(files)
		return 0, nil, fmt.Errorf("receive message of %d bytes: %w", n, ErrTruncated)
	}
	if perr != nil {
		closeAll(files)
		return 0, nil, perr
	}
	if n == 0 && len(files) == 0 {
		return 0, nil, fmt.Errorf("receive message: peer closed the connection: %w", net.ErrClosed)
	}
	return n, files, nil
}

// parseRights turns the SCM_RIGHTS messages of oob into files.
func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	var errs []error
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			errs = append(errs, fmt.Errorf("parse SCM_RIGHTS: %w", err))
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "received"))
		}
	}
	return files, errors.Join(errs...)
}

// closeAll closes every file.
func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// Socketpair returns a connected SOCK_SEQPACKET pair, both ends
// close-on-exec: the first as a connection, the second as a file to hand to
// a child process (exec.Cmd.ExtraFiles clears close-on-exec in the child).
func Socketpair() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	local := os.NewFile(uintptr(fds[0]), "fdpass-local")
	defer local.Close()
	c, err := FileConn(local)
	if err != nil {
		_ = unix.Close(fds[1])
		return nil, nil, err
	}
	return c, os.NewFile(uintptr(fds[1]), "fdpass-remote"), nil
}

// FileConn makes a connection of a socket file (which stays the caller's
// to close: the connection holds its own descriptor).
func FileConn(f *os.File) (*net.UnixConn, error) {
	nc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("descriptor %d as a connection: %w", f.Fd(), err)
	}
	c, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, fmt.Errorf("descriptor %d is a %T, not a Unix socket", f.Fd(), nc)
	}
	return c, nil
}
