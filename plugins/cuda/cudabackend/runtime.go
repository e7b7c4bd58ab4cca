package cudabackend

import (
	"errors"
	"fmt"
	"os"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/cuda/nvmlinfo"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
)

// Runtime is the per-process state of the CUDA backend: the driver, the
// visible devices, the device workers and the device memory registry.
// Several Backends may share one Runtime (NewBackend); memory exported by
// one can then be imported by another, which legacy CUDA IPC cannot do
// within one process. Create it with OpenRuntime and release it with
// Close.
type Runtime struct {
	cfg     Config
	log     hclog.Logger
	drv     *driver.Driver
	nvml    gpucore.Monitor[*nvmlinfo.Library] // none when NVML is unavailable
	version int                                // cuDriverGetVersion
	devices []deviceInfo                       // by ordinal, fixed at open

	core *gpucore.Runtime // workers, memory registry, IPC cache
	vmm  vmmTable         // VMM mappings by base (cuda-vmm-fd)
}

// OpenRuntime loads the CUDA driver named by cfg.Library, resolves every
// entry point, calls cuInit and enumerates the visible devices; it loads
// NVML too, when it can (logging why not otherwise). It fails with an
// error wrapping sdk.ErrUnavailable when the driver library or a symbol is
// missing, the driver cannot initialise or no device is visible. logger
// may be nil.
func OpenRuntime(cfg Config, logger hclog.Logger) (*Runtime, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("CUDA backend: %w", err)
	}
	drv, err := driver.Open(cfg.Library)
	if err != nil {
		return nil, err
	}
	if err := drv.Init(); err != nil {
		return nil, fmt.Errorf("%v: %s: %w", sdk.ErrUnavailable, drv.Path(), err)
	}
	version, err := drv.Version()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", drv.Path(), err)
	}
	if cfg.handleKind() == HandleVMMFD && !drv.HasVMM() {
		return nil, sdk.Errorf(sdk.ErrUnavailable, "%s: handle kind %s needs the virtual memory management entry points (cuMemCreate …, CUDA 10.2+), which the driver lacks", drv.Path(), HandleVMMFD)
	}
	rt := &Runtime{cfg: cfg, log: logger, drv: drv, version: version, vmm: vmmTable{m: map[gpucore.Ptr]vmmMapping{}}}
	rt.core = gpucore.NewRuntime(cudaDriver{rt}, logger)
	if nv, err := nvmlinfo.Open(cfg.NVMLLibrary); err != nil {
		logger.Info("NVML unavailable; device metadata comes from the CUDA driver", "error", err)
	} else {
		rt.nvml.Set(nv)
	}
	rt.devices, err = enumerate(drv, rt.nvml.Get())
	if err == nil {
		err = checkComputeModes(rt.devices, os.Getenv)
	}
	if err == nil && cfg.handleKind() == HandleVMMFD {
		err = checkVMMSupport(drv, rt.devices)
	}
	if err != nil {
		rt.nvml.Close()
		return nil, fmt.Errorf("%s: %w", drv.Path(), err)
	}
	if fb := drv.FellBack(); len(fb) > 0 {
		logger.Warn("cuGetProcAddress lacks entry points at the CUDA 12.0 ABI; found them with dlsym", "symbols", fb)
	}
	logger.Info("CUDA driver loaded", "library", drv.Path(), "driver_version", version, "resolver", drv.Resolver(),
		"nvml", rt.HasNVML(), "devices", len(rt.devices), "uuid_v2", drv.HasUUIDV2(),
		"handle", cfg.handleKind(), "staging_bytes", cfg.Staging.Bytes, "staging_buffers", cfg.Staging.Buffers, "direct_io", cfg.Staging.DirectIO)
	for _, d := range rt.devices {
		logger.Debug("device", "ordinal", d.ordinal, "uuid", d.canonical, "name", d.name,
			"pci_bus_id", d.pciBusID, "capability", d.capability, "kind_from", d.kindSource)
	}
	return rt, nil
}

// Fatal is closed when a driver call returned a sticky error (see
// driver.Result.Sticky): the CUDA context is corrupt and the process must
// exit; FatalError says why. Every later call fails with ErrUnavailable.
func (rt *Runtime) Fatal() <-chan struct{} { return rt.drv.StickyDone() }

// FatalError returns the sticky error that closed Fatal, or nil.
func (rt *Runtime) FatalError() error {
	if e := rt.drv.Sticky(); e != nil {
		return e
	}
	return nil
}

// DriverVersion returns cuDriverGetVersion, e.g. 13000.
func (rt *Runtime) DriverVersion() int { return rt.version }

// HasNVML reports whether NVML is loaded.
func (rt *Runtime) HasNVML() bool { return rt.nvml.Get() != nil }

// Close stops running Loads (they fail with ErrUnavailable) and waits for
// them, frees every allocation and mapping still held, stops the device
// workers (releasing their staging buffers and primary contexts) and shuts
// NVML down. After a sticky error (see Fatal) it releases nothing on the
// device, since every call would fail and the process exit frees it all.
// Backends sharing the Runtime fail with ErrUnavailable afterwards. Close
// is idempotent.
func (rt *Runtime) Close() error {
	return errors.Join(rt.core.Close(), rt.nvml.Close())
}
