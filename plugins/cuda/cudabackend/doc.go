// Package cudabackend is the wcache device backend for NVIDIA GPUs, run as
// the plugin binary wcache-backend-cuda.
//
// The CUDA driver (libcuda.so.1) is bound at run time by package driver;
// NVML (libnvidia-ml.so.1, through go-nvml) adds metadata when present and
// is never required. A process holds one Runtime: the driver, the visible
// devices, one worker goroutine per device (locked to its OS thread with
// the device's primary context current, so that every driver call for a
// device runs on that thread) and the registry of device memory, refcounted
// across the Backend instances that reference it. New returns a Backend
// with its own Runtime, which is what the plugin uses.
//
// See docs/cuda-backend.md for configuration, the UUID mapping, the
// staging design and the IPC constraints.
package cudabackend
