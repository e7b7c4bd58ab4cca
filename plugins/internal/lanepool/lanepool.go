// Package lanepool bounds and reuses a GPU device's fill lanes: the
// stream, events and pinned staging buffers one sdk/fill reader uses. At
// most max lanes exist per device; the Loads running at once (one per
// arena) share them, and a reader that finds none free waits. A lane that
// saw a failure is destroyed rather than reused (its stream is in an
// unknown state). The CUDA and ROCm backends' lanes and Copiers are its
// StreamLane and StreamCopier (streams.go), and their peer copies' streams
// PeerStream (peerstream.go): the vendor code only gives its stream, event
// and pinned-memory calls (Streams) and its peer-copy call.
package lanepool

import (
	"context"
	"errors"
	"fmt"

	hclog "github.com/hashicorp/go-hclog"
)

// Funcs are the vendor's part. Create and Destroy run on the calling
// fill reader's thread, where the device is current.
type Funcs[L any] struct {
	// Create makes a lane of buffers staging buffers of size bytes.
	Create func(buffers, size int) (L, error)
	// Destroy waits for the lane's copies and frees what it holds.
	Destroy func(L) error
	// Fits reports whether an idle lane has that shape (a pool serves one
	// Config, so it normally does).
	Fits func(l L, buffers, size int) bool
}

// Pool holds a device's lanes. Create it with New.
type Pool[L any] struct {
	f   Funcs[L]
	log hclog.Logger
	// idle holds free lanes; slots one token per lane in existence.
	idle  chan L
	slots chan struct{}
}

// New returns a pool of at most max lanes.
func New[L any](max int, f Funcs[L], log hclog.Logger) *Pool[L] {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Pool[L]{f: f, log: log, idle: make(chan L, max), slots: make(chan struct{}, max)}
}

// Take returns a free lane of that shape, creating one while fewer than
// max exist and waiting for one otherwise, until ctx ends.
func (p *Pool[L]) Take(ctx context.Context, buffers, size int) (L, error) {
	var zero L
	var l L
	have := false
	select {
	case l = <-p.idle:
		have = true
	default:
		select {
		case l = <-p.idle:
			have = true
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
	if have && p.f.Fits(l, buffers, size) {
		return l, nil
	}
	if have {
		// Another shape: replace it, keeping its slot.
		if err := p.f.Destroy(l); err != nil {
			p.log.Warn("free a fill lane", "error", err)
		}
	}
	l, err := p.f.Create(buffers, size)
	if err != nil {
		<-p.slots
		return zero, err
	}
	return l, nil
}

// Put gives l back after a fill; failed is the first error the lane saw,
// and a lane with one is destroyed.
func (p *Pool[L]) Put(l L, failed error) {
	if failed == nil {
		p.idle <- l
		return
	}
	if err := p.f.Destroy(l); err != nil {
		p.log.Warn("free a failed fill lane", "error", err)
	}
	<-p.slots
}

// Free destroys every idle lane; with no fill running. Lanes still taken
// are an error.
func (p *Pool[L]) Free() error {
	var errs []error
	for {
		select {
		case l := <-p.idle:
			errs = append(errs, p.f.Destroy(l))
			<-p.slots
			continue
		default:
		}
		break
	}
	if n := len(p.slots); n > 0 {
		errs = append(errs, fmt.Errorf("%d fill lanes still in use when the device worker stopped", n))
	}
	return errors.Join(errs...)
}
