package metrics

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wcache/wcache/core/daemon"
)

// namespace prefixes every series of a Sink.
const namespace = "wcache"

// DeviceLabel is the constant label naming the device on every wcache_*
// series.
const DeviceLabel = "device_uuid"

// AttachDurationBuckets are the upper bounds, in seconds, of
// wcache_attach_duration_seconds: 50 µs to 100 ms. An attach over a Unix
// socket takes well under a millisecond; the upper buckets catch a busy
// machine or a large manifest.
func AttachDurationBuckets() []float64 {
	return []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1}
}

// allStates are the values of the state label, in daemon.State order.
func allStates() []daemon.State {
	return []daemon.State{daemon.StateServing, daemon.StateDraining, daemon.StateStopping, daemon.StateEmpty, daemon.StatePublishing}
}

// Sink is a daemon.Metrics that records into Prometheus collectors. It is
// safe for concurrent use.
type Sink struct {
	attaches       prometheus.Counter
	attachErrors   *prometheus.CounterVec
	attachDuration prometheus.Histogram
	leases         prometheus.Gauge
	loadedBytes    prometheus.Gauge
	deviceBytes    prometheus.Gauge
	genBytes       *prometheus.GaugeVec
	tensors        prometheus.Gauge
	loadDuration   prometheus.Gauge
	loadRate       prometheus.Gauge
	fillSeconds    *prometheus.GaugeVec
	fillReaders    prometheus.Gauge
	fillChunks     prometheus.Gauge
	fillFiles      *prometheus.GaugeVec
	state          *prometheus.GaugeVec

	mu      sync.Mutex
	current daemon.State
	known   bool
}

// NewSink makes the collectors of one daemon, labelled
// device_uuid=deviceUUID, and registers them with reg. Every attach-error
// reason and every state starts at 0, so that the series exist before the
// first event. It fails when reg already holds wcache_* collectors with the
// same label (a second daemon of the same device in one registry).
func NewSink(reg prometheus.Registerer, deviceUUID string) (*Sink, error) {
	labels := prometheus.Labels{DeviceLabel: deviceUUID}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: namespace, Name: name, Help: help, ConstLabels: labels}
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts(opts(name, help)))
	}
	s := &Sink{
		attaches: prometheus.NewCounter(prometheus.CounterOpts(opts("attaches_total",
			"Attaches that became a lease (manifest sent)."))),
		attachErrors: prometheus.NewCounterVec(prometheus.CounterOpts(opts("attach_errors_total",
			"Attaches that ended without a manifest, by reason: config_mismatch, permission_denied, draining, empty, content_refused, other.")),
			[]string{"reason"}),
		attachDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace,
			Name: "attach_duration_seconds", ConstLabels: labels, Buckets: AttachDurationBuckets(),
			Help: "Server-side time of a successful attach, from the request to the manifest sent."}),
		leases:      gauge("leases", "Live leases (attached clients)."),
		loadedBytes: gauge("loaded_bytes", "Bytes of the checkpoint loaded into device memory."),
		deviceBytes: gauge("device_bytes",
			"Device memory the daemon holds, every generation summed: the arenas' sizes as the backend allocated them (Status device_bytes_total)."),
		genBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("generation_device_bytes",
			"Device memory one generation holds: its arenas' sizes as the backend allocated them; the series sum to wcache_device_bytes.")),
			[]string{"generation", "model", "config_digest"}),
		tensors:      gauge("tensors", "Tensors served."),
		loadDuration: gauge("load_duration_seconds", "Duration of the initial load (the backend's Load calls)."),
		loadRate:     gauge("load_bytes_per_second", "Fill rate of the initial load: loaded bytes / load duration."),
		fillSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("fill_phase_seconds",
			"Time the initial load's fill readers spent, summed over readers, by phase: read (pread), buffer_wait (waiting for a staging buffer's copy), queue (queueing copies), copy_wait (waiting for the last copies). 0 when the backend does not measure it.")),
			[]string{"phase"}),
		fillReaders: gauge("fill_readers", "Reader goroutines of the initial load's fill (the most any arena ran)."),
		fillChunks:  gauge("fill_chunks", "Copies the initial load's fill queued."),
		fillFiles: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("fill_files",
			"Checkpoint files of the initial load, summed over arenas, by how they were read: direct (O_DIRECT) or buffered.")),
			[]string{"read"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("state",
			"1 for the daemon's current state (empty, publishing, serving, draining, stopping), 0 for the others.")),
			[]string{"state"}),
	}
	for _, r := range daemon.AttachFailures() {
		s.attachErrors.WithLabelValues(string(r))
	}
	for _, st := range allStates() {
		s.state.WithLabelValues(st.String()).Set(0)
	}
	for _, p := range fillPhases() {
		s.fillSeconds.WithLabelValues(p).Set(0)
	}
	s.fillFiles.WithLabelValues("direct").Set(0)
	s.fillFiles.WithLabelValues("buffered").Set(0)
	for _, c := range []prometheus.Collector{s.attaches, s.attachErrors, s.attachDuration, s.leases,
		s.loadedBytes, s.deviceBytes, s.genBytes, s.tensors, s.loadDuration, s.loadRate, s.fillSeconds, s.fillReaders, s.fillChunks,
		s.fillFiles, s.state} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics of device %s: %w", deviceUUID, err)
		}
	}
	return s, nil
}

