package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/paths/pathstest"
	"github.com/wcache/wcache/internal/childproc"
)

// TestFloodHelper is not a test: run as a child (WCACHE_TEST_FLOOD set to
// "<socket> <n>"), it opens n HTTP/2 connections to the socket (the client
// preface and an empty SETTINGS frame each: established gRPC transports, as
// far as the server knows), prints how many it opened and holds them until
// its stdin closes.
func TestFloodHelper(t *testing.T) {
	spec := os.Getenv("WCACHE_TEST_FLOOD")
	if spec == "" {
		t.Skip("a helper process of TestDeniedPeerCannotHoldConnections")
	}
	var sock string
	var n int
	if _, err := fmt.Sscan(spec, &sock, &n); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range n {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(append([]byte(http2.ClientPreface), 0, 0, 0, 4, 0, 0, 0, 0, 0))
		conns = append(conns, c)
	}
	fmt.Printf("opened %d\n", len(conns))
	io.Copy(io.Discard, os.Stdin)
}

// selfAsNobody returns a command that runs this test binary's test named
// run as uid/gid 65534, from a copy of the binary that uid can execute;
// it skips the test (saying why) where that is impossible.
func selfAsNobody(t *testing.T, run string) *exec.Cmd {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || os.Geteuid() != 0 {
		t.Skipf("cannot run a client as another uid: setpriv %v, euid %d (needs root)", err, os.Geteuid())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := pathstest.ShortDir(t)
	bin := filepath.Join(dir, "daemon.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return exec.Command(setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
		bin, "-test.run", "^"+run+"$")
}

// TestDeniedPeerCannotHoldConnections: uid 65534, which reaches the socket
// through its group but is not allowed, opens 300 connections; the daemon
// keeps at most a couple of them (its descriptors stay flat) and its own
// user still attaches.
func TestDeniedPeerCannotHoldConnections(t *testing.T) {
	cmd := selfAsNobody(t, "TestFloodHelper")
	f := newFixture(t)
	if err := os.Chmod(f.dir, 0o711); err != nil { // let uid 65534 reach the socket
		t.Fatal(err)
	}
	gid := uint32(65534)
	r := f.start(0, func(o *Options) { o.SocketGID = &gid })
	sock := r.d.Info().Paths.Socket
	before := openFDs()

	const n = 300
	cmd.Env = append(os.Environ(), fmt.Sprintf("WCACHE_TEST_FLOOD=%s %d", sock, n))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, stdout := childproc.StartPiped(t, cmd)
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := stdout.ReadString('\n')
	if want := fmt.Sprintf("opened %d\n", n); line != want {
		t.Fatalf("flood as uid 65534: %q, %v (want %q); stderr: %s", line, err, want, stderr.String())
	}
	time.Sleep(300 * time.Millisecond) // let the daemon accept what the kernel queued
	if during := openFDs(); during > before+maxDeniedConnsPerUID+8 {
		t.Errorf("the daemon's process holds %d descriptors with the flood open, %d before: denied connections are kept", during, before)
	}
	a := r.mustAttach(t)
	if len(a.Manifest.Tensors) == 0 {
		t.Fatal("attach during the flood: empty manifest")
	}
}

// TestOversizedMetadataIsRefused: a request whose metadata is over the
// daemon's header limit is answered without running the handler, by a
// client that ignores the limit the daemon advertises.
func TestOversizedMetadataIsRefused(t *testing.T) {
	f := newFixture(t)
	r := f.start(0, nil)
	sendStatus := func(padding int) (grpcStatus string, reset bool) {
		t.Helper()
		c, err := net.Dial("unix", r.d.Info().Paths.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, c)
		fr.MaxHeaderListSize = 1 << 20
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "localhost"},
			{":path", daemonv1.Daemon_Status_FullMethodName}, {"content-type", "application/grpc"}, {"te", "trailers"},
			{"x-padding", strings.Repeat("p", padding)}} {
			enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
		}
		b := block.Bytes()
		const chunk = 16 << 10
		first := b[:min(chunk, len(b))]
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: len(b) <= chunk}); err != nil {
			t.Fatal(err)
		}
		for off := chunk; off < len(b); off += chunk {
			end := min(off+chunk, len(b))
			if err := fr.WriteContinuation(1, end == len(b), b[off:end]); err != nil {
				return "", true // the daemon closed the connection on us
			}
		}
		// An empty StatusRequest: a 5-byte gRPC frame header.
		if err := fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil {
			return "", true
		}
		dec := hpack.NewDecoder(4096, nil)
		for {
			frame, err := fr.ReadFrame()
			if err != nil {
				return "", true
			}
			switch fm := frame.(type) {
			case *http2.SettingsFrame:
				if !fm.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.RSTStreamFrame, *http2.GoAwayFrame:
				return "", true
			case *http2.HeadersFrame:
				fields, err := dec.DecodeFull(fm.HeaderBlockFragment())
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range fields {
					if h.Name == "grpc-status" {
						return h.Value, false
					}
				}
			}
		}
	}
	if st, reset := sendStatus(100); st != "0" {
		t.Fatalf("a Status with small metadata: grpc-status %q, reset %v; want 0", st, reset)
	}
	if st, reset := sendStatus(2 << 20); st == "0" {
		t.Fatalf("a Status with 2 MiB of metadata was served (reset %v)", reset)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.dial(t).Status(ctx); err != nil {
		t.Fatalf("status after the oversized request: %v", err)
	}
}
