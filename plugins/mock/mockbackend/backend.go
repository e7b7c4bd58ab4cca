package mockbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
	"github.com/wcache/wcache/sdk/version"
)

// Handle kinds of the mock. HandlePosixShm: Data is the absolute path of
// the allocation file, Size its length; another process of the same uid
// maps it with mmap(PROT_READ, MAP_SHARED). HandleMemfd (the default):
// the allocation is a memfd sealed against shrinking and growing, passed as
// a descriptor (sdk.Handle.File); Data is empty.
const (
	HandlePosixShm = names.KindPosixShm
	HandleMemfd    = sdk.HandleMemfd
	// HandleKind is HandlePosixShm, the kind of earlier versions.
	HandleKind = HandlePosixShm
)

// Backend is the mock sdk.Backend. Every device is a capacity counter;
// every allocation is a sparse file in a private folder, sized with
// ftruncate, mapped with mmap and filled by Load with pwrite. Create it
// with New and release it with Close.
type Backend struct {
	cfg   Config
	dir   string
	log   hclog.Logger
	pid   int
	nonce string
	// exit ends the process for an injected crash; os.Exit outside tests.
	exit func(code int)

	closing   chan struct{} // closed when Close starts; stops running loads
	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex
	closed bool
	nextID sdk.AllocationID
	allocs map[sdk.AllocationID]*allocation
	used   []uint64 // bytes allocated per device
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
		cfg.Handle = HandleMemfd
	case HandleMemfd, HandlePosixShm:
	default:
		return nil, fmt.Errorf("mock backend: handle kind %q: want %q or %q", cfg.Handle, HandleMemfd, HandlePosixShm)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = DefaultDir()
	}
	if cfg.Handle == HandlePosixShm {
		if err := ensurePrivateDir(dir); err != nil {
			return nil, fmt.Errorf("mock backend: %w", err)
		}
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("mock backend: instance nonce: %w", err)
	}
	b := &Backend{
		cfg:     cfg,
		dir:     dir,
		log:     logger,
		pid:     os.Getpid(),
		nonce:   hex.EncodeToString(nonce[:]),
		exit:    os.Exit,
		closing: make(chan struct{}),
		nextID:  1,
		allocs:  make(map[sdk.AllocationID]*allocation),
		used:    make([]uint64, len(cfg.DeviceUUIDs)),
	}
	if cfg.Handle == HandlePosixShm {
		removeStaleFiles(dir, b.pid, logger)
	}
	logger.Debug("mock backend ready", "handle", cfg.Handle, "dir", dir, "devices", len(cfg.DeviceUUIDs), "memory_per_device", cfg.Memory,
		"fault_devices", cfg.Faults.Devices)
	return b, nil
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
func (b *Backend) Devices(context.Context) ([]sdk.Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]sdk.Device, len(b.cfg.DeviceUUIDs))
	for i, u := range b.cfg.DeviceUUIDs {
		out[i] = sdk.Device{
			Ordinal:     i,
			UUID:        u,
			Name:        "wcache mock device",
			TotalMemory: b.cfg.Memory,
			FreeMemory:  b.cfg.Memory - b.used[i],
			Capability:  "mock",
		}
	}
	return out, nil
}

// DeviceUUID returns the UUID of a configured device.
func (b *Backend) DeviceUUID(_ context.Context, ordinal int) (string, error) {
	if err := b.checkOrdinal(ordinal); err != nil {
		return "", err
	}
	return b.cfg.DeviceUUIDs[ordinal], nil
}

func (b *Backend) checkOrdinal(ordinal int) error {
	if ordinal < 0 || ordinal >= len(b.cfg.DeviceUUIDs) {
		return sdk.Errorf(sdk.ErrNoSuchDevice, "mock device %d (this backend has %d devices)", ordinal, len(b.cfg.DeviceUUIDs))
	}
	return nil
}

// faults returns the knobs that apply to allocations on device ordinal:
// the configured ones, or none when Faults.Devices leaves the device out.
func (b *Backend) faults(ordinal int) Faults {
	if b.cfg.Faults.AppliesTo(ordinal) {
		return b.cfg.Faults
	}
	return NoFaults()
}

// lookup returns a live allocation or ErrNoSuchAllocation.
func (b *Backend) lookup(id sdk.AllocationID) (*allocation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, sdk.Errorf(sdk.ErrUnavailable, "mock backend is shutting down")
	}
	a, ok := b.allocs[id]
	if !ok {
		return nil, sdk.Errorf(sdk.ErrNoSuchAllocation, "allocation %d", id)
	}
	return a, nil
}

// Free unmaps an allocation and deletes its file, or unmaps an imported
// mapping. It waits for calls still using the allocation.
func (b *Backend) Free(_ context.Context, id sdk.AllocationID) error {
	b.mu.Lock()
	a, ok := b.allocs[id]
	if ok {
		delete(b.allocs, id)
		if !a.imported && !a.adopted {
			b.used[a.ordinal] -= a.size
		}
	}
	b.mu.Unlock()
	if !ok {
		return sdk.Errorf(sdk.ErrNoSuchAllocation, "free allocation %d", id)
	}
	if err := a.release(); err != nil {
		return fmt.Errorf("free allocation %d: %w", id, err)
	}
	return nil
}

// Close stops running loads, unmaps every allocation and deletes every
// file this backend created. Later calls fail with ErrUnavailable. Close is
// safe to call more than once and from a signal handler goroutine.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		close(b.closing)
		b.mu.Lock()
		b.closed = true
		all := make([]*allocation, 0, len(b.allocs))
		for id, a := range b.allocs {
			all = append(all, a)
			delete(b.allocs, id)
		}
		b.mu.Unlock()
		var errs []error
		for _, a := range all {
			if err := a.release(); err != nil {
				errs = append(errs, err)
			}
		}
		b.closeErr = errors.Join(errs...)
		b.log.Debug("mock backend closed", "released", len(all))
	})
	return b.closeErr
}
