package cudabackend

import (
	"context"
	"errors"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/version"
)

// Platform and handle kind the backend reports.
const (
	Name       = "cuda"
	Platform   = "cuda"
	HandleKind = "cuda-ipc" // Handle.Data: the 64-byte CUipcMemHandle of an allocation base
)

// Backend is the CUDA sdk.Backend: a table of allocation ids over a
// Runtime's device memory. It is safe for concurrent use.
type Backend struct {
	rt          *Runtime
	ownsRuntime bool

	mu     sync.Mutex
	closed bool
	nextID sdk.AllocationID
	allocs map[sdk.AllocationID]*deviceMemory
}

var _ sdk.Backend = (*Backend)(nil)

// New opens a Runtime for cfg (see OpenRuntime) and returns a Backend that
// owns it: Close closes both. logger may be nil.
func New(cfg Config, logger hclog.Logger) (*Backend, error) {
	rt, err := OpenRuntime(cfg, logger)
	if err != nil {
		return nil, err
	}
	b := rt.NewBackend()
	b.ownsRuntime = true
	return b, nil
}

// NewBackend returns another Backend over rt, with its own allocation ids.
// Closing it frees its allocations but leaves rt open.
func (rt *Runtime) NewBackend() *Backend {
	return &Backend{rt: rt, allocs: map[sdk.AllocationID]*deviceMemory{}}
}

// Runtime returns the Runtime the Backend uses.
func (b *Backend) Runtime() *Runtime { return b.rt }

// Close frees every allocation and mapping the Backend's ids hold (memory
// another Backend still references stays until that one lets go), and
// closes the Runtime if New created it. Calls after Close fail with
// ErrUnavailable. Close is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	mems := make([]*deviceMemory, 0, len(b.allocs))
	for _, m := range b.allocs {
		mems = append(mems, m)
	}
	clear(b.allocs)
	b.mu.Unlock()
	var errs []error
	if b.rt.FatalError() != nil {
		mems = nil // every driver call fails after a sticky error; see Runtime.Close
	}
	for _, m := range mems {
		errs = append(errs, b.rt.drop(m))
	}
	if b.ownsRuntime {
		errs = append(errs, b.rt.Close())
	}
	return errors.Join(errs...)
}

// Info describes the backend.
func (b *Backend) Info(ctx context.Context) (sdk.Info, error) {
	return info(), nil
}

func info() sdk.Info {
	return sdk.Info{Name: Name, Version: version.Version, Platform: Platform, HandleKinds: []string{HandleKind}}
}

// DeviceUUID returns the canonical UUID ("GPU-…" or "MIG-…") of the device
// this process sees as ordinal, i.e. after CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER, exactly as an engine process with the same
// environment sees it. An unknown ordinal is ErrNoSuchDevice.
func (b *Backend) DeviceUUID(ctx context.Context, ordinal int) (string, error) {
	if err := b.live(); err != nil {
		return "", err
	}
	d, err := b.rt.device(ordinal)
	if err != nil {
		return "", err
	}
	return d.canonical, nil
}

// live fails once the Backend or its Runtime is closed.
func (b *Backend) live() error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed || b.rt.isClosed() {
		return errClosed
	}
	return nil
}

// add registers memory under a new id.
func (b *Backend) add(m *deviceMemory) (sdk.AllocationID, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errClosed
	}
	b.nextID++
	b.allocs[b.nextID] = m
	return b.nextID, nil
}

// hold looks up id and takes a reference for the duration of an
// operation; the caller must call b.rt.drop(m) when done. A concurrent
// Free then only removes the id, and the memory stays until the operation
// ends.
func (b *Backend) hold(id sdk.AllocationID) (*deviceMemory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	m, ok := b.allocs[id]
	if !ok {
		return nil, sdk.Errorf(sdk.ErrNoSuchAllocation, "allocation %d", id)
	}
	if !b.rt.acquire(m) {
		return nil, errClosed // only Runtime.Close takes memory from under an id
	}
	return m, nil
}

// release drops an operation's reference, logging a failure to free.
func (b *Backend) release(m *deviceMemory) {
	if err := b.rt.drop(m); err != nil {
		b.rt.log.Error("release device memory", "error", err)
	}
}
