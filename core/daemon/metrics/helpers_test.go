package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/paths"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/plugins/mock/mockbackend"
	"github.com/wcache/wcache/sdk"
)

// testUUID is the mock device of these tests.
const testUUID = "GPU-0badc0de-0000-4000-8000-000000000001"

// plugin is an in-process mock backend as a daemon.Plugin.
type plugin struct {
	b      *mockbackend.Backend
	once   sync.Once
	exited chan struct{}
}

func (p *plugin) Backend() sdk.Backend    { return p.b }
func (p *plugin) Exited() <-chan struct{} { return p.exited }
func (p *plugin) ExitError() error        { return errors.New("closed") }
func (p *plugin) Close() error {
	err := p.b.Close()
	p.once.Do(func() { close(p.exited) })
	return err
}

// shortDir is a private temporary directory with a short name (Unix socket
// paths are limited to 107 bytes).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testDaemon is an in-process daemon of one mock device whose metrics go
// to exp.
type testDaemon struct {
	d     *daemon.Daemon
	model *safetensorstest.Result
	done  chan error
}

// startDaemon starts and runs a daemon that reports to exp; it is stopped
// when the test ends.
func startDaemon(t *testing.T, exp *Exporter) *testDaemon {
	t.Helper()
	dir := shortDir(t)
	layout, err := paths.NewLayout(paths.Options{
		SocketTemplate: filepath.Join(dir, "{device_uuid}.sock"),
		ReadyTemplate:  filepath.Join(dir, "{device_uuid}.ready"),
		Getenv:         func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	model, err := safetensorstest.GenerateCheckpoint(filepath.Join(dir, "model"), safetensorstest.GenOptions{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := mockbackend.New(mockbackend.Config{DeviceUUIDs: []string{testUUID}, Memory: 1 << 30,
		Dir: filepath.Join(dir, "shm"), Faults: mockbackend.NoFaults()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(context.Background(), &plugin{b: b, exited: make(chan struct{})}, daemon.Options{
		Model: model.Dir, Config: cacheconfig.Default(), Layout: layout, DrainTimeout: 2 * time.Second,
		Metrics: exp.Metrics})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	td := &testDaemon{d: d, model: model, done: make(chan error, 1)}
	go func() { td.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-td.done:
		case <-time.After(10 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	return td
}

// attach attaches with the daemon's config edited by edit.
func (td *testDaemon) attach(t *testing.T, edit func(*cacheconfig.Config)) (*client.Attachment, error) {
	t.Helper()
	cfg := td.d.Info().Config
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return client.Attach(ctx, client.BySocket(td.d.Info().Paths.Socket), cfg, client.Options{ClientName: t.Name()})
}

// unixClient is an HTTP client whose transport dials the Unix socket at
// path whatever the URL's host.
func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
}

// get fetches url with c and returns the status code and the body.
func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lines keeps the lines of a text exposition that start with prefix.
func lines(exposition, prefix string) []string {
	var out []string
	for _, l := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
