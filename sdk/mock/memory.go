package mock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// MemoryOptions configure NewMemory.
type MemoryOptions struct {
	// Dir holds the allocation files; created 0700 when missing. Required
	// unless Memfd is set (then it is neither used nor created). Put it on
	// tmpfs (/dev/shm) for speed; any folder works.
	Dir string
	// DeviceUUIDs are the devices, by ordinal. Default (nil): one device,
	// GPU-00000000-0000-4000-8000-000000000000; an empty non-nil list is
	// a backend of no devices.
	DeviceUUIDs []string
	// Memory is each device's capacity in bytes. Default 1 GiB.
	Memory uint64
	// Memfd makes allocations sealed memfds exported as names.KindMemfd
	// descriptor handles (what the mock plugin does by default) instead of
	// files in Dir exported by path.
	Memfd bool
	// DeviceName is the Name Devices reports. Default "sdk/mock memory
	// device".
	DeviceName string
	// Logger receives the removal of files of dead processes. Default:
	// none.
	Logger hclog.Logger
}

// Memory is a working sdk.Backend in process, and the engine of the mock
// plugin (plugins/mock): every device is a capacity counter, every
// allocation a sparse file in a folder (or a sealed memfd) mapped with
// mmap, filled by Load with pwrite through the shared fill pipeline
// (sdk/fill), read by Read and Digest from the mapping, exported as a
// handle that another Memory (in this or another process) on the same
// folder imports read-only. It checks arguments the way the conformance
// suite (sdk/backendtest) demands, so errors carry the sdk kinds. It is
// not a model of any device; for fault injection wrap it with Wrap and
// replace the funcs a test needs to fail, or use LoadWith.
//
// Files of this process are removed by Free and Close; files of
// processes no longer running (procstat.Running) are removed by NewMemory
// on the same folder.
type Memory struct {
	opts  MemoryOptions
	pid   int
	nonce string

	closing   chan struct{} // closed when Close starts; stops running loads
	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex
	closed bool
	nextID sdk.AllocationID
	allocs map[sdk.AllocationID]*allocation
	used   []uint64 // bytes allocated per device
}

var (
	_ sdk.Backend     = (*Memory)(nil)
	_ sdk.StatsLoader = (*Memory)(nil)
)

// errClosed is the error of every call after Close.
func errClosed() error { return sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down") }

// NewMemory creates the folder when missing (file handles only), removes
// allocation files left there by processes that no longer run, and
// returns a backend.
func NewMemory(opts MemoryOptions) (*Memory, error) {
	if opts.Dir == "" && !opts.Memfd {
		return nil, errors.New("mock memory: Dir is required")
	}
	if opts.DeviceUUIDs == nil {
		opts.DeviceUUIDs = []string{"GPU-00000000-0000-4000-8000-000000000000"}
	}
	if opts.Memory == 0 {
		opts.Memory = 1 << 30
	}
	if opts.DeviceName == "" {
		opts.DeviceName = "sdk/mock memory device"
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Dir != "" {
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("mock memory: %w", err)
		}
		opts.Dir = dir
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("mock memory: instance nonce: %w", err)
	}
	m := &Memory{opts: opts, pid: os.Getpid(), nonce: hex.EncodeToString(nonce[:]), nextID: 1,
		closing: make(chan struct{}),
		allocs:  make(map[sdk.AllocationID]*allocation), used: make([]uint64, len(opts.DeviceUUIDs))}
	if !opts.Memfd {
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("mock memory: %w", err)
		}
		removeStaleFiles(opts.Dir, m.pid, opts.Logger)
	}
	return m, nil
}

// Dir is the folder of the allocation files.
func (m *Memory) Dir() string { return m.opts.Dir }

// HandleKind is the kind Export produces: names.KindMemfd or
// names.KindPosixShm.
func (m *Memory) HandleKind() string {
	if m.opts.Memfd {
		return names.KindMemfd
	}
	return names.KindPosixShm
}

// Info names the backend "mock" on platform "mock".
func (m *Memory) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{Name: "mock", Version: "sdk-mock", Platform: "mock", HandleKinds: []string{m.HandleKind()}}, nil
}

