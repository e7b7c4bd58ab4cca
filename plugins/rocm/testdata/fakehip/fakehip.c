/*
 * fakehip.c - a fake libamdhip64 for machines without an AMD GPU.
 *
 * Build: gcc -shared -fPIC -O1 -I<this dir> -I<plugins/internal/fakelib/include>
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
 *  - Device memory is a memfd per hipMalloc, mapped at a fake device
 *    address (never a host pointer), accounted in 2 MiB granules;
 *    exhaustion is hipErrorOutOfMemory (2).
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
 *  - hipDeviceGetAttribute: compute mode (6) is FAKEHIP_COMPUTE_MODE
 *    (default 0), PCI bus (67), device (68), domain (69); others invalid.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "fakeamd.h"
#include "fakeengine.h"
#include "fakeipc.h"
#include "fakesticky.h"

typedef int hipError_t;
typedef struct { char bytes[16]; } hipUUID;
typedef struct { char reserved[64]; } hipIpcMemHandle_t;

enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNotInitialized = 3,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidContext = 201,
    hipErrorInvalidHandle = 400,
    hipErrorIllegalAddress = 700,
};

#define GRANULE (2ULL << 20)
#define IPC_MAGIC "FAKEHIP1"

struct fdev {
    struct fake_phys phys;
    int phys_index;
    unsigned long long total, used;
    int has_ctx;
};

struct falloc {
    uintptr_t base;
    size_t size;
    unsigned char *host;
    int fd;       /* exporter: memfd; importer: -1 */
    int dev;
    int imported;
    int refs;     /* open count (imported only) */
    pid_t owner;
    uint64_t id, nonce;
    struct falloc *next;
};

struct fpinned {
    unsigned char *p;
    size_t size;
    struct fpinned *next;
};

struct fstream {
    struct fe_stream *s;
    struct fstream *next;
};

struct fevent {
    struct fe_stream *stream;
    uint64_t seq;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_init; /* 0 not yet, 1 ok, <0 -code */
static int g_ndev, g_contexts, g_opens, g_closes;
static struct fdev g_dev[FAKE_MAX_DEVICES];
static struct falloc *g_allocs;
static struct fpinned *g_pinned;
static struct fstream *g_streams;
static uint64_t g_next_id = 1;
static uintptr_t g_next_va = 0x200000000000ULL;
static __thread int t_dev;

int fakehip_contexts(void) { return g_contexts; }
int fakehip_opens(void) { return g_opens; }
int fakehip_closes(void) { return g_closes; }

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : def;
}

/* sticky_check returns the process's fatal error (fakesticky.h),
 * latching one from FAKEHIP_STICKY_FILE when that file exists and holds a
 * code. */
static hipError_t sticky_check(void) { return (hipError_t)fs_check(&g_mu, "FAKEHIP_STICKY_FILE"); }

/* pick_list applies an index list (HIP_VISIBLE_DEVICES) to in (n
 * entries) into out; the first invalid or repeated entry ends it. */
static int pick_list(const char *list, const int *in, int n, int *out) {
    int k = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        size_t tl = strlen(tok);
        if (tl == 0 || strspn(tok, "0123456789") != tl || atoi(tok) >= n) break;
        int pick = in[atoi(tok)], dup = 0;
        for (int i = 0; i < k; i++) dup |= out[i] == pick;
        if (dup) break;
        out[k++] = pick;
    }
    free(copy);
    return k;
}

