// Command wcache-backend-rocm is the "rocm" wcache backend: AMD GPUs
// through the HIP runtime, loaded at run time. wcache starts it as a
// plugin; run by hand it only explains that. See docs/rocm-backend.md.
package main

import (
	"os"

	"github.com/wcache/wcache/plugins/rocm/rocmbackend"
)

func main() {
	os.Exit(rocmbackend.Main())
}
