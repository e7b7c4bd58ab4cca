package client

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wcache/wcache/core/fdchannel"
	"github.com/wcache/wcache/internal/fdpass"
	"github.com/wcache/wcache/sdk/names"
)

// oldChannel serves a descriptor channel beside sock as a daemon older
// than op ATTACH_WAIT does: that op is refused as malformed, op LEASE is
// answered with f as handle 0. It reports the op of every request.
func oldChannel(t *testing.T, sock string, f *os.File, size uint64) <-chan fdchannel.Op {
	t.Helper()
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: fdchannel.Path(sock), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ops := make(chan fdchannel.Op, 8)
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			buf := make([]byte, fdchannel.RequestSize+1)
			n, _, err := fdpass.Recv(c, buf, 0)
			req, perr := fdchannel.ParseRequest(buf[:n])
			if err != nil || perr != nil {
				_ = c.Close()
				continue
			}
			ops <- req.Op
			if req.Op != fdchannel.OpLease {
				_ = fdpass.Send(c, fdchannel.Reply{Status: fdchannel.StatusBadRequest, Message: "unknown op"}.Marshal())
			} else if fdpass.Send(c, fdchannel.Reply{Status: fdchannel.StatusOK, Count: 1}.Marshal()) == nil {
				_ = fdpass.Send(c, fdchannel.DescriptorHeader{Handle: 0, Size: size}.Marshal(), f)
			}
			var b [1]byte
			_, _ = c.Read(b[:]) // until the client closes
			_ = c.Close()
		}
	}()
	return ops
}

// TestDescriptorsFromADaemonWithoutAttachWait: a daemon older than op
// ATTACH_WAIT refuses the early request; the client fetches with op LEASE
// after the manifest instead, gets the descriptor, and sends no early
// request to that daemon again.
func TestDescriptorsFromADaemonWithoutAttachWait(t *testing.T) {
	const size = 4096
	fd, err := unix.MemfdCreate("wcache-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	ops := oldChannel(t, sock, f, size)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c := &Client{socket: sock}
	early, token := c.awaitDescriptors(ctx, true)
	if early == nil || len(token) != fdchannel.TokenSize {
		t.Fatalf("no early request (%v, %d-byte token) for a client that maps any kind", early, len(token))
	}
	hs := []Handle{{Kind: names.KindMemfd, Size: size}}
	files, err := c.fetchDescriptors(ctx, fdchannel.OpLease, 7, make([]byte, fdchannel.TokenSize), hs, early)
	if err != nil {
		t.Fatalf("fetch after the refused early request: %v", err)
	}
	closeHandleFiles(files)
	if len(files) != 1 || hs[0].File == nil {
		t.Fatalf("got %d files, handle file %v; want the one descriptor", len(files), hs[0].File)
	}
	if got := []fdchannel.Op{<-ops, <-ops}; got[0] != fdchannel.OpAttachWait || got[1] != fdchannel.OpLease {
		t.Errorf("requests %v, want attach-wait then lease", got)
	}
	if again, _ := c.awaitDescriptors(ctx, true); again != nil {
		again.Close()
		t.Error("the client asked a daemon that refused ATTACH_WAIT again")
	}
}
