package mockbackend

import (
	"os"

	"github.com/wcache/wcache/sdk"
)

// CheckMemfd is sdk.CheckMemfd.
func CheckMemfd(f *os.File, size uint64) error { return sdk.CheckMemfd(f, size) }
