package rocmbackend

import (
	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/sdk/fill"
)

// driver is the HIP half of the backend (gpucore.Driver): every call for
// a device runs on its worker thread, where Setup made it current with
// hipSetDevice (which creates its primary context: a worker starts only
// when a device is first used for memory, never to list devices).
type driver struct{ rt *Runtime }

var _ gpucore.Driver = driver{}

func (d driver) Name() string              { return "ROCm" }
func (d driver) HandleKind() string        { return HandleKind }
func (d driver) DeviceCount() int          { return len(d.rt.devices) }
func (d driver) FillOptions() fill.Options { return d.rt.cfg.Staging.FillOptions() }

func (d driver) Fatal() error { return d.rt.FatalError() }

func (d driver) Setup(ordinal int) (any, error) { return nil, d.rt.hip.SetDevice(ordinal) }

func (d driver) Cleanup(w *gpucore.Worker) error {
	if p, ok := w.Lanes.(*lanes); ok {
		return p.Free()
	}
	return nil
}

func (d driver) Malloc(n uint64) (gpucore.Ptr, error) {
	p, err := d.rt.hip.Malloc(n)
	return gpucore.Ptr(p), err
}

func (d driver) Free(p gpucore.Ptr) error { return d.rt.hip.Free(hip.DevicePtr(p)) }
func (d driver) Synchronize() error       { return d.rt.hip.DeviceSynchronize() }

func (d driver) IpcGet(p gpucore.Ptr) (gpucore.Handle, error) {
	h, err := d.rt.hip.IpcGetMemHandle(hip.DevicePtr(p))
	return gpucore.Handle(h), err
}

// IpcOpen is hipIpcOpenMemHandle with hipIpcMemLazyEnablePeerAccess, the
// only flag ROCm accepts.
func (d driver) IpcOpen(h gpucore.Handle) (gpucore.Ptr, error) {
	p, err := d.rt.hip.IpcOpenMemHandle(hip.IPCHandle(h), hip.IPCMemLazyEnablePeerAccess)
	return gpucore.Ptr(p), err
}

func (d driver) IpcClose(p gpucore.Ptr) error { return d.rt.hip.IpcCloseMemHandle(hip.DevicePtr(p)) }

func (d driver) MappedBytes(p gpucore.Ptr) uint64 {
	if !d.rt.hip.HasMemGetAddressRange() {
		return 0
	}
	base, n, err := d.rt.hip.MemGetAddressRange(hip.DevicePtr(p))
	return gpucore.MappedFrom(p, gpucore.Ptr(base), n, err)
}

func (d driver) MemcpyDtoH(dst []byte, src gpucore.Ptr) error {
	return d.rt.hip.MemcpyDtoH(dst, hip.DevicePtr(src))
}

func (d driver) MemGetInfo() (uint64, error) {
	free, _, err := d.rt.hip.MemGetInfo()
	return free, err
}

// OpenFailure reports whether err is a hip.Error and whether its code is
// the invalid-context error.
func (d driver) OpenFailure(err error) (driverError, invalidContext bool) {
	return dl.IsCode(err, hip.ErrorInvalidContext)
}

// Copier returns the fill copier into base on w's device, making the
// device's lane pool on first use: as many lanes as readers, staging
// memory on the GPU's NUMA node when sysfs names one.
func (d driver) Copier(w *gpucore.Worker, base gpucore.Ptr) fill.Copier {
	rt := d.rt
	pool := w.LanePool(rt.cfg.Staging, rt.cfg.SysfsRoot, rt.devices[w.Ordinal].pciBusID, rt.log,
		func(readers int, place *staging.Placer) any { return newLanePool(rt.hip, readers, place, rt.log) })
	return newCopier(rt.hip, pool.(*lanes), w.Ordinal, base)
}
