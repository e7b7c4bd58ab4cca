/*
 * fakehip.c - a fake libamdhip64 for machines without an AMD GPU.
 *
 * Build: gcc -shared -fPIC -O1 -I<this dir> -I<plugins/internal/testkit/fakelib/include>
 *        -o libamdhip64.so fakehip.c -lpthread
 * Optional: -DFAKEHIP_OMIT_hipIpcOpenMemHandle leaves that symbol out, to
 * test the missing-symbol error.
 *
 * It implements the HIP entry points the wcache ROCm backend (and the
 * Python client's ctypes path) resolve, over host memory, as strict as the
 * real runtime (ROCm/clr) where wcache relies on it:
 *
 *  - Devices come from FAKEHIP_DEVICES / FAKEHIP_MEMORY (fakeamd.h). At
 *    initialisation (hipInit, or the first call, as HIP initialises
 *    lazily) ROCR_VISIBLE_DEVICES is applied first (indices into the
 *    physical list, or "GPU-<16 hex>" UUIDs), then HIP_VISIBLE_DEVICES, or
 *    CUDA_VISIBLE_DEVICES when that is unset (indices into what ROCR
 *    left). The first invalid or repeated entry ends a list. No device
 *    left -> hipErrorNoDevice (100). FAKEHIP_INIT_ERROR=<code> makes
 *    initialisation fail.
 *  - hipDeviceGetUuid gives the 16 ASCII hex characters of the KFD
 *    unique_id, as ROCm does ("GPU-" + them is what rocminfo prints).
 *  - The current device is per OS thread (hipSetDevice; 0 until set). A
 *    device's primary context is created by the first call that needs one
 *    on it (hipSetDevice, memory, streams); fakehip_contexts() counts them,
 *    and each creation appends the device's ordinal to the file
 *    FAKEHIP_CONTEXT_LOG names, so a test sees that listing devices
 *    created none.
 *  - Device memory, pinned memory, streams, events, copies, IPC and the
 *    sticky error are the shared fake core's (fakecore.h, with the fake
 *    libcuda of plugins/cuda): device memory is a memfd per hipMalloc,
 *    mapped at a fake device address (never a host pointer), accounted in
 *    2 MiB granules; exhaustion is hipErrorOutOfMemory (2).
 *  - hipMemcpyHtoDAsync is asynchronous (fakeengine.h: FAKEHIP_COPY_DELAY_US,
 *    FAKEHIP_COPY_GBPS); its source must be hipHostMalloc memory, and its
 *    stream must belong to the device of the destination, else
 *    hipErrorInvalidValue.
 *  - hipIpcGetMemHandle accepts any pointer into an own hipMalloc (the
 *    handle records the offset, as clr's ihipIpcMemHandle_t does).
 *    hipIpcOpenMemHandle requires flags == hipIpcMemLazyEnablePeerAccess
 *    (1), fails with hipErrorInvalidContext (201) in the exporting process,
 *    with hipErrorInvalidValue for a garbage or stale handle, and is
 *    reference counted: the same handle again returns the same address,
 *    and the mapping goes with the last hipIpcCloseMemHandle.
 *  - Reading an imported allocation whose exporter has exited fails with
 *    hipErrorIllegalAddress (700), which then sticks: as after a real GPU
 *    fault, every later call fails with it. FAKEHIP_STICKY_FILE names a
 *    file; once it exists holding a code, the next call needing a device
 *    latches that code.
 *  - Peer copies (fakecore.h): hipPointerGetAttribute (DEVICE_ORDINAL only),
 *    hipDeviceCanAccessPeer, hipDeviceEnablePeerAccess and
 *    hipMemcpyPeerAsync. FAKEHIP_NO_P2P lists pairs of physical devices
 *    without a P2P path ("0-1"): hipDeviceCanAccessPeer answers 0, and
 *    enabling or copying across one is hipErrorPeerAccessUnsupported (217).
 *    FAKEHIP_PEER_ERROR=<code>[@k] fails peer copies (from the k-th on).
 *    -DFAKEHIP_OMIT_PEER leaves the four entry points out.
 *  - hipDeviceGetAttribute: compute mode (6) is FAKEHIP_COMPUTE_MODE
 *    (default 0), PCI bus (67), device (68), domain (69); others invalid.
 */
