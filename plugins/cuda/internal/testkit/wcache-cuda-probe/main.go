// Command wcache-cuda-probe loads safetensors files into one CUDA
// allocation with the CUDA backend, prints its cuda-ipc handle as JSON and
// holds the memory until standard input closes. The GPU check
// (test/gpu/gpu-check.sh) uses it. See docs/development.md, "The GPU check".
package main

import (
	"os"

	"github.com/wcache/wcache/plugins/cuda/internal/testkit/probe"
)

func main() {
	os.Exit(probe.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}
