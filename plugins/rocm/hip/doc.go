// Package hip binds the HIP runtime (libamdhip64) at run time, through
// dlopen and C trampolines (plugins/internal/dl), so that the ROCm backend
// builds with no ROCm installed. Only the entry points the backend needs
// are bound, all plain C calls on ints, pointers and the 16- and 64-byte
// structs hipUUID and hipIpcMemHandle_t; hipGetDeviceProperties is
// deliberately not used, since its struct layout changed across ROCm
// majors (the unversioned export fills the pre-6.0 layout).
//
// Thread affinity: HIP's current device is per OS thread (hipSetDevice).
// The caller keeps every call for a device on a thread where that device
// is current (the backend's device workers and fill readers).
//
// A Runtime is never closed: unloading HIP while its threads run is
// unsafe, and the process holds it for its whole life.
package hip
