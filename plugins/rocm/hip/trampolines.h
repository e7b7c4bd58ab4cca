// trampolines.h - the minimal HIP runtime ABI the wcache ROCm backend uses,
// declared here so that no ROCm SDK is needed at build time (LP64:
// hipDevice_t is int, device pointers are void*, passed as uintptr_t), and
// the C trampolines that call the entry points through pointers resolved
// with dlsym when the library is opened; none is NULL when one runs.
#ifndef WCACHE_HIP_TRAMPOLINES_H
#define WCACHE_HIP_TRAMPOLINES_H

#include <stddef.h>
#include <stdint.h>

typedef int hipError_t;

hipError_t wh_uint_call(void *f, unsigned v);
hipError_t wh_int_call(void *f, int v);
hipError_t wh_int_out(void *f, int *out);
hipError_t wh_void_call(void *f);
hipError_t wh_device_get(void *f, int *d, int ordinal);
hipError_t wh_device_get_uuid(void *f, unsigned char *out16, int d);
hipError_t wh_device_string(void *f, char *s, int len, int d);
hipError_t wh_device_total_mem(void *f, size_t *bytes, int d);
hipError_t wh_device_get_attribute(void *f, int *v, int attr, int d);
hipError_t wh_mem_get_info(void *f, size_t *free_bytes, size_t *total_bytes);
hipError_t wh_malloc(void *f, uintptr_t *p, size_t n);
hipError_t wh_ptr_call(void *f, uintptr_t p);
hipError_t wh_mem_get_address_range(void *f, uintptr_t *base, size_t *size, uintptr_t p);
hipError_t wh_host_malloc(void *f, void **p, size_t n, unsigned flags);
hipError_t wh_create_flags(void *f, void **out, unsigned flags);
hipError_t wh_event_record(void *f, void *e, void *s);
hipError_t wh_memcpy_htod_async(void *f, uintptr_t dst, void *src, size_t n, void *s);
hipError_t wh_memcpy_dtoh(void *f, void *dst, uintptr_t src, size_t n);
hipError_t wh_ipc_get_mem_handle(void *f, unsigned char *out64, uintptr_t p);
hipError_t wh_ipc_open_mem_handle(void *f, uintptr_t *p, const unsigned char *in64, unsigned flags);
hipError_t wh_pointer_get_attribute_int(void *f, int *out, int attr, uintptr_t p);
hipError_t wh_device_can_access_peer(void *f, int *can, int d, int peer);
hipError_t wh_memcpy_peer_async(void *f, uintptr_t dst, int dst_dev, uintptr_t src, int src_dev, size_t n, void *s);
hipError_t wh_int_uint_call(void *f, int v, unsigned flags);
const char *wh_error_text(void *f, hipError_t e);

#endif
