/*
 * fakecuda.c - a fake libcuda.so.1 for CI machines without a GPU.
 *
 * Build: gcc -shared -fPIC -O1 -o libcuda.so.1 fakecuda.c -lpthread
 * Optional: -DFAKECUDA_OMIT_cuDeviceGetUuid_v2, -DFAKECUDA_OMIT_cuDeviceGetUuid,
 *           -DFAKECUDA_OMIT_cuIpcOpenMemHandle_v2 leave those symbols out, to
 *           test the fallback and the missing-symbol error.
 *
 * It implements exactly the driver entry points the wcache CUDA backend
 * resolves, over host memory, with the behaviour of the real driver where
 * the backend depends on it:
 *
 *  - Devices come from FAKECUDA_DEVICES / FAKECUDA_MEMORY (fakeconfig.h).
 *  - cuInit applies CUDA_DEVICE_ORDER (FASTEST_FIRST, the default, uses the
 *    permutation in FAKECUDA_FASTEST_FIRST, e.g. "2,0,1"; PCI_BUS_ID uses
 *    the configured order) and then CUDA_VISIBLE_DEVICES: entries are
 *    indices into that order, "GPU-<prefix>" (or "MIG-<prefix>" for MIG
 *    instances) matching exactly one device's UUID by prefix. The first
 *    invalid, ambiguous or repeated entry ends the list. No device left ->
 *    CUDA_ERROR_NO_DEVICE. FAKECUDA_INIT_ERROR=<code> makes cuInit fail.
 *  - A primary context is current per OS thread (cuCtxSetCurrent); calls
 *    that need a context fail with CUDA_ERROR_INVALID_CONTEXT without one,
 *    so a goroutine that wandered to another thread is caught.
 *  - Device memory, pinned memory, streams, events, copies, IPC and the
 *    sticky error are the shared fake core's (fakecore.h, with the fake
 *    libamdhip64 of plugins/rocm): device memory is a memfd per
 *    cuMemAlloc_v2, mapped at a fake device address (never a host
 *    pointer). Capacity is accounted per device in 2 MiB granules;
 *    exhaustion is CUDA_ERROR_OUT_OF_MEMORY.
 *  - cuMemcpyHtoDAsync_v2 really is asynchronous: a thread per stream
 *    performs the copy later (after FAKECUDA_COPY_DELAY_US microseconds),
 *    reading the source then, so reusing a staging buffer before its event
 *    completed corrupts the result as on hardware. The source must be
 *    pinned memory from cuMemHostAlloc unless FAKECUDA_ALLOW_PAGEABLE=1.
 *    FAKECUDA_COPY_GBPS=<GB/s> paces the copies of all streams of a device
 *    through one copy engine of that rate (fakeengine.h).
 *    FAKECUDA_PREFAULT=1 makes cuMemAlloc_v2 and cuMemHostAlloc allocate
 *    every page at once, as a GPU's memory and pinned memory are.
 *    cuMemcpyDtoH_v2 does not wait for non-blocking streams.
 *  - cuIpcGetMemHandle writes magic, pid, memfd number, allocation id, size
 *    and a nonce into the 64 bytes. cuIpcOpenMemHandle_v2 in another process
 *    maps /proc/<pid>/fd/<fd> after checking the memfd's name; opening in
 *    the exporting process fails with CUDA_ERROR_INVALID_CONTEXT; repeated
 *    opens are reference counted and return the same address (what the
 *    real driver documents for cuIpcOpenMemHandle; opening in the exporter is
 *    CUDA_ERROR_INVALID_CONTEXT, as ROCm's HIP states explicitly and CUDA's
 *    "invalid device context" reports show).
 *  - A mapping dies with its exporter: reading an imported allocation whose
 *    exporting process has exited fails with CUDA_ERROR_ILLEGAL_ADDRESS (700),
 *    which is sticky, as a kernel faulting on the vanished memory would be.
 *  - The last cuDevicePrimaryCtxRelease_v2 destroys the primary context and
 *    frees every allocation and mapping made in it; a later retain creates a
 *    fresh one.
 *  - Sticky errors stick: once one happened (FAKECUDA_STICKY_FILE names a
 *    file; when it exists and holds a CUresult, the next call that needs a
 *    context fails with that code), every call that needs a context or a
 *    device returns the same code for the rest of the process.
 *  - cuDriverGetVersion reports 13000 (driver 580, CUDA 13), or
 *    FAKECUDA_DRIVER_VERSION.
 *  - cuGetProcAddress_v2 (CUDA 12 signature, with the symbolStatus argument)
 *    and cuGetProcAddress (CUDA 11.3 signature) resolve base names by ABI
 *    version: cuDeviceGetUuid at >= 11040 is cuDeviceGetUuid_v2, below it
 *    v1; every versioned name maps to its _v2 export for versions >= 12000;
 *    asking for a version above the driver's is CUDA_ERROR_INVALID_VALUE
 *    with VERSION_NOT_SUFFICIENT, and at versions >= 13000 cuMemGetInfo
 *    resolves to a stand-in for a changed CUDA 13 ABI that fails with
 *    CUDA_ERROR_NOT_SUPPORTED, so a caller that does not pin 12000 is caught.
 *    -DFAKECUDA_OMIT_cuGetProcAddress leaves both out (dlsym fallback).
 *  - Virtual memory management (cuMemCreate … cuMemRelease) models
 *    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: a physical allocation is a
 *    memfd named "fakecuda-vmm-<phys>-<nonce>" (2 MiB granularity: sizes,
 *    offsets and reservations must be multiples, else INVALID_VALUE);
 *    cuMemExportToShareableHandle returns a dup of it (only when the
 *    allocation was created exportable as POSIX fds);
 *    cuMemImportFromShareableHandle, in this process or another, takes a
 *    dup of a descriptor that names such a memfd (anything else:
 *    INVALID_VALUE). cuMemMap maps it inside a cuMemAddressReserve range;
 *    copies to or from a mapping fail with INVALID_VALUE until
 *    cuMemSetAccess granted READWRITE (reads: READ); FAKECUDA_ACCESS_LOG
 *    names a file each grant is appended to ("cuMemSetAccess flags=3
 *    bytes=4194304 created", "... flags=1 ... imported"). The memory lives while
 *    a handle (until cuMemRelease), a mapping or any exported descriptor
 *    in any process holds it (the device's capacity counts this process's
 *    cuMemCreate handles and their mappings, not descriptors held
 *    elsewhere); cuMemAddressFree of a range with a mapping
 *    left is INVALID_VALUE. VMM memory does not belong to a context (the
 *    last primary-context release leaves it). FAKECUDA_NO_POSIX_FD=1 models
 *    a device that cannot export POSIX descriptors (attribute 103 is 0,
 *    cuMemCreate asking for them NOT_SUPPORTED).
 *  - Peer copies (fakecore.h): cuPointerGetAttribute (DEVICE_ORDINAL only),
 *    cuDeviceCanAccessPeer and cuMemcpyPeerAsync, paced like the other
 *    copies. FAKECUDA_NO_P2P lists pairs of physical devices without a P2P
 *    path ("0-1"): cuDeviceCanAccessPeer answers 0 and cuMemcpyPeerAsync
 *    across one fails with CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (217) instead
 *    of staging as the real driver would, so the backend's own staging is
 *    what runs. FAKECUDA_PEER_ERROR=<code>[@k] fails peer copies (from the
 *    k-th on). -DFAKECUDA_OMIT_PEER leaves the three entry points out.
 *  - CU_DEVICE_ATTRIBUTE_COMPUTE_MODE (20) is FAKECUDA_COMPUTE_MODE (a
 *    single value for every device; default 0, DEFAULT). FAKECUDA_RETAIN_ERROR
 *    makes cuDevicePrimaryCtxRetain fail with that code (a device another
 *    process holds in EXCLUSIVE_PROCESS mode answers 46 on real drivers).
 */#define _GNU_SOURCE
