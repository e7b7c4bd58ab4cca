package mock

import "github.com/wcache/wcache/sdk"

// Wrap returns a Backend whose every func calls b, for a test that makes
// one call of a working backend (a Memory, say) fail or wait:
//
//	m := mock.Wrap(mem)
//	m.ExportFunc = func(context.Context, sdk.AllocationID) (sdk.Handle, error) {
//		return sdk.Handle{}, sdk.Errorf(sdk.ErrUnsupported, "injected")
//	}
//
// A b that is sdk.Configurable keeps its options and Configure; one that
// is an sdk.PeerCopier keeps its PeerCopy.
func Wrap(b sdk.Backend) *Backend {
	w := wrap(b)
	if c, ok := b.(sdk.Configurable); ok {
		w.OptionsFunc, w.ConfigureFunc = c.Options, c.Configure
	}
	if pc, ok := b.(sdk.PeerCopier); ok {
		w.PeerCopyFunc = pc.PeerCopy
	}
	return w
}

func wrap(b sdk.Backend) *Backend {
	return &Backend{
		InfoFunc:       b.Info,
		DevicesFunc:    b.Devices,
		DeviceUUIDFunc: b.DeviceUUID,
		AllocateFunc:   b.Allocate,
		LoadFunc:       b.Load,
		ExportFunc:     b.Export,
		ImportFunc:     b.Import,
		ReadFunc:       b.Read,
		DigestFunc:     b.Digest,
		FreeFunc:       b.Free,
	}
}
