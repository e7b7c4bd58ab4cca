package cudabackend

import (
	"github.com/wcache/wcache/plugins/internal/gpucore"
	"github.com/wcache/wcache/sdk"
)

// Unavailable returns a Backend that reports itself (Info works) and fails
// every other call with err, which should wrap sdk.ErrUnavailable. The
// plugin serves it when the driver cannot be opened, so that the host gets the
// reason as a typed error instead of a process that exited.
// Its Info reports the default handle kind.
func Unavailable(err error) sdk.Backend { return gpucore.Unavailable(info(HandleKind), err) }