#include <stdint.h>

#include "fakeconfig.h"

#define FC_PREFIX "fakecuda"
#define FC_VA_BASE 0x100000000000ULL /* 16 TiB: never a host pointer here */
#define FC_IPC_MAGIC "FAKECUDA"
#define FC_STICKY_ENV "FAKECUDA_STICKY_FILE"
#define FC_HTOD_NAME "cuMemcpyHtoDAsync_v2"
#define FC_HOSTALLOC_NAME "cuMemHostAlloc"
#define FC_IPC_INTERIOR 0 /* handles of an allocation's base only */
#define FC_IPC_PER_DEVICE 0
#define FC_STREAM_SAME_DEVICE 0
#define FC_ENV(x) "FAKECUDA_" x
#include "fakecore.h"

#include "../../driver/cudaabi.h" /* the ABI's types, as the backend's trampolines see them */

enum {
    CUDA_SUCCESS = FC_SUCCESS,
    CUDA_ERROR_INVALID_VALUE = FC_INVALID_VALUE,
    CUDA_ERROR_OUT_OF_MEMORY = FC_OUT_OF_MEMORY,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = FC_INVALID_CONTEXT,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = FC_PEER_UNSUPPORTED,
    CUDA_ERROR_INVALID_HANDLE = FC_INVALID_HANDLE,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_ILLEGAL_ADDRESS = FC_ILLEGAL_ADDRESS,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

#define GRANULE FC_GRANULE

/* ---------------------------------------------------------------- state */

struct fctx {
    int dev; /* visible ordinal */
    int refs;
};

/* fdev is what CUDA adds to a visible device's memory (fc_devs). */
struct fdev {
    struct fake_phys phys;
    struct fctx ctx;
};

/* fvmm is a physical allocation of cuMemCreate or cuMemImportFromShareableHandle;
 * its cuMemMap mappings are fc_allocs entries whose vmm points at it. */
struct fvmm {
    unsigned long long handle;
    int fd; /* the memfd holding the bytes */
    size_t size;
    int dev;        /* visible ordinal it is accounted on (owned only) */
    int owned;      /* made here by cuMemCreate: counted against the device */
    int exportable; /* requestedHandleTypes had POSIX_FILE_DESCRIPTOR */
    int released;   /* cuMemRelease was called */
    int maps;       /* live cuMemMap mappings */
    struct fvmm *next;
};

struct freserve {
    CUdeviceptr base;
    size_t size;
    struct freserve *next;
};

static int g_init;
static int g_ndev;
static struct fdev g_dev[FAKE_MAX_DEVICES];
static struct fvmm *g_vmms;
static struct freserve *g_reserves;
static __thread struct fctx *t_ctx;

/* ------------------------------------------------------------- helpers */

/* current returns the calling thread's live context, or NULL. */
static struct fctx *current(void) {
    if (t_ctx == NULL || t_ctx->refs <= 0) return NULL;
    return t_ctx;
}

static CUresult need_ctx(struct fctx **out) {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult sticky = fc_sticky();
    if (sticky) return sticky;
    if (t_ctx != NULL && t_ctx->refs <= 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if ((*out = current()) == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}

/* prefault reports FAKECUDA_PREFAULT=1: cuMemAlloc_v2 and cuMemHostAlloc
 * allocate every page at once, as a GPU's memory and pinned memory are
 * there before the first copy (benchmarks of the fill then time the copy
 * engine, not the kernel's page allocation). */
static int prefault(void) { return fc_env_int("FAKECUDA_PREFAULT", 0); }

/* ---------------------------------------------------------- init/device */

static int uuid_prefix_match(const struct fake_phys *d, const char *entry) {
    const char *want = d->mig ? "MIG-" : "GPU-";
    if (strncasecmp(entry, want, 4) != 0) return 0;
    char hex[37];
    fake_uuid_hex(d->uuid, hex);
    size_t n = strlen(entry + 4);
    if (n == 0 || n > 36) return 0;
    return strncasecmp(entry + 4, hex, n) == 0;
}

/* uuid_table is the physical device table visible_uuid searches. */
struct uuid_table {
    struct fake_phys *phys;
    int n;
};

/* visible_uuid resolves a CUDA_VISIBLE_DEVICES entry by UUID prefix; -2
 * when it is ambiguous. */
static int visible_uuid(const char *tok, void *arg) {
    const struct uuid_table *t = arg;
    int pick = -1;
    for (int i = 0; i < t->n; i++) {
        if (uuid_prefix_match(&t->phys[i], tok)) {
            if (pick >= 0) return -2; /* ambiguous */
            pick = i;
        }
    }
    return pick;
}

/* apply_visibility fills g_dev from the physical table, honouring
 * CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES. */
static int apply_visibility(struct fake_phys *phys, int nphys) {
    int order[FAKE_MAX_DEVICES];
    for (int i = 0; i < nphys; i++) order[i] = i;
    const char *ord = getenv("CUDA_DEVICE_ORDER");
    const char *fast = getenv("FAKECUDA_FASTEST_FIRST");
    if (!(ord && strcmp(ord, "PCI_BUS_ID") == 0) && fast && *fast) {
        int k = 0;
        const char *p = fast;
        while (*p && k < nphys) {
            order[k++] = atoi(p);
            const char *c = strchr(p, ',');
            if (!c) break;
            p = c + 1;
        }
        for (int i = 0; i < nphys; i++) {
            if (order[i] < 0 || order[i] >= nphys) {
                fprintf(stderr, "fakecuda: FAKECUDA_FASTEST_FIRST=%s is not a permutation\n", fast);
                return -1;
            }
        }
    }
    int vis[FAKE_MAX_DEVICES];
    int nvis = nphys;
    memcpy(vis, order, sizeof order);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    struct uuid_table table = {phys, nphys};
    if (cvd != NULL) nvis = fc_pick_list(cvd, order, nphys, visible_uuid, &table, vis);
    fc_set_devices(vis, nvis, fake_memory());
    for (int i = 0; i < nvis; i++) {
        memset(&g_dev[i], 0, sizeof g_dev[i]);
        g_dev[i].phys = phys[vis[i]];
        g_dev[i].ctx.dev = i;
    }
    return nvis;
}

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    int fail = fc_env_int("FAKECUDA_INIT_ERROR", 0);
    if (fail) return fail;
    pthread_mutex_lock(&fc_mu);
    CUresult r = CUDA_SUCCESS;
    if (!g_init) {
        struct fake_phys phys[FAKE_MAX_DEVICES];
        int n = fake_parse_devices(phys);
        if (n < 0) r = CUDA_ERROR_UNKNOWN;
        else {
            int nvis = apply_visibility(phys, n);
            if (nvis < 0) r = CUDA_ERROR_UNKNOWN;
            else if (nvis == 0) r = CUDA_ERROR_NO_DEVICE;
            else {
                g_ndev = nvis;
                g_init = 1;
            }
        }
    }
    pthread_mutex_unlock(&fc_mu);
    return r;
}

static int driver_version(void) { return fc_env_int("FAKECUDA_DRIVER_VERSION", 13000); }

CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = driver_version();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n) {
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    *n = g_ndev;
    return CUDA_SUCCESS;
}

static CUresult check_dev(CUdevice d) {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (fs_sticky) return (CUresult)fs_sticky;
    if (d < 0 || d >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(ordinal);
    if (r) return r;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    FAKE_CHECK_DEVICE(check_dev, d, !name || len <= 0, CUDA_ERROR_INVALID_VALUE);
    snprintf(name, (size_t)len, "Fake CUDA Device %d", fc_devs[d].phys_index);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    FAKE_CHECK_DEVICE(check_dev, d, !bytes, CUDA_ERROR_INVALID_VALUE);
    *bytes = (size_t)fc_devs[d].total;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    FAKE_CHECK_DEVICE(check_dev, d, !v, CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case 33: *v = g_dev[d].phys.bus; break; /* PCI_BUS_ID */
    case 34: *v = 0; break;                 /* PCI_DEVICE_ID */
    case 50: *v = 0; break;                 /* PCI_DOMAIN_ID */
    case 75: *v = 9; break;                 /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = 0; break;                 /* COMPUTE_CAPABILITY_MINOR */
    case 41: *v = 1; break;                 /* UNIFIED_ADDRESSING */
    case 20: *v = fc_env_int("FAKECUDA_COMPUTE_MODE", 0); break; /* COMPUTE_MODE */
    case 102: *v = 1; break; /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    case 103: *v = !fc_env_int("FAKECUDA_NO_POSIX_FD", 0); break; /* HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

#if !defined(FAKECUDA_OMIT_cuDeviceGetUuid_v2) || !defined(FAKECUDA_OMIT_cuDeviceGetUuid)
/* device_uuid writes device d's UUID to u: its own (v2) or, with
 * CUDA 12 semantics, its physical GPU's even in MIG mode (v1). */
static CUresult device_uuid(CUuuid *u, CUdevice d, int physical) {
    FAKE_CHECK_DEVICE(check_dev, d, !u, CUDA_ERROR_INVALID_VALUE);
    memcpy(u->bytes, physical ? g_dev[d].phys.parent : g_dev[d].phys.uuid, 16);
    return CUDA_SUCCESS;
}
#endif

#ifndef FAKECUDA_OMIT_cuDeviceGetUuid_v2
CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) { return device_uuid(u, d, 0); }
#endif

#ifndef FAKECUDA_OMIT_cuDeviceGetUuid
CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) { return device_uuid(u, d, 1); }
#endif
/* ------------------------------------------------------------ contexts */

CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) {
    FAKE_CHECK_DEVICE(check_dev, d, !ctx, CUDA_ERROR_INVALID_VALUE);
    int fail = fc_env_int("FAKECUDA_RETAIN_ERROR", 0);
    if (fail) return fail;
    pthread_mutex_lock(&fc_mu);
    g_dev[d].ctx.refs++;
    pthread_mutex_unlock(&fc_mu);
    *ctx = &g_dev[d].ctx;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    CUresult r = check_dev(d);
    if (r) return r;
    struct fc_alloc *dead = NULL;
    pthread_mutex_lock(&fc_mu);
    if (g_dev[d].ctx.refs <= 0) r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--g_dev[d].ctx.refs == 0) {
        /* The last release destroys the context and everything in it. */
        struct fc_alloc **pp = &fc_allocs;
        while (*pp) {
            struct fc_alloc *a = *pp;
            if (a->dev != d || a->vmm) {
                pp = &a->next;
                continue;
            }
            *pp = a->next;
            a->next = dead;
            dead = a;
        }
        fc_devs[d].used = 0;
    }
    pthread_mutex_unlock(&fc_mu);
    fc_unmap_list(dead);
    return r;
}

