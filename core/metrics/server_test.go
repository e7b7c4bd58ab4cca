package metrics

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/paths/pathstest"
)

// shutdown stops s within 5 s.
func shutdown(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestServeOverUnixSocket: the socket is 0600, scrapes and health checks
// work over it, a second server on a live socket is refused, and shutdown
// removes the file.
func TestMetricsServeOverUnixSocket(t *testing.T) {
	dir := pathstest.ShortDir(t)
	path := filepath.Join(dir, "m.sock")
	a, err := ParseAddr("unix:"+path, false)
	if err != nil {
		t.Fatal(err)
	}
	exp := NewExporter()
	s, err := Start(a, exp.Handler())
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != "unix:"+path {
		t.Errorf("Addr() = %q", s.Addr())
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("metrics socket: %v %v, want a 0600 socket", fi.Mode(), err)
	}
	c := unixClient(path)
	if code, body := get(t, c, "http://wcache/healthz"); code != http.StatusServiceUnavailable || body != "starting\n" {
		t.Errorf("/healthz = %d %q, want 503 starting", code, body)
	}
	m, err := exp.Metrics(testUUID)
	if err != nil {
		t.Fatal(err)
	}
	m.StateChanged(daemon.StateServing)
	m.Loaded(daemon.LoadStats{Bytes: 12345, Duration: time.Second}, 7)
	if code, body := get(t, c, "http://wcache/healthz"); code != http.StatusOK || body != "serving\n" {
		t.Errorf("/healthz = %d %q, want 200 serving", code, body)
	}
	code, body := get(t, c, "http://wcache/metrics")
	want := []string{`wcache_loaded_bytes{device_uuid="` + testUUID + `"} 12345`,
		`wcache_tensors{device_uuid="` + testUUID + `"} 7`,
		`wcache_load_bytes_per_second{device_uuid="` + testUUID + `"} 12345`}
	if code != http.StatusOK || len(lines(body, "wcache_loaded_bytes{")) != 1 {
		t.Fatalf("/metrics = %d\n%s", code, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}

	if _, err := Start(a, exp.Handler()); !errors.Is(err, ErrInUse) {
		t.Errorf("a second server on a live socket = %v, want ErrInUse", err)
	}
	shutdown(t, s)
	assertAbsent(t, path)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".wcb") {
			t.Errorf("temporary bind directory %s left behind", e.Name())
		}
	}
}

// TestStaleUnixSocketIsReplaced: a socket file nobody listens on (a killed
// daemon's) is replaced; a regular file is not.
func TestMetricsStaleUnixSocketIsReplaced(t *testing.T) {
	dir := pathstest.ShortDir(t)
	path := filepath.Join(dir, "m.sock")
	l, err := daemon.ListenUnix(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close() // the file stays: stale
	a, _ := ParseAddr("unix:"+path, false)
	s, err := Start(a, NewExporter().Handler())
	if err != nil {
		t.Fatalf("replacing a stale socket: %v", err)
	}
	if code, _ := get(t, unixClient(path), "http://wcache/metrics"); code != http.StatusOK {
		t.Errorf("/metrics = %d", code)
	}
	shutdown(t, s)

	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _ = ParseAddr("unix:"+regular, false)
	if _, err := Start(a, NewExporter().Handler()); err == nil {
		t.Fatal("a regular file was replaced by the metrics socket")
	}
	if b, err := os.ReadFile(regular); err != nil || string(b) != "keep" {
		t.Errorf("regular file: %q %v", b, err)
	}
}

// TestShutdownLeavesAnotherSocket: a socket that replaced ours at the path
// is not removed by our shutdown.
func TestMetricsShutdownLeavesAnotherSocket(t *testing.T) {
	dir := pathstest.ShortDir(t)
	path := filepath.Join(dir, "m.sock")
	a, _ := ParseAddr("unix:"+path, false)
	s, err := Start(a, NewExporter().Handler())
	if err != nil {
		t.Fatal(err)
	}
	other, err := net.Listen("unix", filepath.Join(dir, "o.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := os.Rename(filepath.Join(dir, "o.sock"), path); err != nil {
		t.Fatal(err)
	}
	shutdown(t, s)
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("shutdown removed a socket it did not create: %v", err)
	}
}

// startLoopback serves a new Exporter on a free loopback TCP port until
// the test ends.
func startLoopback(t *testing.T) *Server {
	t.Helper()
	a, err := ParseAddr("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(a, NewExporter().Handler())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	return s
}

func TestMetricsServeOverLoopbackTCP(t *testing.T) {
	s := startLoopback(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":0") {
		t.Errorf("Addr() = %q, want the bound port", s.Addr())
	}
	code, body := get(t, &http.Client{Timeout: 5 * time.Second}, "http://"+s.Addr()+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics over TCP = %d\n%s", code, body)
	}
}

// TestMetricsConnectionsAreCapped: 200 idle connections to the loopback
// port (what any local user can open) cost the daemon's process at most
// maxConns descriptors, and the endpoint serves again once they go.
func TestMetricsConnectionsAreCapped(t *testing.T) {
	s := startLoopback(t)
	fds := func() int {
		e, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(e)
	}
	before := fds()
	var conns []net.Conn
	for range 200 {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(300 * time.Millisecond)
	// This process holds the 200 client ends itself; the server's side
	// may add maxConns (and a little slack) to them.
	if during := fds() - len(conns); during > before+maxConns+4 {
		t.Errorf("%d descriptors besides the clients' with 200 connections open, %d before: the server keeps them all", during, before)
	}
	for _, c := range conns {
		c.Close()
	}
	code, body := get(t, &http.Client{Timeout: 10 * time.Second}, "http://"+s.Addr()+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics after the flood = %d\n%s", code, body)
	}
}

func TestMetricsStartRefusesNonLoopbackUnlessAllowed(t *testing.T) {
	if _, err := ParseAddr("0.0.0.0:0", false); !errors.Is(err, ErrNotLoopback) {
		t.Fatalf("ParseAddr(0.0.0.0:0) = %v, want ErrNotLoopback", err)
	}
	// An Addr that bypassed ParseAddr's check (a zero allowRemote) is
	// checked again on the address actually bound.
	if _, err := Start(Addr{Network: "tcp", Address: "0.0.0.0:0"}, NewExporter().Handler()); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("Start on 0.0.0.0 without allowing remote = %v, want ErrNotLoopback", err)
	}
	a, err := ParseAddr("0.0.0.0:0", true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(a, NewExporter().Handler())
	if err != nil {
		t.Fatalf("Start on 0.0.0.0 with remote allowed: %v", err)
	}
	shutdown(t, s)
}

// assertAbsent fails the test when path exists.
func assertAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still exists (%v)", path, err)
	}
}