static int init_devices(void) {
    struct fake_phys phys[FAKE_MAX_DEVICES];
    int nphys = fake_parse_devices(phys);
    if (nphys < 0) return -hipErrorInvalidValue;
    int all[FAKE_MAX_DEVICES], rocr[FAKE_MAX_DEVICES], vis[FAKE_MAX_DEVICES];
    for (int i = 0; i < nphys; i++) all[i] = i;
    int nrocr = nphys;
    memcpy(rocr, all, sizeof all);
    const char *r = getenv("ROCR_VISIBLE_DEVICES");
    if (r) {
        /* ROCr: indices into the physical list, or full UUIDs. */
        nrocr = 0;
        char *copy = strdup(r), *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            while (*tok == ' ') tok++;
            int pick = -1;
            size_t tl = strlen(tok);
            if (tl > 0 && strspn(tok, "0123456789") == tl) {
                if (atoi(tok) < nphys) pick = atoi(tok);
            } else if (strncasecmp(tok, "GPU-", 4) == 0) {
                for (int i = 0; i < nphys; i++)
                    if (strcasecmp(tok + 4, phys[i].uuid) == 0) pick = i;
            }
            if (pick < 0) break;
            int dup = 0;
            for (int i = 0; i < nrocr; i++) dup |= rocr[i] == pick;
            if (dup) break;
            rocr[nrocr++] = pick;
        }
        free(copy);
    }
    const char *h = getenv("HIP_VISIBLE_DEVICES");
    if (!h) h = getenv("CUDA_VISIBLE_DEVICES");
    int nvis = nrocr;
    memcpy(vis, rocr, sizeof rocr);
    if (h) nvis = pick_list(h, rocr, nrocr, vis);
    unsigned long long mem = fake_memory();
    for (int i = 0; i < nvis; i++) {
        memset(&g_dev[i], 0, sizeof g_dev[i]);
        g_dev[i].phys = phys[vis[i]];
        g_dev[i].phys_index = vis[i];
        g_dev[i].total = mem;
    }
    if (nvis == 0) return -hipErrorNoDevice;
    return nvis;
}

/* ensure_init initialises once, as HIP does on its first call. */
static hipError_t ensure_init(void) {
    pthread_mutex_lock(&g_mu);
    if (g_init == 0) {
        int fail = env_int("FAKEHIP_INIT_ERROR", 0);
        int n = fail ? -fail : init_devices();
        if (n < 0) g_init = n;
        else {
            g_ndev = n;
            g_init = 1;
        }
    }
    int st = g_init;
    pthread_mutex_unlock(&g_mu);
    return st < 0 ? -st : hipSuccess;
}

static hipError_t check_dev(int d) {
    hipError_t r = ensure_init();
    if (r) return r;
    if ((r = sticky_check())) return r;
    return (d < 0 || d >= g_ndev) ? hipErrorInvalidDevice : hipSuccess;
}

/* need_dev returns the calling thread's device, creating its context. */
static hipError_t need_dev(int *dev) {
    hipError_t r = check_dev(t_dev);
    if (r) return r;
    pthread_mutex_lock(&g_mu);
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
    pthread_mutex_unlock(&g_mu);
    *dev = t_dev;
    return hipSuccess;
}

static struct falloc *find_range(uintptr_t p, size_t n) {
    for (struct falloc *a = g_allocs; a; a = a->next)
        if (p >= a->base && p - a->base <= a->size && n <= a->size - (p - a->base)) return a;
    return NULL;
}

static int is_pinned(const void *p, size_t n) {
    const unsigned char *c = p;
    for (struct fpinned *q = g_pinned; q; q = q->next)
        if (c >= q->p && (size_t)(c - q->p) <= q->size && n <= q->size - (size_t)(c - q->p)) return 1;
    return 0;
}

static int exporter_gone(const struct falloc *a) { return a->imported && fi_exporter_gone(a->owner); }

static uint64_t rand64(void) { return fi_rand64(g_next_id); }

static void memfd_name(char *buf, size_t len, pid_t pid, uint64_t id, uint64_t nonce) {
    fi_memfd_name(buf, len, "fakehip", pid, id, nonce);
}

/* ---------------------------------------------------------- init/device */

hipError_t hipInit(unsigned int flags) {
    if (flags != 0) return hipErrorInvalidValue;
    return ensure_init();
}

hipError_t hipDriverGetVersion(int *v) {
    if (!v) return hipErrorInvalidValue;
    *v = env_int("FAKEHIP_DRIVER_VERSION", 60342134);
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
    hipError_t r = check_dev(ordinal);
    if (r) return r;
    if (!dev) return hipErrorInvalidValue;
    *dev = ordinal;
    return hipSuccess;
}

