// trampolines.c - see trampolines.h.
#include <string.h>

#include "trampolines.h"

CUresult wc_init(void *f, unsigned flags) { return ((CUresult (*)(unsigned))f)(flags); }

CUresult wc_int_out(void *f, int *out) { return ((CUresult (*)(int *))f)(out); }

CUresult wc_device_get(void *f, CUdevice *d, int ordinal) {
	return ((CUresult (*)(CUdevice *, int))f)(d, ordinal);
}

CUresult wc_device_get_name(void *f, char *name, int len, CUdevice d) {
	return ((CUresult (*)(char *, int, CUdevice))f)(name, len, d);
}

CUresult wc_device_total_mem(void *f, size_t *bytes, CUdevice d) {
	return ((CUresult (*)(size_t *, CUdevice))f)(bytes, d);
}

CUresult wc_device_get_attribute(void *f, int *v, int attr, CUdevice d) {
	return ((CUresult (*)(int *, int, CUdevice))f)(v, attr, d);
}

CUresult wc_device_get_uuid(void *f, unsigned char *out16, CUdevice d) {
	CUuuid u;
	memset(&u, 0, sizeof u);
	CUresult r = ((CUresult (*)(CUuuid *, CUdevice))f)(&u, d);
	memcpy(out16, u.bytes, 16);
	return r;
}

CUresult wc_primary_ctx_retain(void *f, void **c, CUdevice d) {
	return ((CUresult (*)(CUcontext *, CUdevice))f)(c, d);
}

CUresult wc_device_call(void *f, CUdevice d) { return ((CUresult (*)(CUdevice))f)(d); }

CUresult wc_ptr_call(void *f, void *p) { return ((CUresult (*)(void *))f)(p); }

CUresult wc_void_call(void *f) { return ((CUresult (*)(void))f)(); }

CUresult wc_mem_get_info(void *f, size_t *free_bytes, size_t *total_bytes) {
	return ((CUresult (*)(size_t *, size_t *))f)(free_bytes, total_bytes);
}

CUresult wc_mem_alloc(void *f, CUdeviceptr *p, size_t n) {
	return ((CUresult (*)(CUdeviceptr *, size_t))f)(p, n);
}

CUresult wc_dptr_call(void *f, CUdeviceptr p) { return ((CUresult (*)(CUdeviceptr))f)(p); }

CUresult wc_mem_get_address_range(void *f, CUdeviceptr *base, size_t *size, CUdeviceptr p) {
	return ((CUresult (*)(CUdeviceptr *, size_t *, CUdeviceptr))f)(base, size, p);
}

CUresult wc_mem_host_alloc(void *f, void **p, size_t n, unsigned flags) {
	return ((CUresult (*)(void **, size_t, unsigned))f)(p, n, flags);
}

CUresult wc_create_flags(void *f, void **out, unsigned flags) {
	return ((CUresult (*)(void **, unsigned))f)(out, flags);
}

CUresult wc_event_record(void *f, void *e, void *s) {
	return ((CUresult (*)(CUevent, CUstream))f)(e, s);
}

CUresult wc_memcpy_htod_async(void *f, CUdeviceptr dst, const void *src, size_t n, void *s) {
	return ((CUresult (*)(CUdeviceptr, const void *, size_t, CUstream))f)(dst, src, n, s);
}

CUresult wc_memcpy_dtoh(void *f, void *dst, CUdeviceptr src, size_t n) {
	return ((CUresult (*)(void *, CUdeviceptr, size_t))f)(dst, src, n);
}

CUresult wc_ipc_get_mem_handle(void *f, unsigned char *out64, CUdeviceptr p) {
	CUipcMemHandle h;
	memset(&h, 0, sizeof h);
	CUresult r = ((CUresult (*)(CUipcMemHandle *, CUdeviceptr))f)(&h, p);
	memcpy(out64, h.reserved, 64);
	return r;
}