// Loaded implements daemon.Metrics.
func (s *Sink) Loaded(stats daemon.LoadStats, tensors int) {
	s.loadedBytes.Set(float64(stats.Bytes))
	s.tensors.Set(float64(tensors))
	s.loadDuration.Set(stats.Duration.Seconds())
	s.loadRate.Set(stats.BytesPerSecond())
	f := stats.Fill
	for phase, d := range map[string]time.Duration{"read": f.Read, "buffer_wait": f.BufferWait, "queue": f.Queue, "copy_wait": f.CopyWait} {
		s.fillSeconds.WithLabelValues(phase).Set(d.Seconds())
	}
	s.fillReaders.Set(float64(f.Readers))
	s.fillChunks.Set(float64(f.Chunks))
	s.fillFiles.WithLabelValues("direct").Set(float64(f.DirectFiles))
	s.fillFiles.WithLabelValues("buffered").Set(float64(f.BufferedFiles))
}

// DeviceBytes implements daemon.Metrics: wcache_device_bytes is the total,
// wcache_generation_device_bytes one series per generation held (series of
// generations gone are removed).
func (s *Sink) DeviceBytes(total uint64, gens []daemon.GenerationBytes) {
	s.deviceBytes.Set(float64(total))
	s.genBytes.Reset()
	for _, g := range gens {
		s.genBytes.WithLabelValues(strconv.FormatUint(g.Generation, 10), g.Model, g.ConfigDigest).Set(float64(g.Bytes))
	}
}

// fillPhases are the values of wcache_fill_phase_seconds's phase label.
func fillPhases() []string { return []string{"read", "buffer_wait", "queue", "copy_wait"} }

// Attached implements daemon.Metrics.
func (s *Sink) Attached(took time.Duration) {
	s.attaches.Inc()
	s.attachDuration.Observe(took.Seconds())
}

// AttachFailed implements daemon.Metrics.
func (s *Sink) AttachFailed(reason daemon.AttachFailure) {
	s.attachErrors.WithLabelValues(string(reason)).Inc()
}

// Leases implements daemon.Metrics.
func (s *Sink) Leases(n int) { s.leases.Set(float64(n)) }

// StateChanged implements daemon.Metrics.
func (s *Sink) StateChanged(st daemon.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current, s.known = st, true
	for _, other := range allStates() {
		v := 0.0
		if other == st {
			v = 1
		}
		s.state.WithLabelValues(other.String()).Set(v)
	}
}

// State is the last state the daemon reported; ok is false before the
// first report (the daemon is still loading).
func (s *Sink) State() (st daemon.State, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, s.known
}