hipError_t hipDeviceGetUuid(hipUUID *u, int d) {
    hipError_t r = check_dev(d);
    if (r) return r;
    if (!u) return hipErrorInvalidValue;
    memcpy(u->bytes, g_dev[d].phys.uuid, 16);
    return hipSuccess;
}

hipError_t hipDeviceGetName(char *name, int len, int d) {
    hipError_t r = check_dev(d);
    if (r) return r;
    if (!name || len <= 0) return hipErrorInvalidValue;
    snprintf(name, (size_t)len, "%s", FAKE_NAME);
    return hipSuccess;
}

hipError_t hipDeviceGetPCIBusId(char *bus, int len, int d) {
    hipError_t r = check_dev(d);
    if (r) return r;
    if (!bus || len <= 0) return hipErrorInvalidValue;
    snprintf(bus, (size_t)len, "0000:%02x:00.0", g_dev[d].phys.bus);
    return hipSuccess;
}

hipError_t hipDeviceTotalMem(size_t *bytes, int d) {
    hipError_t r = check_dev(d);
    if (r) return r;
    if (!bytes) return hipErrorInvalidValue;
    *bytes = (size_t)g_dev[d].total;
    return hipSuccess;
}

hipError_t hipDeviceGetAttribute(int *v, int attr, int d) {
    hipError_t r = check_dev(d);
    if (r) return r;
    if (!v) return hipErrorInvalidValue;
    switch (attr) {
    case 6: *v = env_int("FAKEHIP_COMPUTE_MODE", 0); return hipSuccess;
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
    pthread_mutex_lock(&g_mu);
    *total_b = (size_t)g_dev[d].total;
    *free_b = (size_t)(g_dev[d].total - g_dev[d].used);
    pthread_mutex_unlock(&g_mu);
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
    unsigned long long rounded = (size + GRANULE - 1) / GRANULE * GRANULE;
    pthread_mutex_lock(&g_mu);
    struct fdev *dv = &g_dev[d];
    if (rounded > dv->total - dv->used) {
        pthread_mutex_unlock(&g_mu);
        return hipErrorOutOfMemory;
    }
    struct falloc *a = calloc(1, sizeof *a);
    a->id = g_next_id++;
    a->nonce = rand64();
    a->owner = getpid();
    char name[96];
    memfd_name(name, sizeof name, a->owner, a->id, a->nonce);
    a->fd = memfd_create(name, MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)size) != 0 ||
        (a->host = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0)) == MAP_FAILED) {
        if (a->fd >= 0) close(a->fd);
        free(a);
        pthread_mutex_unlock(&g_mu);
        return hipErrorOutOfMemory;
    }
    a->size = size;
    a->dev = d;
    a->base = g_next_va;
    g_next_va += rounded + GRANULE;
    a->next = g_allocs;
    g_allocs = a;
    dv->used += rounded;
    *p = (void *)a->base;
    pthread_mutex_unlock(&g_mu);
    return hipSuccess;
}

hipError_t hipFree(void *vp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (vp == NULL) return hipSuccess;
    uintptr_t p = (uintptr_t)vp;
    pthread_mutex_lock(&g_mu);
    struct falloc **pp = &g_allocs;
    while (*pp && !((*pp)->base == p && !(*pp)->imported)) pp = &(*pp)->next;
    struct falloc *a = *pp;
    if (!a) {
        pthread_mutex_unlock(&g_mu);
        return hipErrorInvalidValue;
    }
    *pp = a->next;
    g_dev[a->dev].used -= (a->size + GRANULE - 1) / GRANULE * GRANULE;
    pthread_mutex_unlock(&g_mu);
    munmap(a->host, a->size);
    close(a->fd);
    free(a);
    return hipSuccess;
}

