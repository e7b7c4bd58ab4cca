/*
 * fakenvml.c - a fake libnvidia-ml.so.1 for CI machines without a GPU.
 *
 * Build: gcc -shared -fPIC -O1 -I../fakecuda -o libnvidia-ml.so.1 fakenvml.c
 *
 * It implements the few NVML entry points the wcache CUDA backend calls
 * through github.com/NVIDIA/go-nvml, over the physical device table of
 * fakeconfig.h (FAKECUDA_DEVICES, FAKECUDA_MEMORY). Like real NVML it
 * ignores CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, so a backend that
 * joined NVML and CUDA by index instead of by UUID gets the wrong names.
 *
 * Each configured device i is a handle named "Fake NVML GPU <i>" (whole
 * GPU) or "Fake NVML MIG <i>" (a MIG entry; its parent GPU, with the
 * inverted UUID, is a second handle named "Fake NVML GPU <i> (MIG parent)").
 * PCI info and compute capability are NOT_SUPPORTED on MIG handles, as on
 * real MIG devices; the parent answers. Free memory = total - 3 MiB.
 */
#include <stdio.h>
#include <string.h>

#include "fakeconfig.h"

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_UNKNOWN = 999,
};

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

struct fake_nvml_dev {
    char uuid[48]; /* "GPU-…" or "MIG-…" */
    char name[96];
    int mig;
    int bus;
    struct fake_nvml_dev *parent;
};

typedef struct fake_nvml_dev *nvmlDevice_t;

static struct fake_nvml_dev g_devs[2 * FAKE_MAX_DEVICES];
static int g_ndevs;
static int g_init;
static unsigned long long g_mem;

nvmlReturn_t nvmlInit_v2(void) {
    if (g_init++) return NVML_SUCCESS;
    struct fake_phys phys[FAKE_MAX_DEVICES];
    int n = fake_parse_devices(phys);
    if (n < 0) {
        g_init = 0;
        return NVML_ERROR_UNKNOWN;
    }
    g_mem = fake_memory();
    g_ndevs = 0;
    for (int i = 0; i < n; i++) {
        char hex[37];
        struct fake_nvml_dev *d = &g_devs[g_ndevs++];
        memset(d, 0, sizeof *d);
        d->bus = phys[i].bus;
        d->mig = phys[i].mig;
        fake_uuid_hex(phys[i].uuid, hex);
        snprintf(d->uuid, sizeof d->uuid, "%s%s", d->mig ? "MIG-" : "GPU-", hex);
        snprintf(d->name, sizeof d->name, "Fake NVML %s %d", d->mig ? "MIG" : "GPU", i);
        if (d->mig) {
            struct fake_nvml_dev *p = &g_devs[g_ndevs++];
            memset(p, 0, sizeof *p);
            p->bus = phys[i].bus;
            fake_uuid_hex(phys[i].parent, hex);
            snprintf(p->uuid, sizeof p->uuid, "GPU-%s", hex);
            snprintf(p->name, sizeof p->name, "Fake NVML GPU %d (MIG parent)", i);
            d->parent = p;
        }
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlShutdown(void) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    g_init--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    }
    return "Unknown Error";
}

static nvmlReturn_t check(nvmlDevice_t d) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (d < &g_devs[0] || d >= &g_devs[g_ndevs]) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *out) {
    if (!g_init) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !out) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g_ndevs; i++) {
        if (strcasecmp(g_devs[i].uuid, uuid) == 0) {
            *out = &g_devs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len) {
    FAKE_CHECK_DEVICE(check, d, !buf || len < strlen(d->uuid) + 1, NVML_ERROR_INSUFFICIENT_SIZE);
    strcpy(buf, d->uuid);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig) {
    FAKE_CHECK_DEVICE(check, d, !isMig, NVML_ERROR_INVALID_ARGUMENT);
    *isMig = (unsigned int)d->mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent) {
    FAKE_CHECK_DEVICE(check, d, !parent, NVML_ERROR_INVALID_ARGUMENT);
    if (!d->mig) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = d->parent;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    FAKE_CHECK_DEVICE(check, d, !name || len < strlen(d->name) + 1, NVML_ERROR_INSUFFICIENT_SIZE);
    strcpy(name, d->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    FAKE_CHECK_DEVICE(check, d, !m, NVML_ERROR_INVALID_ARGUMENT);
    m->total = g_mem;
    m->free = g_mem > (3u << 20) ? g_mem - (3u << 20) : 0;
    m->used = m->total - m->free;
    return NVML_SUCCESS;
}

static nvmlReturn_t pci_info(nvmlDevice_t d, nvmlPciInfo_t *p) {
    FAKE_CHECK_DEVICE(check, d, !p, NVML_ERROR_INVALID_ARGUMENT);
    if (d->mig) return NVML_ERROR_NOT_SUPPORTED;
    memset(p, 0, sizeof *p);
    p->domain = 0;
    p->bus = (unsigned int)d->bus;
    p->device = 0;
    p->pciDeviceId = 0x233010de;
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", d->bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", d->bus);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_info(d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_info(d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_info(d, p); }

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    FAKE_CHECK_DEVICE(check, d, !major || !minor, NVML_ERROR_INVALID_ARGUMENT);
    if (d->mig) return NVML_ERROR_NOT_SUPPORTED;
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}
