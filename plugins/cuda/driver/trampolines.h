// trampolines.h - the C trampolines through which the wcache CUDA backend
// calls the driver entry points it uses (their types: cudaabi.h), by
// pointers resolved with dlsym. Every pointer is resolved once, when the
// library is opened; none is NULL when a trampoline runs.
#ifndef WCACHE_CUDA_TRAMPOLINES_H
#define WCACHE_CUDA_TRAMPOLINES_H

#include <stddef.h>

#include "cudaabi.h"

CUresult wc_init(void *f, unsigned flags);
CUresult wc_int_out(void *f, int *out);
CUresult wc_device_get(void *f, CUdevice *d, int ordinal);
CUresult wc_device_get_name(void *f, char *name, int len, CUdevice d);
CUresult wc_device_total_mem(void *f, size_t *bytes, CUdevice d);
CUresult wc_device_get_attribute(void *f, int *v, int attr, CUdevice d);
CUresult wc_device_get_uuid(void *f, unsigned char *out16, CUdevice d);
CUresult wc_primary_ctx_retain(void *f, void **c, CUdevice d);
CUresult wc_device_call(void *f, CUdevice d);
CUresult wc_ptr_call(void *f, void *p);
CUresult wc_void_call(void *f);
CUresult wc_mem_get_info(void *f, size_t *free_bytes, size_t *total_bytes);
CUresult wc_mem_alloc(void *f, CUdeviceptr *p, size_t n);
CUresult wc_dptr_call(void *f, CUdeviceptr p);
CUresult wc_mem_get_address_range(void *f, CUdeviceptr *base, size_t *size, CUdeviceptr p);
CUresult wc_mem_host_alloc(void *f, void **p, size_t n, unsigned flags);
CUresult wc_create_flags(void *f, void **out, unsigned flags);
CUresult wc_event_record(void *f, void *e, void *s);
CUresult wc_memcpy_htod_async(void *f, CUdeviceptr dst, const void *src, size_t n, void *s);
CUresult wc_memcpy_dtoh(void *f, void *dst, CUdeviceptr src, size_t n);
CUresult wc_ipc_get_mem_handle(void *f, unsigned char *out64, CUdeviceptr p);
CUresult wc_ipc_open_mem_handle(void *f, CUdeviceptr *p, const unsigned char *in64, unsigned flags);
// Virtual memory management. prop_* are the fields of CUmemAllocationProp
// (type, requestedHandleTypes, location {DEVICE, device}); the trampoline
// builds the struct.
CUresult wc_mem_create(void *f, CUmemGenericAllocationHandle *h, size_t n, unsigned handle_types, int device);
CUresult wc_mem_get_granularity(void *f, size_t *g, unsigned handle_types, int device, int option);
CUresult wc_mem_export_fd(void *f, int *fd, CUmemGenericAllocationHandle h);
CUresult wc_mem_import_fd(void *f, CUmemGenericAllocationHandle *h, int fd);
CUresult wc_mem_address_reserve(void *f, CUdeviceptr *p, size_t n, size_t align);
CUresult wc_mem_map(void *f, CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h);
CUresult wc_mem_set_access(void *f, CUdeviceptr p, size_t n, int device, unsigned flags);
CUresult wc_dptr_size_call(void *f, CUdeviceptr p, size_t n);
CUresult wc_mem_release(void *f, CUmemGenericAllocationHandle h);
// Peer copies.
CUresult wc_pointer_get_attribute_int(void *f, int *out, int attr, CUdeviceptr p);
CUresult wc_device_can_access_peer(void *f, int *can, CUdevice d, CUdevice peer);
CUresult wc_memcpy_peer_async(void *f, CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n, void *s);
CUresult wc_get_error_text(void *f, CUresult e, const char **s);
CUresult wc_get_proc_address_v2(void *f, const char *name, void **pfn, int version,
                                unsigned long long flags, int *status);
CUresult wc_get_proc_address(void *f, const char *name, void **pfn, int version,
                             unsigned long long flags);

#endif