hipError_t hipMemGetAddressRange(void **base, size_t *size, void *vp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    uintptr_t p = (uintptr_t)vp;
    pthread_mutex_lock(&g_mu);
    struct falloc *a = find_range(p, 0);
    if (a && p == a->base + a->size) a = NULL;
    if (a) {
        if (base) *base = (void *)a->base;
        if (size) *size = a->size;
    }
    pthread_mutex_unlock(&g_mu);
    return a ? hipSuccess : hipErrorInvalidValue;
}

hipError_t hipHostMalloc(void **p, size_t size, unsigned int flags) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!p || size == 0 || (flags & ~0x7fu)) return hipErrorInvalidValue;
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return hipErrorOutOfMemory;
    struct fpinned *q = calloc(1, sizeof *q);
    q->p = m;
    q->size = size;
    pthread_mutex_lock(&g_mu);
    q->next = g_pinned;
    g_pinned = q;
    pthread_mutex_unlock(&g_mu);
    *p = m;
    return hipSuccess;
}

hipError_t hipHostFree(void *p) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!p) return hipSuccess;
    pthread_mutex_lock(&g_mu);
    struct fpinned **pp = &g_pinned;
    while (*pp && (*pp)->p != p) pp = &(*pp)->next;
    struct fpinned *q = *pp;
    if (q) *pp = q->next;
    pthread_mutex_unlock(&g_mu);
    if (!q) return hipErrorInvalidValue;
    munmap(q->p, q->size);
    free(q);
    return hipSuccess;
}

/* ------------------------------------------------------ streams/events */

static struct fstream *lookup_stream(void *p) {
    for (struct fstream *s = g_streams; s; s = s->next)
        if (s == p) return s;
    return NULL;
}

hipError_t hipStreamCreateWithFlags(void **out, unsigned int flags) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!out || (flags & ~1u)) return hipErrorInvalidValue;
    struct fstream *s = calloc(1, sizeof *s);
    const char *g = getenv("FAKEHIP_COPY_GBPS");
    s->s = fe_stream_create(d, env_int("FAKEHIP_COPY_DELAY_US", 0), (g && *g) ? strtod(g, NULL) : 0);
    if (!s->s) {
        free(s);
        return hipErrorOutOfMemory;
    }
    pthread_mutex_lock(&g_mu);
    s->next = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_mu);
    *out = s;
    return hipSuccess;
}

hipError_t hipStreamSynchronize(void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (sp == NULL) return hipSuccess;
    pthread_mutex_lock(&g_mu);
    struct fstream *s = lookup_stream(sp);
    pthread_mutex_unlock(&g_mu);
    if (!s) return hipErrorInvalidHandle;
    fe_stream_wait(s->s, fe_stream_last(s->s));
    return hipSuccess;
}

hipError_t hipStreamDestroy(void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    pthread_mutex_lock(&g_mu);
    struct fstream **pp = &g_streams;
    while (*pp && *pp != sp) pp = &(*pp)->next;
    struct fstream *s = *pp;
    if (s) *pp = s->next;
    pthread_mutex_unlock(&g_mu);
    if (!s) return hipErrorInvalidHandle;
    fe_stream_destroy(s->s);
    free(s);
    return hipSuccess;
}

hipError_t hipDeviceSynchronize(void) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    for (;;) {
        struct fe_stream *pending = NULL;
        pthread_mutex_lock(&g_mu);
        for (struct fstream *s = g_streams; s && !pending; s = s->next)
            if (s->s->dev == d && fe_stream_pending(s->s)) pending = s->s;
        pthread_mutex_unlock(&g_mu);
        if (!pending) return hipSuccess;
        fe_stream_wait(pending, fe_stream_last(pending));
    }
}

hipError_t hipEventCreateWithFlags(void **out, unsigned int flags) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!out || (flags & ~7u)) return hipErrorInvalidValue;
    *out = calloc(1, sizeof(struct fevent));
    return hipSuccess;
}

hipError_t hipEventDestroy(void *e) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!e) return hipErrorInvalidHandle;
    free(e);
    return hipSuccess;
}

