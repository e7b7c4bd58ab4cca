package daemon

import "time"

// Metrics receives the daemon's operational events, for an exporter such as
// core/metrics (Prometheus). The daemon works without one: a nil
// Options.Metrics records nothing, and this package does not depend on any
// metrics library.
//
// The daemon calls the methods from its own goroutines, concurrently, and
// Leases and StateChanged with its lease registry locked (so that the values
// arrive in the order they happened): an implementation must be safe for
// concurrent use, must return quickly and must not call back into the
// Daemon.
type Metrics interface {
	// Loaded reports the initial load, once, after the last byte was
	// loaded and before the daemon listens: the stats Info().Load reports
	// and the number of tensors served. A daemon started empty reports
	// every committed publish instead, and an evict reports zero stats.
	Loaded(stats LoadStats, tensors int)
	// Attached reports an attach that became a lease: took is the
	// server-side time from the request reaching the Attach handler to the
	// manifest sent.
	Attached(took time.Duration)
	// AttachFailed reports an attach that ended without its manifest.
	AttachFailed(reason AttachFailure)
	// Leases reports the number of live leases after every change.
	Leases(n int)
	// StateChanged reports the serving state: StateServing once before the
	// daemon listens, then every change.
	StateChanged(s State)
	// DeviceBytes reports the device memory the daemon holds after every
	// change (a load, publish, evict): total, and per generation (oldest
	// first) — the arenas' sizes as the backend reported them, so total is
	// their sum and Status's device_bytes_total.
	DeviceBytes(total uint64, generations []GenerationBytes)
}

// GenerationBytes is what one generation holds on the device.
type GenerationBytes struct {
	Generation   uint64
	Model        string
	ConfigDigest string
	Bytes        uint64
}

// AttachFailure says why an attach ended without a manifest; its string is
// the reason label an exporter uses.
type AttachFailure string

// The reasons of AttachFailed.
const (
	// AttachConfigMismatch: the client's CacheConfig differs from the
	// daemon's (FAILED_PRECONDITION with a ConfigMismatch detail).
	AttachConfigMismatch AttachFailure = "config_mismatch"
	// AttachPermissionDenied: the peer's uid/gid may not use the daemon.
	AttachPermissionDenied AttachFailure = "permission_denied"
	// AttachDraining: the daemon is draining or stopping and accepts no
	// new lease.
	AttachDraining AttachFailure = "draining"
	// AttachEmpty: the daemon holds no weights (empty or being published
	// into): NOT_FOUND with a NoWeights detail.
	AttachEmpty AttachFailure = "empty"
	// AttachContentRefused: a matching generation's content policy
	// refused the attach's content proof (FAILED_PRECONDITION with a
	// ContentRefused detail: no proof where "headers" is not allowed, a
	// file not proven or with other bytes).
	AttachContentRefused AttachFailure = "content_refused"
	// AttachOther: anything else (a request without a config, the manifest
	// could not be sent).
	AttachOther AttachFailure = "other"
)

// AttachFailures lists every AttachFailure, for exporters that initialise
// one series per reason.
func AttachFailures() []AttachFailure {
	return []AttachFailure{AttachConfigMismatch, AttachPermissionDenied, AttachDraining, AttachEmpty, AttachContentRefused, AttachOther}
}

// MetricsFactory makes the Metrics of one daemon. Start calls it once, as
// soon as it has resolved and validated the device's UUID (before taking the
// lock and loading), so that an exporter can label every series with the
// device. An error fails Start.
type MetricsFactory func(deviceUUID string) (Metrics, error)

// noMetrics is the Metrics of a daemon without Options.Metrics.
type noMetrics struct{}

func (noMetrics) Loaded(LoadStats, int)                 {}
func (noMetrics) Attached(time.Duration)                {}
func (noMetrics) AttachFailed(AttachFailure)            {}
func (noMetrics) Leases(int)                            {}
func (noMetrics) StateChanged(State)                    {}
func (noMetrics) DeviceBytes(uint64, []GenerationBytes) {}

// reportHeld sends the device memory held to the daemon's Metrics.
func (d *Daemon) reportHeld() {
	d.reg.Holdings(func(held uint64, all []*generation) {
		gens := make([]GenerationBytes, len(all))
		for i, g := range all {
			gens[i] = GenerationBytes{Generation: g.ID, Model: g.Config.Model, ConfigDigest: g.Digest, Bytes: g.DeviceBytes()}
		}
		d.metrics.DeviceBytes(held, gens)
	})
}

// State is the daemon's serving state now.
func (d *Daemon) State() State { return d.reg.CurrentState() }
