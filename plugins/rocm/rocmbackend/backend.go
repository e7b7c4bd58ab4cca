package rocmbackend

import (
	"context"
	"errors"
	"fmt"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/idtable"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/version"
)

// Platform and handle kind the backend reports.
const (
	Name       = "rocm"
	Platform   = "rocm"
	HandleKind = "hip-ipc" // Handle.Data: the 64-byte hipIpcMemHandle_t of an allocation base
)

// Backend is the ROCm sdk.Backend: a table of allocation ids over a
// Runtime's device memory. It is safe for concurrent use.
type Backend struct {
	rt          *Runtime
	ownsRuntime bool
	ids         *idtable.Table[*deviceMemory]
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
	return &Backend{rt: rt, ids: idtable.New[*deviceMemory](errClosed)}
}

// Runtime returns the Runtime the Backend uses.
func (b *Backend) Runtime() *Runtime { return b.rt }

// Close frees every allocation and mapping the Backend's ids hold (memory
// another Backend still references stays until that one lets go), and
// closes the Runtime if New created it. Calls after Close fail with
// ErrUnavailable. Close is idempotent.
func (b *Backend) Close() error {
	mems, first := b.ids.Close()
	if !first {
		return nil
	}
	var errs []error
	if b.rt.FatalError() == nil {
		for _, m := range mems {
			errs = append(errs, b.rt.drop(m))
		}
	}
	if b.ownsRuntime {
		errs = append(errs, b.rt.Close())
	}
	return errors.Join(errs...)
}

// Info describes the backend.
func (b *Backend) Info(ctx context.Context) (sdk.Info, error) { return info(), nil }

func info() sdk.Info {
	return sdk.Info{Name: Name, Version: version.Version, Platform: Platform, HandleKinds: []string{HandleKind}}
}

// DeviceUUID returns the canonical UUID ("GPU-" + 16 hex digits) of the
// device this process sees as ordinal, i.e. after ROCR_VISIBLE_DEVICES,
// HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES, exactly as an engine
// process with the same environment sees it. An unknown ordinal is
// ErrNoSuchDevice.
func (b *Backend) DeviceUUID(ctx context.Context, ordinal int) (string, error) {
	if err := b.live(); err != nil {
		return "", err
	}
	d, err := b.rt.device(ordinal)
	if err != nil {
		return "", err
	}
	return d.uuid, nil
}

// live fails once the Backend or its Runtime is closed.
func (b *Backend) live() error {
	if b.ids.Closed() || b.rt.isClosed() {
		return errClosed
	}
	return nil
}

// hold looks up id and takes a reference for the duration of an
// operation; the caller must call b.release(m) when done. A concurrent
// Free then only removes the id, and the memory stays until the operation
// ends.
func (b *Backend) hold(id sdk.AllocationID) (*deviceMemory, error) {
	return b.ids.Hold(id, b.rt.acquire)
}

// release drops an operation's reference, logging a failure to free.
func (b *Backend) release(m *deviceMemory) {
	if err := b.rt.drop(m); err != nil {
		b.rt.log.Error("release device memory", "error", err)
	}
}

// Free drops the id. The allocation is freed (hipFree), or the IPC
// mapping closed (hipIpcCloseMemHandle), when no other id and no running
// operation references it any more. An unknown or already freed id is
// ErrNoSuchAllocation.
func (b *Backend) Free(ctx context.Context, id sdk.AllocationID) error {
	m, err := b.ids.Remove(id)
	if err != nil {
		return err
	}
	if err := b.rt.drop(m); err != nil {
		return fmt.Errorf("free allocation %d: %w", id, err)
	}
	return nil
}