hipError_t hipEventRecord(void *ep, void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    struct fevent *e = ep;
    if (!e) return hipErrorInvalidHandle;
    if (sp == NULL) {
        e->stream = NULL;
        return hipSuccess;
    }
    pthread_mutex_lock(&g_mu);
    struct fstream *s = lookup_stream(sp);
    pthread_mutex_unlock(&g_mu);
    if (!s) return hipErrorInvalidHandle;
    e->stream = s->s;
    e->seq = fe_stream_last(s->s);
    return hipSuccess;
}

hipError_t hipEventSynchronize(void *ep) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    struct fevent *e = ep;
    if (!e) return hipErrorInvalidHandle;
    if (e->stream) fe_stream_wait(e->stream, e->seq);
    return hipSuccess;
}

/* ---------------------------------------------------------------- copies */

hipError_t hipMemcpyHtoDAsync(void *dstp, void *src, size_t n, void *sp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (n == 0) return hipSuccess;
    if (!src) return hipErrorInvalidValue;
    uintptr_t dst = (uintptr_t)dstp;
    pthread_mutex_lock(&g_mu);
    struct falloc *a = find_range(dst, n);
    int pinned = is_pinned(src, n);
    struct fstream *s = sp ? lookup_stream(sp) : NULL;
    pthread_mutex_unlock(&g_mu);
    if (!a) return hipErrorInvalidValue;
    if (sp && !s) return hipErrorInvalidHandle;
    if (!pinned) {
        fprintf(stderr, "fakehip: hipMemcpyHtoDAsync from pageable memory %p (not from hipHostMalloc)\n", src);
        return hipErrorInvalidValue;
    }
    if (s && s->s->dev != a->dev) {
        fprintf(stderr, "fakehip: hipMemcpyHtoDAsync on a stream of device %d into memory of device %d\n", s->s->dev, a->dev);
        return hipErrorInvalidValue;
    }
    unsigned char *dp = a->host + (dst - a->base);
    if (!s) {
        memcpy(dp, src, n);
        return hipSuccess;
    }
    fe_stream_enqueue(s->s, dp, src, n);
    return hipSuccess;
}

hipError_t hipMemcpyDtoH(void *dst, void *srcp, size_t n) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (n == 0) return hipSuccess;
    if (!dst) return hipErrorInvalidValue;
    uintptr_t src = (uintptr_t)srcp;
    pthread_mutex_lock(&g_mu);
    struct falloc *a = find_range(src, n);
    if (a && exporter_gone(a)) fs_latch(hipErrorIllegalAddress);
    pthread_mutex_unlock(&g_mu);
    if (!a) return hipErrorInvalidValue;
    if (fs_sticky) return (hipError_t)fs_sticky;
    memcpy(dst, a->host + (src - a->base), n);
    return hipSuccess;
}

/* ------------------------------------------------------------------- IPC */

struct ipc_wire {
    char magic[8];
    int32_t pid;
    int32_t fd;
    int32_t phys_index;
    int32_t pad;
    uint64_t id, size, offset, nonce;
};

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *h, void *vp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!h) return hipErrorInvalidValue;
    uintptr_t p = (uintptr_t)vp;
    pthread_mutex_lock(&g_mu);
    struct falloc *a = find_range(p, 0);
    if (a && (a->imported || p == a->base + a->size)) a = NULL;
    struct ipc_wire w;
    memset(&w, 0, sizeof w);
    if (a) {
        memcpy(w.magic, IPC_MAGIC, 8);
        w.pid = a->owner;
        w.fd = a->fd;
        w.phys_index = g_dev[a->dev].phys_index;
        w.id = a->id;
        w.size = a->size;
        w.offset = p - a->base;
        w.nonce = a->nonce;
    }
    pthread_mutex_unlock(&g_mu);
    if (!a) return hipErrorInvalidValue;
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &w, sizeof w);
    return hipSuccess;
}

