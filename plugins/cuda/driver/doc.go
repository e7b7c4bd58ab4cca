// Package driver binds the CUDA driver API (libcuda.so.1) at run time with
// dlopen and dlsym, so that the wcache CUDA backend builds on machines with
// no CUDA SDK and no driver, and a missing library or entry point is a clear
// error at Open instead of a crash later.
//
// Every entry point is resolved eagerly by Open (see the symbol table in
// symbols.go). Calls go through small C trampolines (trampolines.c) that
// cast the resolved pointer to the entry point's type. Versioned names are
// requested explicitly (cuMemAlloc_v2, cuIpcOpenMemHandle_v2, …) because
// dlsym does not see cuda.h's #defines. cuDeviceGetUuid_v2 falls back to
// cuDeviceGetUuid when a driver lacks it.
//
// The package does not manage threads: CUDA makes a context current per OS
// thread, so callers must run context-dependent calls (memory, streams,
// copies, IPC) on a goroutine locked with runtime.LockOSThread after
// CtxSetCurrent. Device queries (DeviceGet, DeviceName, DeviceUUID, …) need
// no context.
package driver
