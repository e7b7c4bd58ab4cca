/*
 * fakeamdsmi.c - a fake libamd_smi.so over the device table of fakeamd.h.
 *
 * Implements the amdsmi entry points the wcache ROCm backend binds, with
 * the real library's behaviour where the backend depends on it:
 *  - amdsmi lists every physical GPU, ignoring ROCR_VISIBLE_DEVICES and
 *    HIP_VISIBLE_DEVICES, in its own order: here reversed KFD order, so a
 *    join by index is caught.
 *  - calls before amdsmi_init(AMDSMI_INIT_AMD_GPUS) fail with
 *    AMDSMI_STATUS_NOT_INIT (32); FAKEAMDSMI_INIT_ERROR makes init fail.
 *  - amdsmi_get_gpu_device_uuid returns "GPU-" + the HIP UUID characters
 *    (what amdsmi returns since it was aligned with HIP), or with
 *    FAKEAMDSMI_OLD_UUID=1 a synthesised RFC-4122-looking string that
 *    matches nothing (what older amdsmi returned).
 *  - memory: VRAM total FAKEHIP_MEMORY, used FAKEAMDSMI_VRAM_USED (bytes).
 *  - amdsmi_asic_info_t is written in the ROCm 6.3 layout (market_name
 *    first, 256 bytes).
 * All processors sit in one socket.
 */
#include <stdint.h>

#include "fakeamd.h"

typedef int amdsmi_status_t;
typedef void *amdsmi_processor_handle;
typedef void *amdsmi_socket_handle;

enum { OK = 0, INVAL = 1, NOT_SUPPORTED = 2, NOT_INIT = 32, INSUFFICIENT_SIZE = 41 };

static int g_init;
static int g_n;
static struct fake_phys g_phys[FAKE_MAX_DEVICES];
static char g_socket;

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : def;
}

amdsmi_status_t amdsmi_init(uint64_t flags) {
    if (!(flags & (1u << 1))) return INVAL;
    int fail = env_int("FAKEAMDSMI_INIT_ERROR", 0);
    if (fail) return fail;
    g_n = fake_parse_devices(g_phys);
    if (g_n < 0) return INVAL;
    g_init = 1;
    return OK;
}

amdsmi_status_t amdsmi_shut_down(void) {
    g_init = 0;
    return OK;
}

amdsmi_status_t amdsmi_get_socket_handles(uint32_t *count, amdsmi_socket_handle *out) {
    if (!g_init) return NOT_INIT;
    if (!count) return INVAL;
    if (out && *count >= 1) out[0] = &g_socket;
    if (out && *count < 1) return INSUFFICIENT_SIZE;
    *count = 1;
    return OK;
}

/* handle i is the address of g_phys[n-1-i]: reversed order. */
amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle s, uint32_t *count, amdsmi_processor_handle *out) {
    if (!g_init) return NOT_INIT;
    if (s != &g_socket || !count) return INVAL;
    if (out) {
        if (*count < (uint32_t)g_n) return INSUFFICIENT_SIZE;
        for (int i = 0; i < g_n; i++) out[i] = &g_phys[g_n - 1 - i];
    }
    *count = (uint32_t)g_n;
    return OK;
}

static struct fake_phys *dev(amdsmi_processor_handle h) {
    for (int i = 0; i < g_n; i++)
        if (h == &g_phys[i]) return &g_phys[i];
    return NULL;
}

amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle h, uint64_t *bdf) {
    if (!g_init) return NOT_INIT;
    struct fake_phys *d = dev(h);
    if (!d || !bdf) return INVAL;
    /* function:3, device:5, bus:8, domain:48 */
    *bdf = (uint64_t)d->bus << 8;
    return OK;
}

amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle h, unsigned int *len, char *uuid) {
    if (!g_init) return NOT_INIT;
    struct fake_phys *d = dev(h);
    if (!d || !len || !uuid) return INVAL;
    if (*len < 38) return INSUFFICIENT_SIZE;
    if (env_int("FAKEAMDSMI_OLD_UUID", 0))
        snprintf(uuid, *len, "%08x-0000-1000-8000-%012llx", 0xabcd0000u + (unsigned)d->bus, d->unique_id >> 16);
    else
        snprintf(uuid, *len, "GPU-%s", d->uuid);
    *len = (unsigned)strlen(uuid);
    return OK;
}

amdsmi_status_t amdsmi_get_gpu_memory_total(amdsmi_processor_handle h, int type, uint64_t *total) {
    if (!g_init) return NOT_INIT;
    if (!dev(h) || !total) return INVAL;
    if (type != 0) return NOT_SUPPORTED;
    *total = fake_memory();
    return OK;
}

amdsmi_status_t amdsmi_get_gpu_memory_usage(amdsmi_processor_handle h, int type, uint64_t *used) {
    if (!g_init) return NOT_INIT;
    if (!dev(h) || !used) return INVAL;
    if (type != 0) return NOT_SUPPORTED;
    const char *v = getenv("FAKEAMDSMI_VRAM_USED");
    *used = (v && *v) ? strtoull(v, NULL, 10) : 0;
    return OK;
}

amdsmi_status_t amdsmi_get_gpu_asic_info(amdsmi_processor_handle h, void *info) {
    if (!g_init) return NOT_INIT;
    if (!dev(h) || !info) return INVAL;
    /* ROCm 6.3: char market_name[256]; then ids; 256 + ~200 bytes. */
    memset(info, 0, 512);
    snprintf((char *)info, 256, "AMD Instinct MI300X OAM (fake amdsmi)");
    return OK;
}

amdsmi_status_t amdsmi_status_code_to_string(amdsmi_status_t s, const char **out) {
    if (!out) return INVAL;
    switch (s) {
    case OK: *out = "AMDSMI_STATUS_SUCCESS: Call succeeded"; break;
    case INVAL: *out = "AMDSMI_STATUS_INVAL: Invalid parameters"; break;
    case NOT_INIT: *out = "AMDSMI_STATUS_NOT_INIT: Device not initialized"; break;
    default: *out = "AMDSMI_STATUS_UNKNOWN_ERROR"; break;
    }
    return OK;
}