CUresult cuCtxSetCurrent(void *ctx) {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx != NULL) {
        int ok = 0;
        for (int i = 0; i < g_ndev; i++) ok |= ctx == (void *)&g_dev[i].ctx;
        if (!ok) return CUDA_ERROR_INVALID_CONTEXT;
    }
    t_ctx = ctx;
    return CUDA_SUCCESS;
}
/* -------------------------------------------------------------- memory */

CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!free_b || !total_b) return CUDA_ERROR_INVALID_VALUE;
    fc_mem_info(c->dev, free_b, total_b);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!p || size == 0) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t base;
    if ((r = fc_malloc(c->dev, size, prefault(), &base))) return r;
    *p = base;
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_free(p);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    uintptr_t b;
    if (fc_address_range(p, &b, size)) return CUDA_ERROR_NOT_FOUND;
    if (base) *base = b;
    return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void **p, size_t size, unsigned int flags) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!p || size == 0 || (flags & ~7u)) return CUDA_ERROR_INVALID_VALUE;
    return fc_host_alloc(size, prefault(), p);
}

CUresult cuMemFreeHost(void *p) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_host_free(p);
}

/* ------------------------------------------------------ streams/events */

CUresult cuStreamCreate(void **out, unsigned int flags) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!out || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
    return fc_stream_create(c->dev, fc_env_int("FAKECUDA_COPY_DELAY_US", 0), fc_env_double("FAKECUDA_COPY_GBPS"), out);
}

