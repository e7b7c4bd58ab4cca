package daemon

import (
	"context"
	"fmt"
)

// MemoryError refuses a load or a publish that would pass the daemon's
// memory budget: Options.MaxBytes, or the device's free memory less
// Options.ReserveBytes. It is returned before anything is allocated; a
// publish answers it with RESOURCE_EXHAUSTED and this message.
type MemoryError struct {
	// What is refused: "load" or "publish".
	What string
	// Need is the sum of the plan's arena sizes; Held what the daemon
	// already holds on the device, every generation summed.
	Need, Held uint64
	// MaxBytes is Options.MaxBytes (0: no cap). Free is the device's free
	// memory as the backend reported it (less what was admitted and not
	// yet allocated) and Reserve Options.ReserveBytes; both 0 when the
	// refusal is the cap's.
	MaxBytes, Free, Reserve uint64
	// ByFree: the refusal is the free memory's (Free, Reserve), not the
	// cap's.
	ByFree bool
}

func (e *MemoryError) Error() string {
	if e.ByFree || e.MaxBytes == 0 {
		return fmt.Sprintf("%s needs %d bytes of device memory; the device has %d free and %d are reserved (--reserve-bytes)",
			e.What, e.Need, e.Free, e.Reserve)
	}
	return fmt.Sprintf("%s needs %d bytes of device memory; the daemon holds %d and may hold at most %d (--max-bytes)",
		e.What, e.Need, e.Held, e.MaxBytes)
}

// capFromFraction sets Options.MaxBytes from Options.MaxFraction and the
// device's total memory (Start, before anything is planned against it).
func (d *Daemon) capFromFraction(ctx context.Context) error {
	if d.opts.MaxFraction == 0 {
		return nil
	}
	devs, err := d.backend.Devices(ctx)
	if err != nil {
		return fmt.Errorf("total memory of GPU %d: %w", d.opts.GPU, err)
	}
	if d.opts.GPU >= len(devs) || devs[d.opts.GPU].TotalMemory == 0 {
		return fmt.Errorf("a cap of %g%% of GPU %d's memory: the backend does not report its total memory; give the cap in bytes",
			d.opts.MaxFraction*100, d.opts.GPU)
	}
	d.opts.MaxBytes = max(uint64(d.opts.MaxFraction*float64(devs[d.opts.GPU].TotalMemory)), 1)
	d.log.Info("memory cap", "max_bytes", d.opts.MaxBytes, "fraction", d.opts.MaxFraction, "device_total", devs[d.opts.GPU].TotalMemory)
	return nil
}

// admit checks, before any allocation, that need more bytes of device
// memory (a plan's AllocatedBytes) fit beside every generation the daemon
// holds: held + need <= Options.MaxBytes (when set), and need +
// Options.ReserveBytes <= the device's free memory (when the backend
// reports it: sdk.Device.FreeMemory 0 means unknown, and then only the cap
// applies). Nothing is evicted to make room. On success need is counted as
// g's (g.Planned) until g's arenas are allocated. The refusal is a
// *MemoryError; a failing Devices call is returned wrapped. The caller
// holds d.allocMu from admit to the end of its allocations, so that two
// loads or publishes never count the same free memory. A backend may
// reserve slightly more than it is asked (its allocation granularity); the
// check uses the plan's sizes.
func (d *Daemon) admit(ctx context.Context, what string, need uint64, g *generation) error {
	held := d.HeldBytes()
	if limit := d.opts.MaxBytes; limit != 0 && (need > limit || held > limit-need) {
		return &MemoryError{What: what, Need: need, Held: held, MaxBytes: limit}
	}
	devs, err := d.backend.Devices(ctx)
	if err != nil {
		return fmt.Errorf("%s: free memory of GPU %d: %w", what, d.opts.GPU, err)
	}
	if d.opts.GPU >= len(devs) {
		return fmt.Errorf("%s: the backend lists %d devices, GPU %d is not one", what, len(devs), d.opts.GPU)
	}
	return d.reg.Admit(g, need, func(pending uint64) error {
		// Admitted but not yet allocated: not missing from free yet.
		free := devs[d.opts.GPU].FreeMemory
		free -= min(free, pending)
		if devs[d.opts.GPU].FreeMemory != 0 && (need > free || d.opts.ReserveBytes > free-need) {
			return &MemoryError{What: what, Need: need, Held: held, MaxBytes: d.opts.MaxBytes, Free: free, Reserve: d.opts.ReserveBytes, ByFree: true}
		}
		return nil
	})
}