#define _GNU_SOURCE
#include <stdint.h>

#include "fakeamd.h"

#define FC_PREFIX "fakehip"
#define FC_VA_BASE 0x200000000000ULL
#define FC_IPC_MAGIC "FAKEHIP1"
#define FC_STICKY_ENV "FAKEHIP_STICKY_FILE"
#define FC_HTOD_NAME "hipMemcpyHtoDAsync"
#define FC_HOSTALLOC_NAME "hipHostMalloc"
#define FC_IPC_INTERIOR 1       /* clr's ihipIpcMemHandle_t records the offset */
#define FC_IPC_PER_DEVICE 1
#define FC_STREAM_SAME_DEVICE 1
#define FC_ENV(x) "FAKEHIP_" x
#include "fakecore.h"

typedef int hipError_t;
typedef struct { char bytes[16]; } hipUUID;
typedef struct { char reserved[64]; } hipIpcMemHandle_t;

enum {
    hipSuccess = FC_SUCCESS,
    hipErrorInvalidValue = FC_INVALID_VALUE,
    hipErrorOutOfMemory = FC_OUT_OF_MEMORY,
    hipErrorNotInitialized = 3,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidContext = FC_INVALID_CONTEXT,
    hipErrorPeerAccessUnsupported = FC_PEER_UNSUPPORTED,
    hipErrorPeerAccessAlreadyEnabled = 704,
    hipErrorInvalidHandle = FC_INVALID_HANDLE,
    hipErrorIllegalAddress = FC_ILLEGAL_ADDRESS,
};

/* fdev is what HIP adds to a visible device's memory (fc_devs). */
struct fdev {
    struct fake_phys phys;
    int has_ctx;
};

static int g_init; /* 0 not yet, 1 ok, <0 -code */
static int g_ndev, g_contexts;
static struct fdev g_dev[FAKE_MAX_DEVICES];
static __thread int t_dev;
static int g_peer_enabled[FAKE_MAX_DEVICES][FAKE_MAX_DEVICES]; /* [dev][peer] */

int fakehip_contexts(void) { return g_contexts; }
int fakehip_opens(void) { return fc_opens; }
int fakehip_closes(void) { return fc_closes; }

/* rocr_uuid resolves a ROCR_VISIBLE_DEVICES entry "GPU-<16 hex>". */
static int rocr_uuid(const char *tok, void *arg) {
    const struct fake_phys *phys = arg;
    int pick = -1;
    if (strncasecmp(tok, "GPU-", 4) == 0)
        for (int i = 0; i < FAKE_MAX_DEVICES && phys[i].uuid[0]; i++)
            if (strcasecmp(tok + 4, phys[i].uuid) == 0) pick = i;
    return pick;
}

static int init_devices(void) {
    struct fake_phys phys[FAKE_MAX_DEVICES];
    memset(phys, 0, sizeof phys);
    int nphys = fake_parse_devices(phys);
    if (nphys < 0) return -hipErrorInvalidValue;
    int all[FAKE_MAX_DEVICES], rocr[FAKE_MAX_DEVICES], vis[FAKE_MAX_DEVICES];
    for (int i = 0; i < nphys; i++) all[i] = i;
    int nrocr = nphys;
    memcpy(rocr, all, sizeof all);
    /* ROCr: indices into the physical list, or full UUIDs. */
    const char *r = getenv("ROCR_VISIBLE_DEVICES");
    if (r) nrocr = fc_pick_list(r, all, nphys, rocr_uuid, phys, rocr);
    /* Then HIP's: indices into what ROCr left. */
    const char *h = getenv("HIP_VISIBLE_DEVICES");
    if (!h) h = getenv("CUDA_VISIBLE_DEVICES");
    int nvis = nrocr;
    memcpy(vis, rocr, sizeof rocr);
    if (h) nvis = fc_pick_list(h, rocr, nrocr, NULL, NULL, vis);
    fc_set_devices(vis, nvis, fake_memory());
    for (int i = 0; i < nvis; i++) {
        memset(&g_dev[i], 0, sizeof g_dev[i]);
        g_dev[i].phys = phys[vis[i]];
    }
    if (nvis == 0) return -hipErrorNoDevice;
    return nvis;
}

