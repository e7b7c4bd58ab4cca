package e2e

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wcache/wcache/core/safetensors/safetensorstest"
	"github.com/wcache/wcache/internal/poll"
)

// metricsClient is an HTTP client whose transport dials the Unix socket at
// path, whatever the URL's host.
func metricsClient(path string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
}

// httpGet fetches url with c: status code and body, or the error.
func httpGet(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitHealthy polls GET /healthz through c until it answers 200 "serving".
// serve listens on the metrics address right after it wrote its ready file.
func (h *harness) waitHealthy(p *process, c *http.Client) {
	h.t.Helper()
	var (
		code int
		body string
		err  error
	)
	healthy := func() bool { return err == nil && code == http.StatusOK && body == "serving\n" }
	poll.Until(context.Background(), readyTimeout, func() bool {
		code, body, err = httpGet(c, "http://wcache/healthz")
		return healthy() || p.Exited()
	})
	if !healthy() {
		h.t.Fatalf("/healthz never answered 200 serving (last: %d %q %v):\n%s", code, body, err, p)
	}
}

// sample is the value of the series name{labels} in a text exposition;
// labels is the exact label set as exposed, e.g. `device_uuid="GPU-…"`.
func sample(t *testing.T, exposition, name, labels string) float64 {
	t.Helper()
	series := name + "{" + labels + "} "
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: value %q: %v", series, v, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in the exposition:\n%s", series, exposition)
	return 0
}

// TestMetricsOverUnixSocket: `wcache serve --metrics-listen unix:…` serves
// /healthz and /metrics on a 0600 socket; an attach by `wcache attach` and
// the loaded bytes show in the scrape, labelled with the device; a stop
// removes the socket.
func TestMetricsOverUnixSocket(t *testing.T) {
	h := newHarness(t, harnessOptions{Devices: 1})
	model := genModel(t, filepath.Join(h.Root, "m"), safetensorstest.GenOptions{Shards: 2})
	uuid := h.UUIDs[0]
	sock := filepath.Join(h.Root, "metrics.sock")
	d := h.startServe(0, model.Dir, "--metrics-listen", "unix:"+sock)
	c := metricsClient(sock)
	h.waitHealthy(d, c)
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("metrics socket %s: %v %v, want a 0600 socket", sock, fi.Mode(), err)
	}

	h.mustRun("attach", "--backend", "mock", "--gpu-id", "0", "--model", model.Dir)

	code, body, err := httpGet(c, "http://wcache/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v\n%s", code, err, body)
	}
	dev := fmt.Sprintf("device_uuid=%q", uuid)
	if n := sample(t, body, "wcache_attaches_total", dev); n < 1 {
		t.Errorf("wcache_attaches_total = %v after an attach, want >= 1", n)
	}
	if n := sample(t, body, "wcache_loaded_bytes", dev); n != float64(model.TotalBytes) {
		t.Errorf("wcache_loaded_bytes = %v, want the checkpoint's %d bytes", n, model.TotalBytes)
	}
	if st := h.clientStatus(0); st.DeviceBytes < model.TotalBytes ||
		sample(t, body, "wcache_device_bytes", dev) != float64(st.DeviceBytes) {
		t.Errorf("wcache_device_bytes = %v, want Status device_bytes %d (at least the checkpoint's %d bytes)",
			sample(t, body, "wcache_device_bytes", dev), st.DeviceBytes, model.TotalBytes)
	}
	if n := sample(t, body, "wcache_tensors", dev); n != float64(len(model.Tensors)) {
		t.Errorf("wcache_tensors = %v, want %d", n, len(model.Tensors))
	}
	if n := sample(t, body, "wcache_state", dev+`,state="serving"`); n != 1 {
		t.Errorf("wcache_state{serving} = %v, want 1", n)
	}
	if n := sample(t, body, "wcache_attach_duration_seconds_count", dev); n < 1 {
		t.Errorf("wcache_attach_duration_seconds_count = %v, want >= 1", n)
	}
	if !strings.Contains(body, "\nprocess_start_time_seconds ") || !strings.Contains(body, "\ngo_goroutines ") {
		t.Errorf("the process and Go collectors are missing from the scrape:\n%s", body)
	}

	h.mustRun("stop", "--device-uuid", uuid)
	if code := h.waitExit(d, 30*time.Second); code != 0 {
		t.Fatalf("serve exited %d after stop:\n%s", code, d)
	}
	assertGone(t, sock)
}

// TestMetricsRefusesNonLoopbackTCP: a metrics address on every interface
// is a usage error naming --metrics-allow-remote, and nothing is started.
func TestMetricsRefusesNonLoopbackTCP(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		res := h.run(serveArgs(0, model.Dir, "--metrics-listen", addr)...)
		if res.Code != 2 || !strings.Contains(res.Stderr, "--metrics-allow-remote") || !strings.Contains(res.Stderr, "loopback") {
			t.Errorf("--metrics-listen %s: want exit 2 naming --metrics-allow-remote\n%s", addr, res)
		}
	}
	p := h.Paths(h.UUIDs[0])
	assertGone(t, p.Socket, p.Ready)
}

// TestMetricsSocketDirectoryMustExist: a metrics socket in a missing
// directory fails serve before it loads anything.
func TestMetricsSocketDirectoryMustExist(t *testing.T) {
	h, model := newHarnessWithModel(t, harnessOptions{Devices: 1})
	sock := filepath.Join(h.Root, "missing", "metrics.sock")
	res := h.run(serveArgs(0, model.Dir, "--metrics-listen", "unix:"+sock)...)
	if res.Code != 1 || !strings.Contains(res.Stderr, sock) || strings.Contains(res.Stdout, "serving") {
		t.Errorf("--metrics-listen in a missing directory: want exit 1 naming the path before serving\n%s", res)
	}
	p := h.Paths(h.UUIDs[0])
	assertGone(t, p.Socket, p.Ready)
}
