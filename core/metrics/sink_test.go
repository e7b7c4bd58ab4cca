package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wcache/wcache/core/cacheconfig"
	"github.com/wcache/wcache/core/client"
	"github.com/wcache/wcache/core/daemon"
	"github.com/wcache/wcache/sdk"
)

// TestSinkFollowsTheDaemon runs a real daemon against an Exporter: the load,
// attaches, a mismatch, the lease count going up and down and a drain are
// reflected in the series' values, each labelled with the device.
func TestMetricsSinkFollowsTheDaemon(t *testing.T) {
	exp := NewExporter()
	td := startDaemon(t, exp)
	s := exp.Sink()
	if s == nil {
		t.Fatal("the daemon did not make its sink")
	}
	info := td.d.Info()
	if got := testutil.ToFloat64(s.loadedBytes); got != float64(td.model.TotalBytes) {
		t.Errorf("loaded_bytes = %v, want the checkpoint's %d", got, td.model.TotalBytes)
	}
	if got := testutil.ToFloat64(s.deviceBytes); got != float64(info.Load.AllocatedBytes) || info.Load.AllocatedBytes < td.model.TotalBytes {
		t.Errorf("device_bytes = %v, want the arenas' %d (at least the checkpoint's %d)", got, info.Load.AllocatedBytes, td.model.TotalBytes)
	}
	gens := info.Generations
	if len(gens) != 1 {
		t.Fatalf("%d generations, want 1", len(gens))
	}
	g := s.genBytes.WithLabelValues(strconv.FormatUint(gens[0].ID, 10), gens[0].Config.Model, gens[0].ConfigDigest)
	if got := testutil.ToFloat64(g); got != float64(info.Load.AllocatedBytes) || testutil.CollectAndCount(s.genBytes) != 1 {
		t.Errorf("generation_device_bytes = %v over %d series, want one of %d", got, testutil.CollectAndCount(s.genBytes), info.Load.AllocatedBytes)
	}
	if got := testutil.ToFloat64(s.tensors); got != float64(len(td.model.Tensors)) {
		t.Errorf("tensors = %v, want %d", got, len(td.model.Tensors))
	}
	if got := testutil.ToFloat64(s.loadDuration); got != info.Load.Duration.Seconds() || got <= 0 {
		t.Errorf("load_duration_seconds = %v, want %v", got, info.Load.Duration.Seconds())
	}
	if got := testutil.ToFloat64(s.loadRate); got != info.Load.BytesPerSecond() || got <= 0 {
		t.Errorf("load_bytes_per_second = %v, want %v", got, info.Load.BytesPerSecond())
	}
	if f := info.Load.Fill; f.Bytes != uint64(td.model.TotalBytes) || f.Readers < 1 || f.Chunks < 1 {
		t.Errorf("fill counters %+v, want the checkpoint's %d bytes from the mock's pipeline", f, td.model.TotalBytes)
	}
	if got := testutil.ToFloat64(s.fillReaders); got != float64(info.Load.Fill.Readers) || got < 1 {
		t.Errorf("fill_readers = %v, want %d", got, info.Load.Fill.Readers)
	}
	if got := testutil.ToFloat64(s.fillSeconds.WithLabelValues("read")); got != info.Load.Fill.Read.Seconds() || got <= 0 {
		t.Errorf("fill_phase_seconds{read} = %v, want %v", got, info.Load.Fill.Read.Seconds())
	}

	a, err := td.attach(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := td.attach(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = td.attach(t, func(c *cacheconfig.Config) { c.TPSize, c.TPRank = 2, 1 })
	if _, ok := client.IsMismatch(err); !ok {
		t.Fatalf("mismatching attach: %v", err)
	}
	if got := testutil.ToFloat64(s.leases); got != 2 {
		t.Errorf("leases = %v with two attached, want 2", got)
	}
	a.Lease.Close()
	waitFor(t, "the lease gauge to drop", func() bool { return testutil.ToFloat64(s.leases) == 1 })

	expected := fmt.Sprintf(`
# HELP wcache_attach_errors_total Attaches that ended without a manifest, by reason: config_mismatch, permission_denied, draining, empty, content_refused, other.
# TYPE wcache_attach_errors_total counter
wcache_attach_errors_total{device_uuid=%[1]q,reason="config_mismatch"} 1
wcache_attach_errors_total{device_uuid=%[1]q,reason="content_refused"} 0
wcache_attach_errors_total{device_uuid=%[1]q,reason="draining"} 0
wcache_attach_errors_total{device_uuid=%[1]q,reason="empty"} 0
wcache_attach_errors_total{device_uuid=%[1]q,reason="other"} 0
wcache_attach_errors_total{device_uuid=%[1]q,reason="permission_denied"} 0
# HELP wcache_attaches_total Attaches that became a lease (manifest sent).
# TYPE wcache_attaches_total counter
wcache_attaches_total{device_uuid=%[1]q} 2
# HELP wcache_leases Live leases (attached clients).
# TYPE wcache_leases gauge
wcache_leases{device_uuid=%[1]q} 1
# HELP wcache_state 1 for the daemon's current state (empty, publishing, serving, draining, stopping), 0 for the others.
# TYPE wcache_state gauge
wcache_state{device_uuid=%[1]q,state="draining"} 0
wcache_state{device_uuid=%[1]q,state="empty"} 0
wcache_state{device_uuid=%[1]q,state="publishing"} 0
wcache_state{device_uuid=%[1]q,state="serving"} 1
wcache_state{device_uuid=%[1]q,state="stopping"} 0
`, testUUID)
	if err := testutil.GatherAndCompare(exp.Registry(), strings.NewReader(expected),
		"wcache_attach_errors_total", "wcache_attaches_total", "wcache_leases", "wcache_state"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(s.attachDuration); n != 1 {
		t.Errorf("attach_duration_seconds: %d series, want 1", n)
	}
	if count, sum := histogram(t, s.attachDuration); count != 2 || sum <= 0 || sum > 10 {
		t.Errorf("attach_duration_seconds count %d sum %v, want 2 observations", count, sum)
	}

	// A drain that times out: the state and /healthz follow, an attach
	// while draining counts as "draining".
	h := exp.Handler()
	stopped := make(chan error, 1)
	go func() {
		_, err := td.d.Stop(context.Background(), false, time.Second)
		stopped <- err
	}()
	select {
	case <-b.Lease.Notices():
	case <-time.After(5 * time.Second):
		t.Fatal("no drain notice")
	}
	if got := testutil.ToFloat64(s.state.WithLabelValues("draining")); got != 1 {
		t.Errorf("state{draining} = %v during a drain", got)
	}
	if code, body := serve(h, "/healthz"); code != http.StatusServiceUnavailable || body != "draining\n" {
		t.Errorf("/healthz during a drain = %d %q, want 503 draining", code, body)
	}
	if _, err := td.attach(t, nil); status.Code(err) != codes.Unavailable {
		t.Errorf("attach while draining: %v", err)
	}
	var dte *daemon.DrainTimeoutError
	if err := <-stopped; !errors.As(err, &dte) {
		t.Fatalf("stop = %v, want the drain to time out", err)
	}
	if got := testutil.ToFloat64(s.attachErrors.WithLabelValues("draining")); got != 1 {
		t.Errorf("attach_errors_total{draining} = %v, want 1", got)
	}
	if code, body := serve(h, "/healthz"); code != http.StatusOK || body != "serving\n" {
		t.Errorf("/healthz after the drain gave up = %d %q, want 200 serving", code, body)
	}
	b.Lease.Close()
	waitFor(t, "no lease", func() bool { return testutil.ToFloat64(s.leases) == 0 })
}

// histogram returns the sample count and sum of h.
func histogram(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	h.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// serve runs one GET of path through h.
func serve(h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestMetricsNewSinkRefusesASecondDaemonOfTheSameDevice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewSink(reg, testUUID); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if _, err := NewSink(reg, testUUID); !errors.As(err, &are) {
		t.Errorf("second sink of one device = %v, want AlreadyRegisteredError", err)
	}
	exp := NewExporter()
	if _, err := exp.Metrics(testUUID); err != nil {
		t.Fatal(err)
	}
	if _, err := exp.Metrics(testUUID); !errors.Is(err, ErrSinkExists) {
		t.Errorf("second daemon of one exporter = %v, want ErrSinkExists", err)
	}
}

func TestMetricsSinkCountsEveryReason(t *testing.T) {
	s, err := NewSink(prometheus.NewRegistry(), testUUID)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range daemon.AttachFailures() {
		for range i + 1 {
			s.AttachFailed(r)
		}
	}
	for i, r := range daemon.AttachFailures() {
		if got := testutil.ToFloat64(s.attachErrors.WithLabelValues(string(r))); got != float64(i+1) {
			t.Errorf("attach_errors_total{reason=%q} = %v, want %d", r, got, i+1)
		}
	}
}

func TestMetricsHandlerHealthAndExposition(t *testing.T) {
	exp := NewExporter()
	h := exp.Handler()
	if code, body := serve(h, "/healthz"); code != http.StatusServiceUnavailable || body != "starting\n" {
		t.Errorf("/healthz before the daemon = %d %q, want 503 starting", code, body)
	}
	m, err := exp.Metrics(testUUID)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := serve(h, "/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz while loading = %d, want 503", code)
	}
	m.StateChanged(daemon.StateServing)
	if code, body := serve(h, "/healthz"); code != http.StatusOK || body != "serving\n" {
		t.Errorf("/healthz serving = %d %q", code, body)
	}
	m.StateChanged(daemon.StateStopping)
	if code, body := serve(h, "/healthz"); code != http.StatusServiceUnavailable || body != "stopping\n" {
		t.Errorf("/healthz stopping = %d %q", code, body)
	}
	code, body := serve(h, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{"go_goroutines ", "process_start_time_seconds ", "wcache_leases{device_uuid=\"" + testUUID + "\"} 0",
		"wcache_attach_duration_seconds_bucket{device_uuid=\"" + testUUID + "\",le=\"0.0001\"} 0",
		"wcache_attach_duration_seconds_bucket{device_uuid=\"" + testUUID + "\",le=\"0.1\"} 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/metrics", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics = %d, want 405", rec.Code)
	}
	if code, _ := serve(h, "/"); code != http.StatusNotFound {
		t.Errorf("GET / = %d, want 404", code)
	}
}

func TestMetricsSinkExportsFillCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewSink(reg, testUUID)
	if err != nil {
		t.Fatal(err)
	}
	s.Loaded(daemon.LoadStats{Bytes: 1 << 30, Duration: 2 * time.Second, Fill: sdk.LoadStats{
		Bytes: 1 << 30, Chunks: 64, Readers: 8, DirectFiles: 2, BufferedFiles: 1,
		Read: 3 * time.Second, BufferWait: 500 * time.Millisecond, Queue: 250 * time.Millisecond, CopyWait: 125 * time.Millisecond,
	}}, 10)
	expected := fmt.Sprintf(`
# HELP wcache_fill_chunks Copies the initial load's fill queued.
# TYPE wcache_fill_chunks gauge
wcache_fill_chunks{device_uuid=%[1]q} 64
# HELP wcache_fill_files Checkpoint files of the initial load, summed over arenas, by how they were read: direct (O_DIRECT) or buffered.
# TYPE wcache_fill_files gauge
wcache_fill_files{device_uuid=%[1]q,read="buffered"} 1
wcache_fill_files{device_uuid=%[1]q,read="direct"} 2
# HELP wcache_fill_phase_seconds Time the initial load's fill readers spent, summed over readers, by phase: read (pread), buffer_wait (waiting for a staging buffer's copy), queue (queueing copies), copy_wait (waiting for the last copies). 0 when the backend does not measure it.
# TYPE wcache_fill_phase_seconds gauge
wcache_fill_phase_seconds{device_uuid=%[1]q,phase="buffer_wait"} 0.5
wcache_fill_phase_seconds{device_uuid=%[1]q,phase="copy_wait"} 0.125
wcache_fill_phase_seconds{device_uuid=%[1]q,phase="queue"} 0.25
wcache_fill_phase_seconds{device_uuid=%[1]q,phase="read"} 3
# HELP wcache_fill_readers Reader goroutines of the initial load's fill (the most any arena ran).
# TYPE wcache_fill_readers gauge
wcache_fill_readers{device_uuid=%[1]q} 8
`, testUUID)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"wcache_fill_chunks", "wcache_fill_files", "wcache_fill_phase_seconds", "wcache_fill_readers"); err != nil {
		t.Error(err)
	}
}