/* ensure_init initialises once, as HIP does on its first call. */
static hipError_t ensure_init(void) {
    pthread_mutex_lock(&fc_mu);
    if (g_init == 0) {
        int fail = fc_env_int("FAKEHIP_INIT_ERROR", 0);
        int n = fail ? -fail : init_devices();
        if (n < 0) g_init = n;
        else {
            g_ndev = n;
            g_init = 1;
        }
    }
    int st = g_init;
    pthread_mutex_unlock(&fc_mu);
    return st < 0 ? -st : hipSuccess;
}

static hipError_t check_dev(int d) {
    hipError_t r = ensure_init();
    if (r) return r;
    if ((r = fc_sticky())) return r;
    return (d < 0 || d >= g_ndev) ? hipErrorInvalidDevice : hipSuccess;
}

/* need_dev returns the calling thread's device, creating its context. */
static hipError_t need_dev(int *dev) {
    hipError_t r = check_dev(t_dev);
    if (r) return r;
    pthread_mutex_lock(&fc_mu);
    if (!g_dev[t_dev].has_ctx) {
        g_dev[t_dev].has_ctx = 1;
        g_contexts++;
        const char *log = getenv("FAKEHIP_CONTEXT_LOG");
        FILE *fp = (log && *log) ? fopen(log, "a") : NULL;
        if (fp) {
            fprintf(fp, "%d\n", t_dev);
            fclose(fp);
        }
    }
    pthread_mutex_unlock(&fc_mu);
    *dev = t_dev;
    return hipSuccess;
}

/* ---------------------------------------------------------- init/device */

hipError_t hipInit(unsigned int flags) {
    if (flags != 0) return hipErrorInvalidValue;
    return ensure_init();
}

hipError_t hipDriverGetVersion(int *v) {
    if (!v) return hipErrorInvalidValue;
    *v = fc_env_int("FAKEHIP_DRIVER_VERSION", 60342134);
    return hipSuccess;
}

hipError_t hipGetDeviceCount(int *n) {
    hipError_t r = ensure_init();
    if (r) return r;
    if (!n) return hipErrorInvalidValue;
    *n = g_ndev;
    return hipSuccess;
}

hipError_t hipDeviceGet(int *dev, int ordinal) {
    FAKE_CHECK_DEVICE(check_dev, ordinal, !dev, hipErrorInvalidValue);
    *dev = ordinal;
    return hipSuccess;
}

hipError_t hipDeviceGetUuid(hipUUID *u, int d) {
    FAKE_CHECK_DEVICE(check_dev, d, !u, hipErrorInvalidValue);
    memcpy(u->bytes, g_dev[d].phys.uuid, 16);
    return hipSuccess;
}

hipError_t hipDeviceGetName(char *name, int len, int d) {
    FAKE_CHECK_DEVICE(check_dev, d, !name || len <= 0, hipErrorInvalidValue);
    snprintf(name, (size_t)len, "%s", FAKE_NAME);
    return hipSuccess;
}

hipError_t hipDeviceGetPCIBusId(char *bus, int len, int d) {
    FAKE_CHECK_DEVICE(check_dev, d, !bus || len <= 0, hipErrorInvalidValue);
    snprintf(bus, (size_t)len, "0000:%02x:00.0", g_dev[d].phys.bus);
    return hipSuccess;
}

hipError_t hipDeviceTotalMem(size_t *bytes, int d) {
    FAKE_CHECK_DEVICE(check_dev, d, !bytes, hipErrorInvalidValue);
    *bytes = (size_t)fc_devs[d].total;
    return hipSuccess;
}

