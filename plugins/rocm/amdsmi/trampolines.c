// trampolines.c - see trampolines.h.
#include "trampolines.h"

amdsmi_status_t ws_init(void *f, uint64_t flags) { return ((amdsmi_status_t (*)(uint64_t))f)(flags); }

amdsmi_status_t ws_void_call(void *f) { return ((amdsmi_status_t (*)(void))f)(); }

amdsmi_status_t ws_socket_handles(void *f, uint32_t *count, void **out) {
	return ((amdsmi_status_t (*)(uint32_t *, void **))f)(count, out);
}

amdsmi_status_t ws_processor_handles(void *f, void *socket, uint32_t *count, void **out) {
	return ((amdsmi_status_t (*)(void *, uint32_t *, void **))f)(socket, count, out);
}

amdsmi_status_t ws_bdf(void *f, void *h, uint64_t *bdf) {
	return ((amdsmi_status_t (*)(void *, uint64_t *))f)(h, bdf);
}

amdsmi_status_t ws_uuid(void *f, void *h, unsigned *len, char *out) {
	return ((amdsmi_status_t (*)(void *, unsigned *, char *))f)(h, len, out);
}

amdsmi_status_t ws_memory(void *f, void *h, int type, uint64_t *out) {
	return ((amdsmi_status_t (*)(void *, int, uint64_t *))f)(h, type, out);
}

amdsmi_status_t ws_asic_info(void *f, void *h, void *info) {
	return ((amdsmi_status_t (*)(void *, void *))f)(h, info);
}

amdsmi_status_t ws_status_string(void *f, amdsmi_status_t s, const char **out) {
	return ((amdsmi_status_t (*)(amdsmi_status_t, const char **))f)(s, out);
}
