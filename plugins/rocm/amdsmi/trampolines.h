// trampolines.h - the few amdsmi entry points the ROCm backend calls
// (amdsmi.h of ROCm 6.x), called through pointers resolved with dlsym.
#ifndef WCACHE_AMDSMI_TRAMPOLINES_H
#define WCACHE_AMDSMI_TRAMPOLINES_H

#include <stdint.h>

typedef int amdsmi_status_t;

amdsmi_status_t ws_init(void *f, uint64_t flags);
amdsmi_status_t ws_void_call(void *f);
amdsmi_status_t ws_socket_handles(void *f, uint32_t *count, void **out);
amdsmi_status_t ws_processor_handles(void *f, void *socket, uint32_t *count, void **out);
amdsmi_status_t ws_bdf(void *f, void *h, uint64_t *bdf);
amdsmi_status_t ws_uuid(void *f, void *h, unsigned *len, char *out);
amdsmi_status_t ws_memory(void *f, void *h, int type, uint64_t *out);
amdsmi_status_t ws_asic_info(void *f, void *h, void *info);
amdsmi_status_t ws_status_string(void *f, amdsmi_status_t s, const char **out);

#endif
