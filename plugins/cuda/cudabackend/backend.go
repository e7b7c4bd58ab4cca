package cudabackend

import (
	hclog "github.com/hashicorp/go-hclog"

	"github.com/wcache/wcache/internal/version"
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
	"github.com/wcache/wcache/sdk/names"
)

// Platform and handle kind the backend reports.
const (
	Name       = "cuda"
	Platform   = "cuda"
	HandleKind = names.KindCUDAIPC // the default kind (HandleIPC); Handle.Data: the 64-byte CUipcMemHandle of an allocation base
)

// Backend is the CUDA sdk.Backend: gpucore's table of allocation ids over
// a Runtime's device memory, plus the CUDA device list (Runtime's Info,
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

// Info describes the backend; HandleKinds is the configured kind
// (Config.Handle).
func (rt *Runtime) Info() sdk.Info { return info(rt.cfg.handleKind()) }

func info(kind string) sdk.Info {
	return sdk.Info{Name: Name, Version: version.Version, Platform: Platform, HandleKinds: []string{kind}}
}
