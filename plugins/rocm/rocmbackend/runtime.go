package rocmbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/rocm/amdsmi"
	"github.com/wcache/wcache/plugins/rocm/hip"
	"github.com/wcache/wcache/plugins/rocm/kfd"
	"github.com/wcache/wcache/sdk"
)

// errClosed is returned by calls on a closed Runtime or Backend.
var errClosed = fmt.Errorf("ROCm backend closed: %w", sdk.ErrUnavailable)

// Runtime is the per-process state of the ROCm backend: HIP, the visible
// devices, the device workers and the device memory registry. Several
// Backends may share one Runtime (NewBackend); memory exported by one can
// then be imported by another, which HIP IPC cannot do within one process.
// Create it with OpenRuntime and release it with Close.
type Runtime struct {
	cfg     Config
	log     hclog.Logger
	hip     *hip.Runtime
	smi     *amdsmi.Library // nil when amdsmi is unavailable
	version int             // hipDriverGetVersion
	devices []deviceInfo    // by ordinal, fixed at open

	closing chan struct{} // closed when Close starts; running Loads stop

	mu      sync.Mutex
	closed  bool
	workers map[int]*worker
	mems    map[*deviceMemory]struct{}
	exports map[hip.IPCHandle]*deviceMemory // handles this process gave out
	imports map[importKey]*deviceMemory     // handles this process opened
	// importMu serialises Import so that a handle is opened once per device.
	importMu sync.Mutex
	// startMu serialises starting device workers.
	startMu sync.Mutex
}

type importKey struct {
	handle  hip.IPCHandle
	ordinal int
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
	rt := &Runtime{
		cfg: cfg, log: logger, hip: h, version: version,
		closing: make(chan struct{}),
		workers: map[int]*worker{},
		mems:    map[*deviceMemory]struct{}{},
		exports: map[hip.IPCHandle]*deviceMemory{},
		imports: map[importKey]*deviceMemory{},
	}
	if smi, err := amdsmi.Open(cfg.AMDSMILibrary); err != nil {
		logger.Info("amdsmi unavailable; device metadata comes from HIP and the KFD topology", "error", err)
	} else {
		rt.smi = smi
	}
	nodes, err := kfd.Read(cfg.SysfsRoot)
	if err != nil {
		logger.Info("KFD topology unreadable; gfx targets unknown", "error", err)
	}
	rt.devices, err = enumerate(h, rt.smi, nodes)
	if err == nil {
		err = checkDevices(rt.devices)
	}
	if err != nil {
		rt.closeSMI()
		return nil, fmt.Errorf("%s: %w", h.Path(), err)
	}
	logger.Info("HIP runtime loaded", "library", h.Path(), "driver_version", version, "amdsmi", rt.smi != nil,
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
func (rt *Runtime) HasAMDSMI() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.smi != nil
}

// worker returns the device's worker, starting it on first use.
func (rt *Runtime) worker(ordinal int) (*worker, error) {
	if _, err := rt.device(ordinal); err != nil {
		return nil, err
	}
	if w, err := rt.existingWorker(ordinal); w != nil || err != nil {
		return w, err
	}
	rt.startMu.Lock()
	defer rt.startMu.Unlock()
	if w, err := rt.existingWorker(ordinal); w != nil || err != nil {
		return w, err
	}
	w, err := startWorker(rt, ordinal)
	if err != nil {
		return nil, err
	}
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil, errors.Join(errClosed, w.thread.Stop())
	}
	rt.workers[ordinal] = w
	rt.mu.Unlock()
	return w, nil
}

// existingWorker returns the device's running worker, nil if none, or
// errClosed.
func (rt *Runtime) existingWorker(ordinal int) (*worker, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return nil, errClosed
	}
	return rt.workers[ordinal], nil
}

// runningWorker returns the device's worker if it has started.
func (rt *Runtime) runningWorker(ordinal int) *worker {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.workers[ordinal]
}

// isClosed reports whether Close has started.
func (rt *Runtime) isClosed() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.closed
}

// Close stops running Loads (they fail with ErrUnavailable) and waits for
// them, frees every allocation and mapping still held, stops the device
// workers (freeing their staging buffers and streams) and shuts amdsmi
// down. After a fatal error it releases nothing on the device: every call
// would fail, and the process exit frees it all. Close is idempotent.
func (rt *Runtime) Close() error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	rt.closed = true
	close(rt.closing)
	mems := make([]*deviceMemory, 0, len(rt.mems))
	for m := range rt.mems {
		mems = append(mems, m)
	}
	clear(rt.mems)
	clear(rt.exports)
	clear(rt.imports)
	workers := rt.workers
	rt.workers = map[int]*worker{}
	rt.mu.Unlock()

	if rt.hip.Fatal() != nil {
		return rt.closeSMI()
	}
	for _, w := range workers {
		w.loadMu.Lock()
		defer w.loadMu.Unlock()
	}
	var errs []error
	for _, m := range mems {
		if w := workers[m.ordinal]; w != nil {
			errs = append(errs, m.release(context.Background(), rt.hip, w))
		}
	}
	for _, w := range workers {
		errs = append(errs, w.thread.Stop())
	}
	errs = append(errs, rt.closeSMI())
	return errors.Join(errs...)
}

func (rt *Runtime) closeSMI() error {
	rt.mu.Lock()
	smi := rt.smi
	rt.smi = nil
	rt.mu.Unlock()
	if smi == nil {
		return nil
	}
	return smi.Close()
}