#ifndef FAKEHIP_OMIT_hipIpcOpenMemHandle
hipError_t hipIpcOpenMemHandle(void **out, hipIpcMemHandle_t h, unsigned int flags) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    if (!out || flags != 1u) return hipErrorInvalidValue; /* clr: flags must be hipIpcMemLazyEnablePeerAccess */
    struct ipc_wire w;
    memcpy(&w, h.reserved, sizeof w);
    if (memcmp(w.magic, IPC_MAGIC, 8) != 0 || w.size == 0) return hipErrorInvalidValue;
    if (w.pid == getpid()) return hipErrorInvalidContext;
    pthread_mutex_lock(&g_mu);
    for (struct falloc *a = g_allocs; a; a = a->next) {
        if (a->imported && a->owner == w.pid && a->id == w.id && a->nonce == w.nonce && a->dev == d) {
            a->refs++;
            g_opens++;
            *out = (void *)(a->base + w.offset);
            pthread_mutex_unlock(&g_mu);
            return hipSuccess;
        }
    }
    pthread_mutex_unlock(&g_mu);
    if (w.offset >= w.size) return hipErrorInvalidValue;
    unsigned char *m = NULL;
    int mapped = fi_map_exported("fakehip", w.pid, w.fd, w.id, w.nonce, w.size, &m);
    if (mapped == FI_NOMEM) return hipErrorOutOfMemory;
    if (mapped != FI_OK) return hipErrorInvalidValue;
    struct falloc *a = calloc(1, sizeof *a);
    a->host = m;
    a->size = w.size;
    a->fd = -1;
    a->dev = d;
    a->imported = 1;
    a->refs = 1;
    a->owner = w.pid;
    a->id = w.id;
    a->nonce = w.nonce;
    pthread_mutex_lock(&g_mu);
    a->base = g_next_va;
    g_next_va += (w.size + GRANULE - 1) / GRANULE * GRANULE + GRANULE;
    a->next = g_allocs;
    g_allocs = a;
    g_opens++;
    *out = (void *)(a->base + w.offset);
    pthread_mutex_unlock(&g_mu);
    return hipSuccess;
}
#endif

hipError_t hipIpcCloseMemHandle(void *vp) {
    int d;
    hipError_t r = need_dev(&d);
    if (r) return r;
    uintptr_t p = (uintptr_t)vp;
    pthread_mutex_lock(&g_mu);
    struct falloc **pp = &g_allocs;
    while (*pp && !((*pp)->imported && p >= (*pp)->base && p < (*pp)->base + (*pp)->size)) pp = &(*pp)->next;
    struct falloc *a = *pp;
    if (!a) {
        pthread_mutex_unlock(&g_mu);
        return hipErrorInvalidValue;
    }
    g_closes++;
    if (--a->refs > 0) {
        pthread_mutex_unlock(&g_mu);
        return hipSuccess;
    }
    *pp = a->next;
    pthread_mutex_unlock(&g_mu);
    munmap(a->host, a->size);
    free(a);
    return hipSuccess;
}

/* ----------------------------------------------------------------- errors */

static const struct { int code; const char *name, *desc; } g_errors[] = {
    {0, "hipSuccess", "no error"},
    {1, "hipErrorInvalidValue", "invalid argument"},
    {2, "hipErrorOutOfMemory", "out of memory"},
    {3, "hipErrorNotInitialized", "initialization error"},
    {100, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {101, "hipErrorInvalidDevice", "invalid device ordinal"},
    {201, "hipErrorInvalidContext", "invalid device context"},
    {214, "hipErrorECCNotCorrectable", "uncorrectable ECC error encountered"},
    {400, "hipErrorInvalidHandle", "invalid resource handle"},
    {700, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
    {719, "hipErrorLaunchFailure", "unspecified launch failure"},
    {801, "hipErrorNotSupported", "operation not supported"},
    {999, "hipErrorUnknown", "unknown error"},
};

const char *hipGetErrorName(hipError_t e) {
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == e) return g_errors[i].name;
    return "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t e) {
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == e) return g_errors[i].desc;
    return "unknown error";
}
