package gpucore

import (
	"context"

	"github.com/wcache/wcache/sdk"
)

// Unavailable returns a Backend that reports info (Info works) and fails
// every other call with err, which should wrap sdk.ErrUnavailable. A
// plugin serves it when its vendor library cannot be used, so that the
// host gets the reason ("backend unavailable: cannot load libcuda.so.1: …")
// as a typed error instead of a process that exited.
func Unavailable(info sdk.Info, err error) sdk.Backend { return unavailable{info: info, err: err} }

type unavailable struct {
	info sdk.Info
	err  error
}

func (u unavailable) Info(context.Context) (sdk.Info, error)          { return u.info, nil }
func (u unavailable) Devices(context.Context) ([]sdk.Device, error)   { return nil, u.err }
func (u unavailable) DeviceUUID(context.Context, int) (string, error) { return "", u.err }
func (u unavailable) Allocate(context.Context, int, uint64) (sdk.AllocationID, uint64, error) {
	return 0, 0, u.err
}
func (u unavailable) Load(context.Context, sdk.AllocationID, []sdk.Extent, sdk.ProgressFunc) error {
	return u.err
}
func (u unavailable) Export(context.Context, sdk.AllocationID) (sdk.Handle, error) {
	return sdk.Handle{}, u.err
}
func (u unavailable) Import(context.Context, int, sdk.Handle) (sdk.AllocationID, error) {
	return 0, u.err
}
func (u unavailable) Read(context.Context, sdk.AllocationID, uint64, uint64) ([]byte, error) {
	return nil, u.err
}
func (u unavailable) Digest(context.Context, sdk.AllocationID, []sdk.Range) ([][32]byte, error) {
	return nil, u.err
}
func (u unavailable) Free(context.Context, sdk.AllocationID) error { return u.err }