hipError_t hipDeviceGetAttribute(int *v, int attr, int d) {
    FAKE_CHECK_DEVICE(check_dev, d, !v, hipErrorInvalidValue);
    switch (attr) {
    case 6: *v = fc_env_int("FAKEHIP_COMPUTE_MODE", 0); return hipSuccess;
    case 67: *v = g_dev[d].phys.bus; return hipSuccess;
    case 68: *v = 0; return hipSuccess;
    case 69: *v = 0; return hipSuccess;
    }
    return hipErrorInvalidValue;
}

hipError_t hipSetDevice(int d) {
    hipError_t r = check_dev(d);
    if (r) return r;
    t_dev = d;
    int dev;
    return need_dev(&dev);
}

hipError_t hipGetDevice(int *d) {
    hipError_t r = ensure_init();
    if (r) return r;
    if (!d) return hipErrorInvalidValue;
    *d = t_dev;
    return hipSuccess;
}

/* -------------------------------------------------------------- memory */

hipError_t hipMemGetInfo(size_t *free_b, size_t *total_b) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!free_b || !total_b) return hipErrorInvalidValue;
    fc_mem_info(d, free_b, total_b);
    return hipSuccess;
}

hipError_t hipMalloc(void **p, size_t size) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!p) return hipErrorInvalidValue;
    if (size == 0) {
        *p = NULL;
        return hipSuccess;
    }
    uintptr_t base;
    if ((r = fc_malloc(d, size, 0, &base))) return r;
    *p = (void *)base;
    return hipSuccess;
}

hipError_t hipFree(void *p) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    return p ? fc_free((uintptr_t)p) : hipSuccess;
}

hipError_t hipMemGetAddressRange(void **base, size_t *size, void *p) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    return fc_address_range((uintptr_t)p, (uintptr_t *)base, size);
}

hipError_t hipHostMalloc(void **p, size_t size, unsigned int flags) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!p || size == 0 || (flags & ~0x7fu)) return hipErrorInvalidValue;
    return fc_host_alloc(size, 0, p);
}

hipError_t hipHostFree(void *p) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    return p ? fc_host_free(p) : hipSuccess;
}

/* ------------------------------------------------------ streams/events */

hipError_t hipStreamCreateWithFlags(void **out, unsigned int flags) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!out || (flags & ~1u)) return hipErrorInvalidValue;
    return fc_stream_create(d, fc_env_int("FAKEHIP_COPY_DELAY_US", 0), fc_env_double("FAKEHIP_COPY_GBPS"), out);
}

hipError_t hipStreamSynchronize(void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_stream_sync(sp);
}

hipError_t hipStreamDestroy(void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_stream_destroy(sp);
}

hipError_t hipDeviceSynchronize(void) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_device_sync(d);
}

hipError_t hipEventCreateWithFlags(void **out, unsigned int flags) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!out || (flags & ~7u)) return hipErrorInvalidValue;
    return fc_event_create(out);
}

hipError_t hipEventDestroy(void *e) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_event_destroy(e);
}

hipError_t hipEventRecord(void *e, void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_event_record(e, sp);
}

hipError_t hipEventSynchronize(void *e) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_event_sync(e);
}

/* ---------------------------------------------------------------- copies */

hipError_t hipMemcpyHtoDAsync(void *dst, void *src, size_t n, void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_copy_htod((uintptr_t)dst, src, n, sp, 0);
}

hipError_t hipMemcpyDtoH(void *dst, void *src, size_t n) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_copy_dtoh(dst, (uintptr_t)src, n);
}

/* ----------------------------------------------------------- peer copies */

#ifndef FAKEHIP_OMIT_PEER
/* HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL (9) is the only attribute. */
hipError_t hipPointerGetAttribute(void *data, int attr, void *p) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!data || attr != 9) return hipErrorInvalidValue;
    return fc_pointer_device((uintptr_t)p, (int *)data);
}

hipError_t hipDeviceCanAccessPeer(int *can, int dev, int peer) {
    if (!can) return hipErrorInvalidValue;
    hipError_t r = check_dev(dev);
    if (r) return r;
    if ((r = check_dev(peer))) return r;
    return fc_can_access_peer(dev, peer, can);
}

