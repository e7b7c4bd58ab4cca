package cudabackend

import (
	"errors"
	"time"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/dl"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/internal/staging"
	"github.com/wcache/wcache/sdk/fill"
)

// DefaultHealthInterval is how often each device context the plugin holds
// is probed for a sticky error (WCACHE_CUDA_HEALTH_INTERVAL overrides it;
// 0 turns the probe off; see gpucore.Runtime.WatchHealth).
const DefaultHealthInterval = 5 * time.Second

// cudaDriver is the CUDA half of the backend (gpucore.Driver): every call
// for a device runs on its worker thread, where Setup retained the
// device's primary context and made it current.
type cudaDriver struct{ rt *Runtime }

var (
	_ gpucore.Driver   = cudaDriver{}
	_ gpucore.FDDriver = cudaDriver{}
)

func (d cudaDriver) Name() string       { return "CUDA" }
func (d cudaDriver) HandleKind() string { return d.rt.cfg.handleKind() }
func (d cudaDriver) DeviceCount() int   { return len(d.rt.devices) }

func (d cudaDriver) Fatal() error { return d.rt.FatalError() }

func (d cudaDriver) FillOptions() fill.Options { return d.rt.cfg.Staging.FillOptions() }

// Setup retains the device's primary context and makes it current; the
// context is the worker's state.
func (d cudaDriver) Setup(ordinal int) (any, error) {
	drv, dev := d.rt.drv, d.rt.devices[ordinal].dev
	ctx, err := drv.PrimaryCtxRetain(dev)
	if err != nil {
		return nil, err
	}
	if err := drv.CtxSetCurrent(ctx); err != nil {
		return nil, errors.Join(err, drv.PrimaryCtxRelease(dev))
	}
	return ctx, nil
}

// Cleanup frees the fill lanes and releases the primary context.
func (d cudaDriver) Cleanup(w *gpucore.Worker) error {
	drv := d.rt.drv
	var errs []error
	if p, ok := w.Lanes.(*lanes); ok {
		errs = append(errs, p.Free())
	}
	return errors.Join(append(errs, drv.CtxSetCurrent(driver.Context{}), drv.PrimaryCtxRelease(d.rt.devices[w.Ordinal].dev))...)
}

func (d cudaDriver) Malloc(n uint64) (gpucore.Ptr, error) {
	p, err := d.rt.drv.MemAlloc(n)
	return gpucore.Ptr(p), err
}

// Free frees a cuMemAlloc allocation, or unmaps and releases VMM memory
// (created or imported; see vmm.go).
func (d cudaDriver) Free(p gpucore.Ptr) error {
	if m, ok := d.rt.vmm.take(p); ok {
		return d.rt.vmmFree(m)
	}
	return d.rt.drv.MemFree(driver.DevicePtr(p))
}
func (d cudaDriver) Synchronize() error { return d.rt.drv.CtxSynchronize() }

func (d cudaDriver) IpcGet(p gpucore.Ptr) (gpucore.Handle, error) {
	h, err := d.rt.drv.IpcGetMemHandle(driver.DevicePtr(p))
	return gpucore.Handle(h), err
}

// IpcOpen is cuIpcOpenMemHandle_v2 with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
func (d cudaDriver) IpcOpen(h gpucore.Handle) (gpucore.Ptr, error) {
	p, err := d.rt.drv.IpcOpenMemHandle(driver.IPCHandle(h), driver.IPCMemLazyEnablePeer)
	return gpucore.Ptr(p), err
}

func (d cudaDriver) IpcClose(p gpucore.Ptr) error {
	return d.rt.drv.IpcCloseMemHandle(driver.DevicePtr(p))
}

func (d cudaDriver) MappedBytes(p gpucore.Ptr) uint64 {
	base, n, err := d.rt.drv.MemGetAddressRange(driver.DevicePtr(p))
	return gpucore.MappedFrom(p, gpucore.Ptr(base), n, err)
}

func (d cudaDriver) MemcpyDtoH(dst []byte, src gpucore.Ptr) error {
	return d.rt.drv.MemcpyDtoH(dst, driver.DevicePtr(src))
}

func (d cudaDriver) MemGetInfo() (uint64, error) {
	free, _, err := d.rt.drv.MemGetInfo()
	return free, err
}

// OpenFailure reports whether err is a driver.Error and whether its code is
// the invalid-context error.
func (d cudaDriver) OpenFailure(err error) (driverError, invalidContext bool) {
	return dl.IsCode(err, driver.ErrorInvalidContext)
}

// Copier returns the fill copier into base on w's device, making the
// device's lane pool on first use: as many lanes as readers, staging
// memory on the GPU's NUMA node when sysfs (Config.SysfsRoot) names one.
func (d cudaDriver) Copier(w *gpucore.Worker, base gpucore.Ptr) fill.Copier {
	rt := d.rt
	pool := w.LanePool(rt.cfg.Staging, rt.cfg.SysfsRoot, rt.devices[w.Ordinal].pciBusID, rt.log,
		func(readers int, place *staging.Placer) any { return newLanePool(rt.drv, readers, place, rt.log) })
	return newCopier(rt.drv, pool.(*lanes), w.State.(driver.Context), base, rt.log)
}
