package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/core/daemon/daemontest"
	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/internal/poll"
)

// testUUID is the mock device of these tests.
const testUUID = daemontest.DefaultUUID

// testDaemon is an in-process daemon of one mock device whose metrics go
// to exp.
type testDaemon struct {
	d     *daemontest.Daemon
	model *safetensorstest.Result
}

// startDaemon starts and runs a daemon that reports to exp; it is stopped
// when the test ends.
func startDaemon(t *testing.T, exp *Exporter) *testDaemon {
	t.Helper()
	d := daemontest.Start(t, daemontest.Options{Edit: func(o *daemon.Options) { o.Metrics = exp.Metrics }})
	return &testDaemon{d: d, model: d.Model}
}

// attach attaches with the daemon's config edited by edit.
func (td *testDaemon) attach(t *testing.T, edit func(*cacheconfig.Config)) (*client.Attachment, error) {
	t.Helper()
	return td.d.Attach(t, edit)
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
	poll.Eventually(t, 5*time.Second, what, cond)
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
