package cudabackend

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/wcache/wcache/plugins/cuda/driver"
	"github.com/wcache/wcache/plugins/internal/gpucore"
)

// defaultMPSPipeDirectory is where nvidia-cuda-mps-control listens unless
// CUDA_MPS_PIPE_DIRECTORY says otherwise.
const defaultMPSPipeDirectory = "/tmp/nvidia-mps"

// ComputeModeError reports a device whose compute mode keeps the backend
// from serving it (see computeModeError). It wraps sdk.ErrUnavailable.
type ComputeModeError = gpucore.ComputeModeError[driver.ComputeMode]

// computeModeError is the error of d's compute mode, Prohibited or
// Exclusive_Process, with the way out.
func computeModeError(d deviceInfo) *ComputeModeError {
	why := fmt.Sprintf("compute mode Exclusive_Process: the context wcache holds to keep the weights "+
		"resident would lock every inference engine out of the GPU (they would fail with CUDA_ERROR_DEVICE_UNAVAILABLE); "+
		"either run the NVIDIA MPS control daemon (nvidia-cuda-mps-control -d; wcache and the engines then share the GPU as MPS "+
		"clients) or set the GPU to Default mode with `nvidia-smi -i %s -c DEFAULT` (see docs/cuda-backend.md)", d.canonical)
	if d.computeMode == driver.ComputeModeProhibited {
		why = fmt.Sprintf("compute mode Prohibited: no process may create a CUDA context on it; "+
			"set it to Default with `nvidia-smi -i %s -c DEFAULT`", d.canonical)
	}
	return &ComputeModeError{Ordinal: d.ordinal, UUID: d.canonical, Mode: d.computeMode, Why: why}
}

// checkComputeModes refuses devices no context of ours may use without
// harming the engines: Prohibited always, Exclusive_Process unless an MPS
// control daemon is running (its pipe directory holds a "control" socket).
// It reads only attributes, so it creates no context.
func checkComputeModes(devs []deviceInfo, getenv func(string) string) error {
	for _, d := range devs {
		switch d.computeMode {
		case driver.ComputeModeProhibited:
			return computeModeError(d)
		case driver.ComputeModeExclusiveProcess:
			if !mpsRunning(getenv) {
				return computeModeError(d)
			}
		}
	}
	return nil
}

// mpsRunning reports whether an MPS control daemon's pipe exists where this
// process's CUDA driver will look for it.
func mpsRunning(getenv func(string) string) bool {
	dir := getenv("CUDA_MPS_PIPE_DIRECTORY")
	if dir == "" {
		dir = defaultMPSPipeDirectory
	}
	_, err := os.Stat(filepath.Join(dir, "control"))
	return err == nil
}
