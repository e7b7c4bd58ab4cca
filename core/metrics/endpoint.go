package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/core/daemon"
)

// ShutdownTimeout bounds waiting for scrapes in flight when the daemon of
// an Endpoint has stopped.
const ShutdownTimeout = 5 * time.Second

// Endpoint is the metrics endpoint of one daemon, from its ready file to its
// stop: give Metrics to daemon.Options before daemon.Start, then Listen
// once the daemon has started, and Run the daemon through it.
type Endpoint struct {
	addr Addr
	exp  *Exporter
	log  hclog.Logger
	srv  *Server
}

// NewEndpoint prepares an endpoint at a (see ParseAddr) that logs to log
// (nil: discarded); nothing listens before Listen.
func NewEndpoint(a Addr, log hclog.Logger) *Endpoint {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Endpoint{addr: a, exp: NewExporter(), log: log}
}

// Metrics is the daemon.Options.Metrics of the daemon this endpoint serves.
func (e *Endpoint) Metrics(deviceUUID string) (daemon.Metrics, error) {
	return e.exp.Metrics(deviceUUID)
}

// Listen starts serving /metrics and /healthz for the started daemon d and
// returns the address it listens on. It is called after daemon.Start: after
// a --force takeover the previous daemon, which may have held the same
// address, is gone. If it cannot listen, d is stopped at once (a lease
// taken since its ready file appeared ends with UNAVAILABLE, its files are
// removed and its memory freed) and the listen error is returned, joined
// with any error of the stop.
func (e *Endpoint) Listen(d *daemon.Daemon) (string, error) {
	srv, err := Start(e.addr, e.exp.Handler())
	if err != nil {
		if _, serr := d.Stop(context.Background(), true, 0); serr != nil {
			e.log.Warn("stopping the daemon", "error", serr)
		}
		return "", errors.Join(err, d.Run(context.Background()))
	}
	e.srv = srv
	return srv.Addr(), nil
}

// Run runs d (daemon.Daemon.Run) until it stops, then shuts the endpoint
// down, waiting up to ShutdownTimeout for scrapes in flight.
func (e *Endpoint) Run(ctx context.Context, d *daemon.Daemon) error {
	if e.srv != nil {
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
			defer cancel()
			if err := e.srv.Shutdown(sctx); err != nil {
				e.log.Warn("stopping the metrics endpoint", "error", err)
			}
		}()
	}
	return d.Run(ctx)
}
