package metrics

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wcache/wcache/core/daemon"
)

// ErrSinkExists: Exporter.Metrics was called a second time; an Exporter
// serves one daemon.
var ErrSinkExists = errors.New("the exporter already has a daemon")

// Exporter is one daemon's Prometheus exporter: a registry of its own with
// the Go and process collectors (go_*, process_*: memory, descriptors,
// start time) and, once the daemon knows its device, the daemon's Sink.
// It is safe for concurrent use.
type Exporter struct {
	reg *prometheus.Registry

	mu   sync.Mutex
	sink *Sink
}

// NewExporter makes an Exporter with a fresh registry.
func NewExporter() *Exporter {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Exporter{reg: reg}
}

// Registry is the exporter's registry, for more collectors or for tests.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Metrics is the daemon's daemon.MetricsFactory: it makes the Sink of the
// device and registers it. A second call fails with ErrSinkExists.
func (e *Exporter) Metrics(deviceUUID string) (daemon.Metrics, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sink != nil {
		return nil, fmt.Errorf("metrics of device %s: %w", deviceUUID, ErrSinkExists)
	}
	s, err := NewSink(e.reg, deviceUUID)
	if err != nil {
		return nil, err
	}
	e.sink = s
	return s, nil
}

// Sink is the daemon's Sink, nil before Metrics was called.
func (e *Exporter) Sink() *Sink {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sink
}

// Health is what GET /healthz answers: the state's name ("starting" before
// the daemon reported one) and whether the daemon accepts attaches.
func (e *Exporter) Health() (state string, serving bool) {
	s := e.Sink()
	if s == nil {
		return "starting", false
	}
	st, ok := s.State()
	if !ok {
		return "starting", false
	}
	return st.String(), st == daemon.StateServing
}

// Handler serves GET (and HEAD) /metrics, the registry in the Prometheus
// exposition format (a collector that fails is reported in the scrape's
// promhttp_metric_handler_errors_total, the others are still served), and
// GET /healthz: 200 and "serving" while the daemon accepts attaches, else
// 503 and the state ("starting", "draining" or "stopping"). Other paths are
// 404, other methods 405.
func (e *Exporter) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, Registry: e.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		state, serving := e.Health()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !serving {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(w, state+"\n")
	})
	return mux
}
