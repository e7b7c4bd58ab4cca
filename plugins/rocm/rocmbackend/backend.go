package rocmbackend

import (
	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/version"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// Platform and handle kind the backend reports.
const (
	Name       = "rocm"
	Platform   = "rocm"
	HandleKind = names.KindHIPIPC // Handle.Data: the 64-byte hipIpcMemHandle_t of an allocation base
)

// Backend is the ROCm sdk.Backend: gpucore's table of allocation ids over
// a Runtime's device memory, plus the ROCm device list (Runtime's Info,
// Devices and DeviceUUID). It is safe for concurrent use.
type Backend = gpucore.Vendor[*Runtime]

// New opens a Runtime for cfg (see OpenRuntime) and returns a Backend that
// owns it: Close closes both. logger may be nil.
func New(cfg Config, logger hclog.Logger) (*Backend, error) {
	return gpucore.Own(OpenRuntime(cfg, logger))
}

// NewBackend returns another Backend over rt, with its own allocation ids.
// Closing it frees its allocations but leaves rt open.
func (rt *Runtime) NewBackend() *Backend { return gpucore.Share(rt) }

// Core is the vendor-neutral runtime rt owns (gpucore.VendorRuntime).
func (rt *Runtime) Core() *gpucore.Runtime { return rt.core }

// Info describes the backend.
func (rt *Runtime) Info() sdk.Info { return info() }

func info() sdk.Info {
	return sdk.Info{Name: Name, Version: version.Version, Platform: Platform, HandleKinds: []string{HandleKind}}
}