CUresult cuStreamSynchronize(void *sp) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_stream_sync(sp);
}

CUresult cuStreamDestroy_v2(void *sp) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_stream_destroy(sp);
}

CUresult cuCtxSynchronize(void) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_device_sync(c->dev);
}

CUresult cuEventCreate(void **out, unsigned int flags) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!out || (flags & ~7u)) return CUDA_ERROR_INVALID_VALUE;
    return fc_event_create(out);
}

CUresult cuEventDestroy_v2(void *e) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_event_destroy(e);
}

CUresult cuEventRecord(void *e, void *sp) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_event_record(e, sp);
}

CUresult cuEventSynchronize(void *e) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_event_sync(e);
}

/* ---------------------------------------------------------------- copies */

/* A VMM mapping takes copies only after cuMemSetAccess granted READWRITE
 * (reads: READ); the source must be cuMemHostAlloc memory unless
 * FAKECUDA_ALLOW_PAGEABLE=1. cuMemcpyDtoH_v2 does not wait for
 * non-blocking streams. */
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *sp) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_copy_htod(dst, src, n, sp, fc_env_int("FAKECUDA_ALLOW_PAGEABLE", 0));
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_copy_dtoh(dst, src, n);
}

/* ----------------------------------------------------------- peer copies */

#ifndef FAKECUDA_OMIT_PEER
/* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (9) is the only attribute. */
CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!data || attr != 9) return CUDA_ERROR_INVALID_VALUE;
    return fc_pointer_device(p, (int *)data);
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
    if (!can) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(dev);
    if (r) return r;
    if ((r = check_dev(peer))) return r;
    return fc_can_access_peer(dev, peer, can);
}

