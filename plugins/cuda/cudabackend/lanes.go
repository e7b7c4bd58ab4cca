package cudabackend

import (
	"fmt"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/lanepool"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk/fill"
)

// streams are the CUDA driver calls a fill lane is made of
// (lanepool.Streams): a non-blocking stream, cuMemHostAlloc staging
// buffers and events without timing, in the context current on the
// calling thread.
type streams struct{ drv *driver.Driver }

func (a streams) StreamCreate() (driver.Stream, error) {
	return a.drv.StreamCreate(driver.StreamNonBlocking)
}
func (a streams) StreamSynchronize(s driver.Stream) error { return a.drv.StreamSynchronize(s) }
func (a streams) StreamDestroy(s driver.Stream) error     { return a.drv.StreamDestroy(s) }
func (a streams) EventCreate() (driver.Event, error) {
	return a.drv.EventCreate(driver.EventDisableTiming)
}
func (a streams) EventRecord(e driver.Event, s driver.Stream) error { return a.drv.EventRecord(e, s) }
func (a streams) EventSynchronize(e driver.Event) error             { return a.drv.EventSynchronize(e) }
func (a streams) EventDestroy(e driver.Event) error                 { return a.drv.EventDestroy(e) }
func (a streams) HostAlloc(size int) (driver.HostBuffer, error)     { return a.drv.MemHostAlloc(size, 0) }
func (a streams) HostFree(b driver.HostBuffer) error                { return a.drv.MemFreeHost(b) }

// CopyHtoD queues cuMemcpyHtoDAsync_v2.
func (a streams) CopyHtoD(dst uint64, b driver.HostBuffer, off, n int, s driver.Stream) error {
	return a.drv.MemcpyHtoDAsync(driver.DevicePtr(dst), b, off, n, s)
}

// lanes is a device's pool of fill lanes, shared by its Loads.
type lanes = lanepool.Pool[*lanepool.StreamLane[driver.Stream, driver.HostBuffer, driver.Event]]

// newLanePool makes a device's pool of at most max lanes.
func newLanePool(drv *driver.Driver, max int, place *staging.Placer, log hclog.Logger) *lanes {
	return lanepool.NewStreams(streams{drv}, max, place, log)
}

// newCopier returns the fill copier into the allocation at base: lanes
// from pool, used by fill readers that make the primary context ctx
// current while they hold a lane and leave their thread with none after.
func newCopier(drv *driver.Driver, pool *lanes, ctx driver.Context, base gpucore.Ptr, log hclog.Logger) fill.Copier {
	return lanepool.StreamCopier[driver.Stream, driver.HostBuffer, driver.Event]{
		API: streams{drv}, Pool: pool, Base: uint64(base), Log: log,
		Bind: func() error {
			if err := drv.CtxSetCurrent(ctx); err != nil {
				return fmt.Errorf("make the primary context current on a fill reader: %w", err)
			}
			return nil
		},
		Unbind: func() error { return drv.CtxSetCurrent(driver.Context{}) },
	}
}