// cuIpcOpenMemHandle_v2 takes the 64-byte handle by value.
CUresult wc_ipc_open_mem_handle(void *f, CUdeviceptr *p, const unsigned char *in64, unsigned flags) {
	CUipcMemHandle h;
	memcpy(h.reserved, in64, 64);
	return ((CUresult (*)(CUdeviceptr *, CUipcMemHandle, unsigned))f)(p, h, flags);
}

CUresult wc_get_error_text(void *f, CUresult e, const char **s) {
	return ((CUresult (*)(CUresult, const char **))f)(e, s);
}

// cuGetProcAddress_v2 (CUDA 12.0+) adds the symbolStatus out-parameter.
CUresult wc_get_proc_address_v2(void *f, const char *name, void **pfn, int version,
                                unsigned long long flags, int *status) {
	return ((CUresult (*)(const char *, void **, int, unsigned long long, int *))f)(name, pfn, version, flags, status);
}

// cuGetProcAddress as exported since CUDA 11.3.
CUresult wc_get_proc_address(void *f, const char *name, void **pfn, int version,
                             unsigned long long flags) {
	return ((CUresult (*)(const char *, void **, int, unsigned long long))f)(name, pfn, version, flags);
}

/* ------------------------------------------------ virtual memory management */

static void wc_prop(CUmemAllocationProp *p, unsigned handle_types, int device) {
	memset(p, 0, sizeof *p);
	p->type = 1;
	p->requestedHandleTypes = handle_types;
	p->location.type = 1;
	p->location.id = device;
}

CUresult wc_mem_create(void *f, CUmemGenericAllocationHandle *h, size_t n, unsigned handle_types, int device) {
	CUmemAllocationProp p;
	wc_prop(&p, handle_types, device);
	return ((CUresult (*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))f)(h, n, &p, 0);
}

CUresult wc_mem_get_granularity(void *f, size_t *g, unsigned handle_types, int device, int option) {
	CUmemAllocationProp p;
	wc_prop(&p, handle_types, device);
	return ((CUresult (*)(size_t *, const CUmemAllocationProp *, int))f)(g, &p, option);
}

/* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1: the shareable handle is an int. */
CUresult wc_mem_export_fd(void *f, int *fd, CUmemGenericAllocationHandle h) {
	return ((CUresult (*)(void *, CUmemGenericAllocationHandle, int, unsigned long long))f)(fd, h, 1, 0);
}

/* The descriptor travels in the pointer argument: (void *)(uintptr_t)fd. */
CUresult wc_mem_import_fd(void *f, CUmemGenericAllocationHandle *h, int fd) {
	return ((CUresult (*)(CUmemGenericAllocationHandle *, void *, int))f)(h, (void *)(unsigned long)fd, 1);
}

CUresult wc_mem_address_reserve(void *f, CUdeviceptr *p, size_t n, size_t align) {
	return ((CUresult (*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))f)(p, n, align, 0, 0);
}

CUresult wc_mem_map(void *f, CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h) {
	return ((CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))f)(p, n, off, h, 0);
}

CUresult wc_mem_set_access(void *f, CUdeviceptr p, size_t n, int device, unsigned flags) {
	CUmemAccessDesc d;
	memset(&d, 0, sizeof d);
	d.location.type = 1;
	d.location.id = device;
	d.flags = flags;
	return ((CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))f)(p, n, &d, 1);
}

CUresult wc_dptr_size_call(void *f, CUdeviceptr p, size_t n) {
	return ((CUresult (*)(CUdeviceptr, size_t))f)(p, n);
}

CUresult wc_mem_release(void *f, CUmemGenericAllocationHandle h) {
	return ((CUresult (*)(CUmemGenericAllocationHandle))f)(h);
}

CUresult wc_pointer_get_attribute_int(void *f, int *out, int attr, CUdeviceptr p) {
	return ((CUresult (*)(void *, int, CUdeviceptr))f)(out, attr, p);
}

CUresult wc_device_can_access_peer(void *f, int *can, CUdevice d, CUdevice peer) {
	return ((CUresult (*)(int *, CUdevice, CUdevice))f)(can, d, peer);
}

CUresult wc_memcpy_peer_async(void *f, CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n, void *s) {
	return ((CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))f)(dst, dst_ctx, src, src_ctx, n, s);
}
