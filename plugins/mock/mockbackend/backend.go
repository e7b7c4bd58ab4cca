package mockbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/version"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/mock"
	"github.com/wcache/wcache/sdk/names"
)

// The mock's handle kinds are names.KindPosixShm (Data is the absolute
// path of the allocation file, Size its length; another process of the same
// uid maps it with mmap(PROT_READ, MAP_SHARED)) and names.KindMemfd (the
// default: the allocation is a memfd sealed against shrinking and growing,
// passed as a descriptor, sdk.Handle.File; Data is empty).

// Backend is the mock sdk.Backend: an sdk/mock.Memory (every device a
// capacity counter, every allocation a sealed memfd or a sparse file in a
// private folder, sized with ftruncate, mapped with mmap and filled by
// Load with pwrite) with the plugin's configuration and fault knobs.
// Create it with New and release it with Close.
type Backend struct {
	cfg Config
	dir string
	log hclog.Logger
	mem *mock.Memory
	// exit ends the process for an injected crash; os.Exit outside tests.
	exit func(code int)

	closing   chan struct{} // closed when Close starts; ends load delays
	closeOnce sync.Once
}

var _ sdk.Backend = (*Backend)(nil)

// New checks cfg (a fault device ordinal it does not have is an error),
// prepares the folder (creating it 0700, refusing one that is not
// private), removes files left by dead mock processes and returns a
// backend. logger may be nil.
func New(cfg Config, logger hclog.Logger) (*Backend, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if cfg.Memory == 0 {
		return nil, errors.New("mock backend: device memory must be more than 0 bytes")
	}
	for _, u := range cfg.DeviceUUIDs {
		if err := validateUUID(u); err != nil {
			return nil, fmt.Errorf("mock backend: %w", err)
		}
	}
	for _, o := range cfg.Faults.Devices {
		if o < 0 || o >= len(cfg.DeviceUUIDs) {
			return nil, fmt.Errorf("mock backend: fault device ordinal %d: the backend has %d devices", o, len(cfg.DeviceUUIDs))
		}
	}
	switch cfg.Handle {
	case "":
		cfg.Handle = names.KindMemfd
	case names.KindMemfd, names.KindPosixShm:
	default:
		return nil, fmt.Errorf("mock backend: handle kind %q: want %q or %q", cfg.Handle, names.KindMemfd, names.KindPosixShm)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = DefaultDir()
	}
	if cfg.Handle == names.KindPosixShm {
		if err := ensurePrivateDir(dir); err != nil {
			return nil, fmt.Errorf("mock backend: %w", err)
		}
	}
	// A non-nil list, even an empty one: a mock of no devices is valid.
	uuids := append(make([]string, 0, len(cfg.DeviceUUIDs)), cfg.DeviceUUIDs...)
	mem, err := mock.NewMemory(mock.MemoryOptions{Dir: dir, DeviceUUIDs: uuids, Memory: cfg.Memory,
		Memfd: cfg.Handle == names.KindMemfd, DeviceName: "wcache mock device", Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("mock backend: %w", err)
	}
	logger.Debug("mock backend ready", "handle", cfg.Handle, "dir", dir, "devices", len(cfg.DeviceUUIDs), "memory_per_device", cfg.Memory,
		"fault_devices", cfg.Faults.Devices)
	return &Backend{cfg: cfg, dir: dir, log: logger, mem: mem, exit: os.Exit, closing: make(chan struct{})}, nil
}

// Dir is the folder that holds this backend's allocation files (posix-shm
// handles; with memfd handles nothing is created there).
func (b *Backend) Dir() string { return b.dir }

// HandleKind is the kind Export produces.
func (b *Backend) HandleKind() string { return b.cfg.Handle }

// Info describes the mock backend.
func (b *Backend) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{Name: "mock", Version: version.Version, Platform: "mock", HandleKinds: []string{b.cfg.Handle}}, nil
}

// Devices lists the configured devices with their free memory.
func (b *Backend) Devices(ctx context.Context) ([]sdk.Device, error) { return b.mem.Devices(ctx) }

// DeviceUUID returns the UUID of a configured device.
func (b *Backend) DeviceUUID(ctx context.Context, ordinal int) (string, error) {
	return b.mem.DeviceUUID(ctx, ordinal)
}

// faults returns the knobs that apply to allocations on device ordinal:
// the configured ones, or none when Faults.Devices leaves the device out.
func (b *Backend) faults(ordinal int) Faults {
	if b.cfg.Faults.AppliesTo(ordinal) {
		return b.cfg.Faults
	}
	return NoFaults()
}

// Allocate is sdk/mock.Memory's Allocate (a sparse file or memfd of bytes
// rounded up to the page size, refused with ErrOutOfMemory beyond the
// device's capacity or what the folder can hold) unless EnvFailAllocate
// applies to the device.
func (b *Backend) Allocate(ctx context.Context, ordinal int, bytes uint64) (sdk.AllocationID, uint64, error) {
	if _, err := b.mem.DeviceUUID(ctx, ordinal); err != nil {
		return 0, 0, err
	}
	if bytes == 0 {
		return 0, 0, sdk.Errorf(sdk.ErrInvalidArgument, "allocate 0 bytes")
	}
	if b.faults(ordinal).FailAllocate {
		return 0, 0, sdk.Errorf(sdk.ErrOutOfMemory, "allocate %d bytes on mock device %d: injected by %s", bytes, ordinal, EnvFailAllocate)
	}
	return b.mem.Allocate(ctx, ordinal, bytes)
}

// Export returns the handle of an allocation: posix-shm, its file path and
// size; memfd, a duplicate of its descriptor (the caller's to close). An
// imported posix-shm mapping is ErrInvalidArgument; EnvFailExport fails it
// (untyped).
func (b *Backend) Export(ctx context.Context, id sdk.AllocationID) (sdk.Handle, error) {
	return b.mem.ExportWith(ctx, id, func(ordinal int) error {
		if b.faults(ordinal).FailExport {
			return fmt.Errorf("export allocation %d: injected by %s", id, EnvFailExport)
		}
		return nil
	})
}

// Import maps a posix-shm handle of this backend's folder read-only, or
// adopts a memfd handle (sdk/mock.Memory's Import).
func (b *Backend) Import(ctx context.Context, ordinal int, h sdk.Handle) (sdk.AllocationID, error) {
	return b.mem.Import(ctx, ordinal, h)
}

// Read copies a range of an allocation.
func (b *Backend) Read(ctx context.Context, id sdk.AllocationID, offset, length uint64) ([]byte, error) {
	return b.mem.Read(ctx, id, offset, length)
}

// Digest hashes each range with SHA-256.
func (b *Backend) Digest(ctx context.Context, id sdk.AllocationID, ranges []sdk.Range) ([][32]byte, error) {
	return b.mem.Digest(ctx, id, ranges)
}

// Free unmaps an allocation and deletes its file, or unmaps an imported
// mapping. It waits for calls still using the allocation.
func (b *Backend) Free(ctx context.Context, id sdk.AllocationID) error { return b.mem.Free(ctx, id) }

// Close stops running loads, unmaps every allocation and deletes every
// file this backend created. Later calls fail with ErrUnavailable. Close is
// safe to call more than once and from a signal handler goroutine.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() { close(b.closing) })
	return b.mem.Close()
}
