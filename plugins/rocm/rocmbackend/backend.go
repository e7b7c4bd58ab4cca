package rocmbackend

import (
	"context"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
	"github.com/wcache/wcache/sdk/version"
)

// Platform and handle kind the backend reports.
const (
	Name       = "rocm"
	Platform   = "rocm"
	HandleKind = names.KindHIPIPC // Handle.Data: the 64-byte hipIpcMemHandle_t of an allocation base
)

// Backend is the ROCm sdk.Backend: gpucore's table of allocation ids over
// a Runtime's device memory, plus the ROCm device list. It is safe for
// concurrent use.
type Backend struct {
	gpucore.Vendor[*Runtime]
}

var _ sdk.Backend = (*Backend)(nil)

// New opens a Runtime for cfg (see OpenRuntime) and returns a Backend that
// owns it: Close closes both. logger may be nil.
func New(cfg Config, logger hclog.Logger) (*Backend, error) {
	rt, err := OpenRuntime(cfg, logger)
	if err != nil {
		return nil, err
	}
	return &Backend{gpucore.NewVendor(rt.core.NewBackend(), rt, true)}, nil
}

// NewBackend returns another Backend over rt, with its own allocation ids.
// Closing it frees its allocations but leaves rt open.
func (rt *Runtime) NewBackend() *Backend {
	return &Backend{gpucore.NewVendor(rt.core.NewBackend(), rt, false)}
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
	if err := b.Live(); err != nil {
		return "", err
	}
	d, err := b.Runtime().device(ordinal)
	if err != nil {
		return "", err
	}
	return d.uuid, nil
}