// Devices lists the devices with their free memory.
func (m *Memory) Devices(context.Context) ([]sdk.Device, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]sdk.Device, len(m.opts.DeviceUUIDs))
	for i, u := range m.opts.DeviceUUIDs {
		out[i] = sdk.Device{Ordinal: i, UUID: u, Name: m.opts.DeviceName, TotalMemory: m.opts.Memory,
			FreeMemory: m.opts.Memory - m.used[i], Capability: "mock"}
	}
	return out, nil
}

// DeviceUUID returns the UUID of a device.
func (m *Memory) DeviceUUID(_ context.Context, ordinal int) (string, error) {
	if err := m.checkOrdinal(ordinal); err != nil {
		return "", err
	}
	return m.opts.DeviceUUIDs[ordinal], nil
}

func (m *Memory) checkOrdinal(ordinal int) error {
	if ordinal < 0 || ordinal >= len(m.opts.DeviceUUIDs) {
		return sdk.Errorf(sdk.ErrNoSuchDevice, "mock device %d (this backend has %d devices)", ordinal, len(m.opts.DeviceUUIDs))
	}
	return nil
}

// Ordinal returns the device of a live allocation, for a backend built on
// Memory that decides per device (the mock plugin's fault knobs).
func (m *Memory) Ordinal(id sdk.AllocationID) (int, error) {
	a, err := m.lookup(id)
	if err != nil {
		return 0, err
	}
	return a.ordinal, nil
}

// lookup returns a live allocation or ErrNoSuchAllocation.
func (m *Memory) lookup(id sdk.AllocationID) (*allocation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed()
	}
	a, ok := m.allocs[id]
	if !ok {
		return nil, sdk.Errorf(sdk.ErrNoSuchAllocation, "allocation %d", id)
	}
	return a, nil
}

// adopt registers an imported allocation under a new id (it is not
// charged), naming an adopted memfd "memfd:imported-<id>"; once Close
// ran, it releases it and fails with ErrUnavailable.
func (m *Memory) adopt(a *allocation) (sdk.AllocationID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		_ = a.release()
		return 0, errClosed()
	}
	a.id = m.nextID
	m.nextID++
	if a.path == "" {
		a.path = fmt.Sprintf("memfd:imported-%d", a.id)
	}
	m.allocs[a.id] = a
	return a.id, nil
}

// Free unmaps an allocation and deletes its file, or unmaps an imported
// mapping. It waits for calls still using the allocation.
func (m *Memory) Free(_ context.Context, id sdk.AllocationID) error {
	m.mu.Lock()
	a, ok := m.allocs[id]
	if ok {
		delete(m.allocs, id)
		if !a.imported && !a.adopted {
			m.used[a.ordinal] -= a.size
		}
	}
	m.mu.Unlock()
	if !ok {
		return sdk.Errorf(sdk.ErrNoSuchAllocation, "free allocation %d", id)
	}
	if err := a.release(); err != nil {
		return fmt.Errorf("free allocation %d: %w", id, err)
	}
	return nil
}

// untilClosed is ctx, cancelled when Close starts, so that a running Load
// or PeerCopy stops between chunks. Call cancel when done.
func (m *Memory) untilClosed(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-m.closing:
			cancel(errClosed())
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Close stops running loads, unmaps every allocation and deletes every
// file this backend created. Later calls fail with ErrUnavailable. Close is
// safe to call more than once and from a signal handler goroutine.
func (m *Memory) Close() error {
	m.closeOnce.Do(func() {
		close(m.closing)
		m.mu.Lock()
		m.closed = true
		all := m.allocs
		m.allocs = map[sdk.AllocationID]*allocation{}
		m.mu.Unlock()
		var errs []error
		for _, a := range all {
			if err := a.release(); err != nil {
				errs = append(errs, err)
			}
		}
		m.closeErr = errors.Join(errs...)
		m.opts.Logger.Debug("mock memory closed", "released", len(all))
	})
	return m.closeErr
}
