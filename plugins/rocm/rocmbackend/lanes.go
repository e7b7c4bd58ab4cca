package rocmbackend

import (
	"fmt"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/lanepool"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/sdk/fill"
)

// streams are the HIP calls a fill lane is made of (lanepool.Streams): a
// non-blocking stream, hipHostMalloc staging buffers and events without
// timing, on the device current on the calling thread.
type streams struct{ h *hip.Runtime }

func (a streams) StreamCreate() (hip.Stream, error)           { return a.h.StreamCreate(hip.StreamNonBlocking) }
func (a streams) StreamSynchronize(s hip.Stream) error        { return a.h.StreamSynchronize(s) }
func (a streams) StreamDestroy(s hip.Stream) error            { return a.h.StreamDestroy(s) }
func (a streams) EventCreate() (hip.Event, error)             { return a.h.EventCreate(hip.EventDisableTiming) }
func (a streams) EventRecord(e hip.Event, s hip.Stream) error { return a.h.EventRecord(e, s) }
func (a streams) EventSynchronize(e hip.Event) error          { return a.h.EventSynchronize(e) }
func (a streams) EventDestroy(e hip.Event) error              { return a.h.EventDestroy(e) }
func (a streams) HostAlloc(size int) (hip.HostBuffer, error) {
	return a.h.HostMalloc(size, hip.HostMallocDefault)
}
func (a streams) HostFree(b hip.HostBuffer) error { return a.h.HostFree(b) }

// CopyHtoD queues hipMemcpyHtoDAsync.
func (a streams) CopyHtoD(dst uint64, b hip.HostBuffer, off, n int, s hip.Stream) error {
	return a.h.MemcpyHtoDAsync(hip.DevicePtr(dst), b, off, n, s)
}

// lanes is a device's pool of fill lanes, shared by its Loads.
type lanes = lanepool.Pool[*lanepool.StreamLane[hip.Stream, hip.HostBuffer, hip.Event]]

// newLanePool makes a device's pool of at most max lanes.
func newLanePool(h *hip.Runtime, max int, place *staging.Placer, log hclog.Logger) *lanes {
	return lanepool.NewStreams(streams{h}, max, place, log)
}

// newCopier returns the fill copier into the allocation at base on device
// ordinal: lanes from pool, used by fill readers that make the device
// current on their thread first (HIP's current device is per thread).
func newCopier(h *hip.Runtime, pool *lanes, ordinal int, base gpucore.Ptr) fill.Copier {
	return lanepool.StreamCopier[hip.Stream, hip.HostBuffer, hip.Event]{
		API: streams{h}, Pool: pool, Base: uint64(base),
		Bind: func() error {
			if err := h.SetDevice(ordinal); err != nil {
				return fmt.Errorf("make device %d current on a fill reader: %w", ordinal, err)
			}
			return nil
		},
	}
}
