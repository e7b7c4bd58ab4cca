// trampolines.c - see trampolines.h.
#include <string.h>

#include "trampolines.h"

typedef struct { char bytes[16]; } hipUUID;
typedef struct { char reserved[64]; } hipIpcMemHandle_t;

hipError_t wh_uint_call(void *f, unsigned v) { return ((hipError_t (*)(unsigned))f)(v); }

hipError_t wh_int_call(void *f, int v) { return ((hipError_t (*)(int))f)(v); }

hipError_t wh_int_out(void *f, int *out) { return ((hipError_t (*)(int *))f)(out); }

hipError_t wh_void_call(void *f) { return ((hipError_t (*)(void))f)(); }

hipError_t wh_device_get(void *f, int *d, int ordinal) { return ((hipError_t (*)(int *, int))f)(d, ordinal); }

hipError_t wh_device_get_uuid(void *f, unsigned char *out16, int d) {
	hipUUID u;
	memset(&u, 0, sizeof u);
	hipError_t r = ((hipError_t (*)(hipUUID *, int))f)(&u, d);
	memcpy(out16, u.bytes, 16);
	return r;
}

hipError_t wh_device_string(void *f, char *s, int len, int d) {
	return ((hipError_t (*)(char *, int, int))f)(s, len, d);
}

hipError_t wh_device_total_mem(void *f, size_t *bytes, int d) {
	return ((hipError_t (*)(size_t *, int))f)(bytes, d);
}

hipError_t wh_device_get_attribute(void *f, int *v, int attr, int d) {
	return ((hipError_t (*)(int *, int, int))f)(v, attr, d);
}

hipError_t wh_mem_get_info(void *f, size_t *free_bytes, size_t *total_bytes) {
	return ((hipError_t (*)(size_t *, size_t *))f)(free_bytes, total_bytes);
}

hipError_t wh_malloc(void *f, uintptr_t *p, size_t n) {
	void *q = NULL;
	hipError_t r = ((hipError_t (*)(void **, size_t))f)(&q, n);
	*p = (uintptr_t)q;
	return r;
}

hipError_t wh_ptr_call(void *f, uintptr_t p) { return ((hipError_t (*)(void *))f)((void *)p); }

hipError_t wh_mem_get_address_range(void *f, uintptr_t *base, size_t *size, uintptr_t p) {
	void *b = NULL;
	hipError_t r = ((hipError_t (*)(void **, size_t *, void *))f)(&b, size, (void *)p);
	*base = (uintptr_t)b;
	return r;
}

hipError_t wh_host_malloc(void *f, void **p, size_t n, unsigned flags) {
	return ((hipError_t (*)(void **, size_t, unsigned))f)(p, n, flags);
}

hipError_t wh_create_flags(void *f, void **out, unsigned flags) {
	return ((hipError_t (*)(void **, unsigned))f)(out, flags);
}

hipError_t wh_event_record(void *f, void *e, void *s) { return ((hipError_t (*)(void *, void *))f)(e, s); }

hipError_t wh_memcpy_htod_async(void *f, uintptr_t dst, void *src, size_t n, void *s) {
	return ((hipError_t (*)(void *, void *, size_t, void *))f)((void *)dst, src, n, s);
}

hipError_t wh_memcpy_dtoh(void *f, void *dst, uintptr_t src, size_t n) {
	return ((hipError_t (*)(void *, void *, size_t))f)(dst, (void *)src, n);
}

hipError_t wh_ipc_get_mem_handle(void *f, unsigned char *out64, uintptr_t p) {
	hipIpcMemHandle_t h;
	memset(&h, 0, sizeof h);
	hipError_t r = ((hipError_t (*)(hipIpcMemHandle_t *, void *))f)(&h, (void *)p);
	memcpy(out64, h.reserved, 64);
	return r;
}

hipError_t wh_ipc_open_mem_handle(void *f, uintptr_t *p, const unsigned char *in64, unsigned flags) {
	hipIpcMemHandle_t h;
	memcpy(h.reserved, in64, 64);
	void *q = NULL;
	hipError_t r = ((hipError_t (*)(void **, hipIpcMemHandle_t, unsigned))f)(&q, h, flags);
	*p = (uintptr_t)q;
	return r;
}

const char *wh_error_text(void *f, hipError_t e) { return ((const char *(*)(hipError_t))f)(e); }

hipError_t wh_pointer_get_attribute_int(void *f, int *out, int attr, uintptr_t p) {
	return ((hipError_t (*)(void *, int, void *))f)(out, attr, (void *)p);
}

hipError_t wh_device_can_access_peer(void *f, int *can, int d, int peer) {
	return ((hipError_t (*)(int *, int, int))f)(can, d, peer);
}

hipError_t wh_memcpy_peer_async(void *f, uintptr_t dst, int dst_dev, uintptr_t src, int src_dev, size_t n, void *s) {
	return ((hipError_t (*)(void *, int, const void *, int, size_t, void *))f)((void *)dst, dst_dev, (const void *)src, src_dev, n, s);
}

hipError_t wh_int_uint_call(void *f, int v, unsigned flags) { return ((hipError_t (*)(int, unsigned))f)(v, flags); }
