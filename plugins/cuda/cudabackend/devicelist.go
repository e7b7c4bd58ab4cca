package cudabackend

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/sdk"
)

// Devices lists the devices this process sees, by ordinal. Name, memory
// and PCI bus id come from NVML when it knows the device's UUID, else from
// the CUDA driver. FreeMemory comes from NVML, else from cuMemGetInfo in
// the device's primary context (retained briefly when no worker holds it,
// so listing devices leaves no context behind on devices never used).
func (b *Backend) Devices(ctx context.Context) ([]sdk.Device, error) {
	if err := b.live(); err != nil {
		return nil, err
	}
	rt := b.rt
	out := make([]sdk.Device, len(rt.devices))
	for i, d := range rt.devices {
		free, total, err := rt.memInfo(ctx, d)
		if err != nil {
			return nil, err
		}
		out[i] = sdk.Device{
			Ordinal:     d.ordinal,
			UUID:        d.canonical,
			Name:        d.name,
			TotalMemory: total,
			FreeMemory:  min(free, total),
			PCIBusID:    d.pciBusID,
			Capability:  d.capability,
		}
	}
	return out, nil
}

// memInfo returns the free and total bytes of a device.
func (rt *Runtime) memInfo(ctx context.Context, d deviceInfo) (free, total uint64, err error) {
	rt.mu.Lock()
	nv, closed := rt.nvml, rt.closed
	rt.mu.Unlock()
	if closed {
		return 0, 0, errClosed
	}
	if nv != nil && d.fromNVML {
		if m, ok := nv.Lookup(d.uuid); ok && m.HaveMemory && m.TotalMemory > 0 {
			return m.FreeMemory, m.TotalMemory, nil
		}
	}
	query := func() error {
		var err error
		free, _, err = rt.drv.MemGetInfo()
		return err
	}
	if w := rt.runningWorker(d.ordinal); w != nil {
		err = w.do(ctx, query)
	} else {
		err = rt.withTemporaryContext(d, query)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("free memory of device %d: %w", d.ordinal, err)
	}
	return free, d.totalMemory, nil
}

// withTemporaryContext runs fn on a fresh locked thread with d's primary
// context retained and current, then releases the context.
func (rt *Runtime) withTemporaryContext(d deviceInfo, fn func() error) error {
	res := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		ctx, err := rt.drv.PrimaryCtxRetain(d.dev)
		if err != nil {
			res <- err
			return
		}
		if err := rt.drv.CtxSetCurrent(ctx); err != nil {
			res <- errors.Join(err, rt.drv.PrimaryCtxRelease(d.dev))
			return
		}
		err = fn()
		res <- errors.Join(err, rt.drv.CtxSetCurrent(driver.Context{}), rt.drv.PrimaryCtxRelease(d.dev))
	}()
	return <-res
}
