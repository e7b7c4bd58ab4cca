// Package rocmbackend is the wcache device backend for AMD GPUs, run as
// the plugin binary wcache-backend-rocm.
//
// The HIP runtime (libamdhip64) is bound at run time by package hip; amdsmi
// (libamd_smi.so) adds metadata when present and is never required, and
// the KFD topology in sysfs (package kfd) gives the gfx target and, without
// amdsmi, the PCI address join. A process holds one Runtime: HIP, the
// visible devices, one worker thread per device (hipSetDevice once, every
// device call on that thread), the fill lanes of each device (sdk/fill)
// and the registry of device memory, refcounted across the Backends that
// reference it.
//
// See docs/rocm-backend.md for configuration, the UUID mapping, partitions
// and the IPC constraints.
package rocmbackend