/* ctx_device returns the device of a live primary context, or -1. */
static int ctx_device(void *ctx) {
    for (int i = 0; i < g_ndev; i++)
        if (ctx == &g_dev[i].ctx && g_dev[i].ctx.refs > 0) return i;
    return -1;
}

/* cuMemcpyPeerAsync copies between the memory of two contexts' devices
 * (fc_peer_copy): CUDA_ERROR_PEER_ACCESS_UNSUPPORTED across a pair
 * without P2P (FAKECUDA_NO_P2P), where the real driver would stage the
 * copy itself; the backend stages it instead. */
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n, void *sp) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    int dd = ctx_device(dst_ctx), sd = ctx_device(src_ctx);
    if (dd < 0 || sd < 0) return CUDA_ERROR_INVALID_CONTEXT;
    return fc_peer_copy(dst, dd, src, sd, n, sp);
}
#endif

/* ------------------------------------------------------------------- IPC */

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    return fc_ipc_get(h->reserved, p); /* the base of an own cuMemAlloc only */
}

#ifndef FAKECUDA_OMIT_cuIpcOpenMemHandle_v2
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *out, CUipcMemHandle h, unsigned int flags) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!out || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
    struct fc_ipc_wire w;
    if ((r = fc_ipc_decode(h.reserved, &w))) return r;
    if (w.phys_index != fc_devs[c->dev].phys_index && !(flags & 1u)) return CUDA_ERROR_INVALID_DEVICE;
    uintptr_t p;
    if ((r = fc_ipc_open(&w, c->dev, &p))) return r;
    *out = p;
    return CUDA_SUCCESS;
}
#endif

CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    return r ? r : fc_ipc_close(p);
}

/* ------------------------------------------------ virtual memory management */

enum { HANDLE_TYPE_POSIX_FD = 1, VMM_PREFIX_LEN = 21 };
static const char VMM_PREFIX[] = "/memfd:fakecuda-vmm-"; /* as /proc/self/fd shows it */

static int granular(unsigned long long n) { return n % GRANULE == 0; }

