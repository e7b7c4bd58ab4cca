package rocmbackend

import (
	"errors"
	"fmt"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/plugins/rocm/amdsmi"
	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/plugins/rocm/kfd"
	"github.com/wcache/wcache/sdk"
)

// Runtime is the per-process state of the ROCm backend: HIP, the visible
// devices, the device workers and the device memory registry. Several
// Backends may share one Runtime (NewBackend); memory exported by one can
// then be imported by another, which HIP IPC cannot do within one process.
// Create it with OpenRuntime and release it with Close.
type Runtime struct {
	cfg     Config
	log     hclog.Logger
	hip     *hip.Runtime
	smi     gpucore.Monitor[*amdsmi.Library] // none when amdsmi is unavailable
	version int                              // hipDriverGetVersion
	devices []deviceInfo                     // by ordinal, fixed at open

	core *gpucore.Runtime
}

// OpenRuntime loads HIP (cfg.Library, else the default sonames and
// /opt/rocm/lib), resolves every entry point, calls hipInit and lists the
// visible devices; it loads amdsmi and reads the KFD topology too, when it
// can (logging why not otherwise). It creates no device context. It fails
// with an error wrapping sdk.ErrUnavailable when HIP or a symbol is
// missing, HIP cannot initialise, no device is visible, a device's compute
// mode keeps the engines out, or two visible devices report one UUID.
// logger may be nil.
func OpenRuntime(cfg Config, logger hclog.Logger) (*Runtime, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ROCm backend: %w", err)
	}
	h, err := hip.Open(cfg.Library)
	if err != nil {
		return nil, err
	}
	if err := h.Init(); err != nil {
		return nil, fmt.Errorf("%v: %s: %w", sdk.ErrUnavailable, h.Path(), err)
	}
	version, err := h.DriverVersion()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.Path(), err)
	}
	rt := &Runtime{cfg: cfg, log: logger, hip: h, version: version}
	rt.core = gpucore.NewRuntime(driver{rt}, logger)
	if smi, err := amdsmi.Open(cfg.AMDSMILibrary); err != nil {
		logger.Info("amdsmi unavailable; device metadata comes from HIP and the KFD topology", "error", err)
	} else {
		rt.smi.Set(smi)
	}
	nodes, err := kfd.Read(cfg.SysfsRoot)
	if err != nil {
		logger.Info("KFD topology unreadable; gfx targets unknown", "error", err)
	}
	rt.devices, err = enumerate(h, rt.smi.Get(), nodes)
	if err == nil {
		err = checkDevices(rt.devices)
	}
	if err != nil {
		rt.smi.Close()
		return nil, fmt.Errorf("%s: %w", h.Path(), err)
	}
	logger.Info("HIP runtime loaded", "library", h.Path(), "driver_version", version, "amdsmi", rt.HasAMDSMI(),
		"kfd_nodes", len(nodes), "devices", len(rt.devices), "staging_bytes", cfg.Staging.Bytes,
		"staging_buffers", cfg.Staging.Buffers, "direct_io", cfg.Staging.DirectIO)
	for _, d := range rt.devices {
		logger.Debug("device", "ordinal", d.ordinal, "uuid", d.uuid, "name", d.name, "pci_bus_id", d.pciBusID,
			"gfx", d.gfx, "amdsmi_join", d.smiJoin, "kfd_join", d.kfdJoin)
	}
	return rt, nil
}

// Fatal is closed when a HIP call returned a fatal error (see
// hip.Code.Fatal): the process must exit; FatalError says why.
func (rt *Runtime) Fatal() <-chan struct{} { return rt.hip.FatalDone() }

// FatalError returns the fatal error that closed Fatal, or nil.
func (rt *Runtime) FatalError() error {
	if e := rt.hip.Fatal(); e != nil {
		return e
	}
	return nil
}

// DriverVersion returns hipDriverGetVersion.
func (rt *Runtime) DriverVersion() int { return rt.version }

// HasAMDSMI reports whether amdsmi is loaded.
func (rt *Runtime) HasAMDSMI() bool { return rt.smi.Get() != nil }

// Close stops running Loads (they fail with ErrUnavailable) and waits for
// them, frees every allocation and mapping still held, stops the device
// workers (freeing their staging buffers and streams) and shuts amdsmi
// down. After a fatal error it releases nothing on the device: every call
// would fail, and the process exit frees it all. Close is idempotent.
func (rt *Runtime) Close() error {
	return errors.Join(rt.core.Close(), rt.smi.Close())
}
