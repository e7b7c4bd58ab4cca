// Package metrics exports one wcache daemon's operational metrics to
// Prometheus, and serves them with a health check over HTTP.
//
// An Exporter owns its own registry (never the global default one) with the
// standard Go and process collectors; its Metrics method is the daemon's
// daemon.MetricsFactory and makes the Sink that turns the daemon's events
// into wcache_* series, each labelled with the device's UUID. Handler serves
// GET /metrics (the Prometheus text exposition format) and GET /healthz (200
// "serving", 503 with the state otherwise).
//
// ParseAddr and Start put the handler on an address: "unix:/path" (a Unix
// socket, mode 0600 from the moment it exists, bound as the daemon binds its
// own socket) or "host:port" on TCP, refused unless the host is a loopback
// address or remote access is explicitly allowed.
package metrics