/* check_prop validates a CUmemAllocationProp for this fake. */
static CUresult check_prop(const CUmemAllocationProp *p) {
    if (!p || p->type != 1 || p->location.type != 1) return CUDA_ERROR_INVALID_VALUE;
    if (p->location.id < 0 || p->location.id >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
    if (p->requestedHandleTypes & ~(unsigned)HANDLE_TYPE_POSIX_FD) return CUDA_ERROR_NOT_SUPPORTED;
    if ((p->requestedHandleTypes & HANDLE_TYPE_POSIX_FD) && fc_env_int("FAKECUDA_NO_POSIX_FD", 0)) return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

/* find_vmm returns the live (not released) physical allocation h (fc_mu held). */
static struct fvmm *find_vmm(unsigned long long h) {
    for (struct fvmm *v = g_vmms; v; v = v->next) {
        if (v->handle == h && !v->released) return v;
    }
    return NULL;
}

/* vmm_maybe_free frees v once released and unmapped (fc_mu held). */
static void vmm_maybe_free(struct fvmm *v) {
    if (!v->released || v->maps > 0) return;
    for (struct fvmm **pp = &g_vmms; *pp; pp = &(*pp)->next) {
        if (*pp == v) {
            *pp = v->next;
            break;
        }
    }
    if (v->owned) fc_devs[v->dev].used -= v->size;
    close(v->fd);
    free(v);
}

static struct fvmm *new_vmm(int fd, size_t size, int dev, int owned, int exportable) {
    struct fvmm *v = calloc(1, sizeof *v);
    v->handle = 0x7f00000000000000ULL | fc_next_id++;
    v->fd = fd;
    v->size = size;
    v->dev = dev;
    v->owned = owned;
    v->exportable = exportable;
    v->next = g_vmms;
    g_vmms = v;
    return v;
}

CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option) {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!g || (option != 0 && option != 1)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_prop(prop);
    if (r) return r;
    *g = GRANULE;
    return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if ((r = check_prop(prop))) return r;
    if (!h || flags || size == 0 || !granular(size)) return CUDA_ERROR_INVALID_VALUE;
    int dev = prop->location.id;
    pthread_mutex_lock(&fc_mu);
    struct fc_dev *dv = &fc_devs[dev];
    if (size > dv->total - dv->used) {
        pthread_mutex_unlock(&fc_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    char name[96];
    snprintf(name, sizeof name, "%s%d-%llx", VMM_PREFIX + 7, dv->phys_index, (unsigned long long)fc_rand64());
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0) close(fd);
        pthread_mutex_unlock(&fc_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    dv->used += size;
    *h = new_vmm(fd, size, dev, 1, prop->requestedHandleTypes & HANDLE_TYPE_POSIX_FD)->handle;
    pthread_mutex_unlock(&fc_mu);
    return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!out || flags) return CUDA_ERROR_INVALID_VALUE;
    if (type != HANDLE_TYPE_POSIX_FD) return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&fc_mu);
    struct fvmm *v = find_vmm(h);
    int fd = (v && v->exportable) ? fcntl(v->fd, F_DUPFD_CLOEXEC, 0) : -1;
    pthread_mutex_unlock(&fc_mu);
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    if (!v->exportable) return CUDA_ERROR_INVALID_VALUE; /* not created exportable */
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

/* is_vmm_memfd reports whether fd is a fakecuda VMM memfd and its size. */
static int is_vmm_memfd(int fd, size_t *size) {
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    if (strncmp(target, VMM_PREFIX, VMM_PREFIX_LEN - 1) != 0) return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 || !granular((unsigned long long)st.st_size)) return 0;
    *size = (size_t)st.st_size;
    return 1;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    if (type != HANDLE_TYPE_POSIX_FD) return CUDA_ERROR_NOT_SUPPORTED;
    int fd = (int)(intptr_t)os_handle;
    size_t size = 0;
    if (fd < 0 || !is_vmm_memfd(fd, &size)) return CUDA_ERROR_INVALID_VALUE;
    int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mine < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fc_mu);
    *h = new_vmm(mine, size, c->dev, 0, 1)->handle;
    pthread_mutex_unlock(&fc_mu);
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&fc_mu);
    struct fvmm *v = find_vmm(h);
    if (v) {
        v->released = 1;
        vmm_maybe_free(v);
    }
    pthread_mutex_unlock(&fc_mu);
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
    (void)addr; /* a hint only */
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || size == 0 || !granular(size) || flags || (align & (align - 1))) return CUDA_ERROR_INVALID_VALUE;
    struct freserve *res = calloc(1, sizeof *res);
    pthread_mutex_lock(&fc_mu);
    if (align > GRANULE) fc_next_va = (fc_next_va + align - 1) / align * align;
    res->base = fc_next_va;
    res->size = size;
    fc_next_va += size + GRANULE;
    res->next = g_reserves;
    g_reserves = res;
    *p = res->base;
    pthread_mutex_unlock(&fc_mu);
    return CUDA_SUCCESS;
}

/* reserved reports whether [p, p+n) lies inside one reservation (fc_mu held). */
static int reserved(CUdeviceptr p, size_t n) {
    for (struct freserve *r = g_reserves; r; r = r->next) {
        if (p >= r->base && p - r->base <= r->size && n <= r->size - (p - r->base)) return 1;
    }
    return 0;
}

CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&fc_mu);
    struct freserve **pp = &g_reserves;
    while (*pp && !((*pp)->base == p && (*pp)->size == size)) pp = &(*pp)->next;
    struct freserve *res = *pp;
    int mapped = 0;
    for (struct fc_alloc *a = fc_allocs; res && a; a = a->next) {
        if (a->vmm && a->base >= p && a->base - p < size) mapped = 1;
    }
    if (res && !mapped) *pp = res->next;
    pthread_mutex_unlock(&fc_mu);
    if (!res || mapped) return CUDA_ERROR_INVALID_VALUE;
    free(res);
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (flags || size == 0 || !granular(size) || !granular(offset) || !granular(p)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fc_mu);
    struct fvmm *v = find_vmm(h);
    int ok = v && offset <= v->size && size <= v->size - offset && reserved(p, size);
    for (struct fc_alloc *a = fc_allocs; ok && a; a = a->next) {
        if (a->base < p + size && p < a->base + a->size) ok = 0; /* overlaps a mapping */
    }
    unsigned char *m = ok ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, v->fd, (off_t)offset) : MAP_FAILED;
    if (ok && m == MAP_FAILED) {
        pthread_mutex_unlock(&fc_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!ok) {
        pthread_mutex_unlock(&fc_mu);
        return v ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    }
    struct fc_alloc *a = calloc(1, sizeof *a);
    a->base = p;
    a->size = size;
    a->host = m;
    a->fd = -1;
    a->dev = c->dev;
    a->phys = fc_devs[v->dev].phys_index; /* an imported descriptor: the importing device */
    a->owner = getpid();
    a->vmm = v;
    v->maps++;
    FC_LINK(fc_allocs, a);
    pthread_mutex_unlock(&fc_mu);
    return CUDA_SUCCESS;
}

/* covered reports whether the mappings inside [p, p+n) cover it exactly,
 * none crossing its ends (fc_mu held). */
static int covered(CUdeviceptr p, size_t n) {
    size_t sum = 0;
    for (struct fc_alloc *a = fc_allocs; a; a = a->next) {
        if (!a->vmm || a->base + a->size <= p || a->base >= p + n) continue;
        if (a->base < p || a->base + a->size > p + n) return 0;
        sum += a->size;
    }
    return n > 0 && sum == n;
}

/* log_access appends "cuMemSetAccess flags=<f> bytes=<n> created|imported"
 * to the file FAKECUDA_ACCESS_LOG names (unset: nothing), one line per
 * mapping granted, so that a test sees which access an importer asked for
 * (fc_mu held; one O_APPEND write per line). */
static void log_access(unsigned flags, size_t n, int owned) {
    const char *path = getenv("FAKECUDA_ACCESS_LOG");
    if (!path || !*path) return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    char line[128];
    int len = snprintf(line, sizeof line, "cuMemSetAccess flags=%u bytes=%zu %s\n", flags, n, owned ? "created" : "imported");
    if (len > 0 && write(fd, line, (size_t)len) < 0) { /* a test reading the log finds the line missing */ }
    close(fd);
}

CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count) {
    struct fctx *c;
    CUresult r = need_ctx(&c);
    if (r) return r;
    if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
    unsigned flags = 0;
    int mine = 0;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != 1 || (desc[i].flags != 0 && desc[i].flags != 1 && desc[i].flags != 3))
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.id < 0 || desc[i].location.id >= g_ndev) return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].location.id == c->dev) flags = desc[i].flags, mine = 1;
    }
    pthread_mutex_lock(&fc_mu);
    int ok = covered(p, size);
    for (struct fc_alloc *a = fc_allocs; ok && mine && a; a = a->next) {
        if (a->vmm && a->base >= p && a->base < p + size) {
            a->access = flags;
            log_access(flags, a->size, ((struct fvmm *)a->vmm)->owned);
        }
    }
    pthread_mutex_unlock(&fc_mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    struct fc_alloc *dead = NULL;
    pthread_mutex_lock(&fc_mu);
    if (!covered(p, size)) {
        pthread_mutex_unlock(&fc_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct fc_alloc **pp = &fc_allocs;
    while (*pp) {
        struct fc_alloc *a = *pp;
        if (!a->vmm || a->base < p || a->base >= p + size) {
            pp = &a->next;
            continue;
        }
        *pp = a->next;
        a->next = dead;
        dead = a;
    }
    while (dead) {
        struct fc_alloc *a = dead;
        dead = a->next;
        munmap(a->host, a->size);
        ((struct fvmm *)a->vmm)->maps--;
        vmm_maybe_free(a->vmm);
        free(a);
    }
    pthread_mutex_unlock(&fc_mu);
    return CUDA_SUCCESS;
}
/* ----------------------------------------------------------------- errors */

static const struct fc_error g_errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "CUDA driver version is insufficient for CUDA runtime version"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported across the given devices"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

CUresult cuGetErrorName(CUresult e, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    const struct fc_error *row = fc_error_find(g_errors, sizeof g_errors / sizeof g_errors[0], e);
    *s = row ? row->name : NULL;
    return row ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    const struct fc_error *row = fc_error_find(g_errors, sizeof g_errors / sizeof g_errors[0], e);
    *s = row ? row->desc : NULL;
    return row ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------- entry points */

#ifndef FAKECUDA_OMIT_cuGetProcAddress
/* cuMemGetInfo_v13 stands in for an entry point whose ABI changed in CUDA
 * 13: a caller that asks for version >= 13000 gets it and fails. */
static CUresult cuMemGetInfo_v13(size_t *free_b, size_t *total_b) {
    (void)free_b;
    (void)total_b;
    return CUDA_ERROR_NOT_SUPPORTED;
}

struct proc_entry {
    const char *name;
    int version; /* the lowest ABI version this entry serves */
    void *fn;
};

#define PROC(n, v, f) {n, v, (void *)f}
static const struct proc_entry g_procs[] = {
    PROC("cuInit", 2000, cuInit),
    PROC("cuDriverGetVersion", 2020, cuDriverGetVersion),
    PROC("cuDeviceGetCount", 2000, cuDeviceGetCount),
    PROC("cuDeviceGet", 2000, cuDeviceGet),
    PROC("cuDeviceGetName", 2000, cuDeviceGetName),
    PROC("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    PROC("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
#ifndef FAKECUDA_OMIT_cuDeviceGetUuid
    PROC("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
#endif
#ifndef FAKECUDA_OMIT_cuDeviceGetUuid_v2
    PROC("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
#endif
    PROC("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    PROC("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    PROC("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    PROC("cuCtxSynchronize", 2000, cuCtxSynchronize),
    PROC("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    PROC("cuMemGetInfo", 13000, cuMemGetInfo_v13),
    PROC("cuMemAlloc", 3020, cuMemAlloc_v2),
    PROC("cuMemFree", 3020, cuMemFree_v2),
    PROC("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    PROC("cuMemHostAlloc", 2020, cuMemHostAlloc),
    PROC("cuMemFreeHost", 2000, cuMemFreeHost),
    PROC("cuStreamCreate", 2000, cuStreamCreate),
    PROC("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    PROC("cuStreamSynchronize", 2000, cuStreamSynchronize),
    PROC("cuEventCreate", 2000, cuEventCreate),
    PROC("cuEventDestroy", 4000, cuEventDestroy_v2),
    PROC("cuEventRecord", 2000, cuEventRecord),
    PROC("cuEventSynchronize", 2000, cuEventSynchronize),
    PROC("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    PROC("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
#ifndef FAKECUDA_OMIT_PEER
    PROC("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    PROC("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    PROC("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync),
#endif
    PROC("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
#ifndef FAKECUDA_OMIT_cuIpcOpenMemHandle_v2
    PROC("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
#endif
    PROC("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    PROC("cuGetErrorName", 6000, cuGetErrorName),
    PROC("cuGetErrorString", 6000, cuGetErrorString),
    PROC("cuMemCreate", 10020, cuMemCreate),
    PROC("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    PROC("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    PROC("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    PROC("cuMemAddressReserve", 10020, cuMemAddressReserve),
    PROC("cuMemMap", 10020, cuMemMap),
    PROC("cuMemSetAccess", 10020, cuMemSetAccess),
    PROC("cuMemUnmap", 10020, cuMemUnmap),
    PROC("cuMemAddressFree", 10020, cuMemAddressFree),
    PROC("cuMemRelease", 10020, cuMemRelease),
};
#undef PROC

enum { PROC_SUCCESS = 0, PROC_SYMBOL_NOT_FOUND = 1, PROC_VERSION_NOT_SUFFICIENT = 2 };

/* proc_lookup returns the newest entry of name whose version <= version. */
static CUresult proc_lookup(const char *name, void **pfn, int version, int *status) {
    if (!name || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (version > driver_version()) {
        *status = PROC_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_INVALID_VALUE;
    }
    const struct proc_entry *best = NULL;
    int found = 0;
    for (size_t i = 0; i < sizeof g_procs / sizeof g_procs[0]; i++) {
        if (strcmp(g_procs[i].name, name) != 0) continue;
        found = 1;
        if (g_procs[i].version <= version && (!best || g_procs[i].version > best->version)) best = &g_procs[i];
    }
    if (!best) {
        *status = found ? PROC_VERSION_NOT_SUFFICIENT : PROC_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = best->fn;
    *status = PROC_SUCCESS;
    return CUDA_SUCCESS;
}

/* CUDA 12.0+: cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus). */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *symbolStatus) {
    if (flags & ~7ULL) return CUDA_ERROR_INVALID_VALUE;
    int status = 0;
    CUresult r = proc_lookup(symbol, pfn, version, &status);
    if (symbolStatus) *symbolStatus = status;
    return r;
}

/* CUDA 11.3: cuGetProcAddress(symbol, pfn, cudaVersion, flags). */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    if (flags & ~7ULL) return CUDA_ERROR_INVALID_VALUE;
    int status = 0;
    return proc_lookup(symbol, pfn, version, &status);
}
#endif