/* hipDeviceEnablePeerAccess lets the current device reach peer's memory:
 * hipErrorPeerAccessUnsupported for a pair without P2P (FAKEHIP_NO_P2P) or
 * the device itself, hipErrorPeerAccessAlreadyEnabled the second time. */
hipError_t hipDeviceEnablePeerAccess(int peer, unsigned int flags) {
    int d, can = 0;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if ((r = check_dev(peer))) return r;
    if (flags) return hipErrorInvalidValue;
    if ((r = fc_can_access_peer(d, peer, &can))) return r;
    if (!can) return hipErrorPeerAccessUnsupported;
    pthread_mutex_lock(&fc_mu);
    int already = g_peer_enabled[d][peer];
    g_peer_enabled[d][peer] = 1;
    pthread_mutex_unlock(&fc_mu);
    return already ? hipErrorPeerAccessAlreadyEnabled : hipSuccess;
}

/* hipMemcpyPeerAsync copies between two devices' memory (fc_peer_copy):
 * hipErrorPeerAccessUnsupported across a pair without P2P; its stream
 * must belong to the destination's device. */
hipError_t hipMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n, void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if ((r = check_dev(dst_dev)) || (r = check_dev(src_dev))) return r;
    if (sp) {
        pthread_mutex_lock(&fc_mu);
        struct fc_stream *s = fc_lookup_stream(sp);
        int other = s && s->s->dev != dst_dev;
        pthread_mutex_unlock(&fc_mu);
        if (!s) return hipErrorInvalidHandle;
        if (other) return hipErrorInvalidValue;
    }
    return fc_peer_copy((uintptr_t)dst, dst_dev, (uintptr_t)src, src_dev, n, sp);
}
#endif

/* ------------------------------------------------------------------- IPC */

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *h, void *p) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!h) return hipErrorInvalidValue;
    return fc_ipc_get(h->reserved, (uintptr_t)p);
}

#ifndef FAKEHIP_OMIT_hipIpcOpenMemHandle
hipError_t hipIpcOpenMemHandle(void **out, hipIpcMemHandle_t h, unsigned int flags) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!out || flags != 1u) return hipErrorInvalidValue; /* clr: flags must be hipIpcMemLazyEnablePeerAccess */
    struct fc_ipc_wire w;
    if ((r = fc_ipc_decode(h.reserved, &w))) return r;
    return fc_ipc_open(&w, d, (uintptr_t *)out);
}
#endif

hipError_t hipIpcCloseMemHandle(void *p) {
    int d;
    hipError_t r = need_dev(&d);
    return r ? r : fc_ipc_close((uintptr_t)p);
}

/* ----------------------------------------------------------------- errors */

static const struct fc_error g_errors[] = {
    {0, "hipSuccess", "no error"},
    {1, "hipErrorInvalidValue", "invalid argument"},
    {2, "hipErrorOutOfMemory", "out of memory"},
    {3, "hipErrorNotInitialized", "initialization error"},
    {100, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {101, "hipErrorInvalidDevice", "invalid device ordinal"},
    {201, "hipErrorInvalidContext", "invalid device context"},
    {217, "hipErrorPeerAccessUnsupported", "peer access is not supported between these two devices"},
    {214, "hipErrorECCNotCorrectable", "uncorrectable ECC error encountered"},
    {400, "hipErrorInvalidHandle", "invalid resource handle"},
    {700, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
    {704, "hipErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {719, "hipErrorLaunchFailure", "unspecified launch failure"},
    {801, "hipErrorNotSupported", "operation not supported"},
    {999, "hipErrorUnknown", "unknown error"},
};

const char *hipGetErrorName(hipError_t e) {
    const struct fc_error *row = fc_error_find(g_errors, sizeof g_errors / sizeof g_errors[0], e);
    return row ? row->name : "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t e) {
    const struct fc_error *row = fc_error_find(g_errors, sizeof g_errors / sizeof g_errors[0], e);
    return row ? row->desc : "unknown error";
}
