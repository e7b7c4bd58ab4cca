// Command wcache-backend-cuda is the "cuda" wcache backend: NVIDIA GPUs
// through the CUDA driver API, loaded at run time. wcache starts it as a
// plugin; run by hand it only explains that. See docs/cuda-backend.md.
package main

import (
	"os"

	"github.com/wcache/wcache/plugins/cuda/cudabackend"
)

func main() {
	os.Exit(cudabackend.Main())
}
