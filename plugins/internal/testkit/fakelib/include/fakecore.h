/*
 * fakecore.h - the state and calls the fake GPU drivers (the fake libcuda
 * of plugins/cuda/testdata and the fake libamdhip64 of plugins/rocm/testdata)
 * share, over host memory: device memory accounting, the allocation table
 * (a memfd per allocation, mapped at a fake device address), pinned host
 * memory, streams and events over the paced copy engine (fakeengine.h),
 * host<->device copies, cross-process IPC handles (fakeipc.h), the sticky
 * error (fakesticky.h), visible-device lists and error-name tables. A vendor
 * file maps its entry points' names, argument orders and error codes onto
 * these; what differs between the vendors is chosen by the macros below,
 * which it defines before including this header (exactly once, in one C
 * file, after _GNU_SOURCE).
 *
 *   FC_PREFIX            "fakecuda": memfd names and stderr messages
 *   FC_VA_BASE           first fake device address (never a host pointer)
 *   FC_IPC_MAGIC         8 characters opening an IPC handle
 *   FC_STICKY_ENV        the variable naming the sticky-error file
 *   FC_HTOD_NAME         the host-to-device copy's name, for messages
 *   FC_HOSTALLOC_NAME    the pinned allocator's name, for messages
 *   FC_IPC_INTERIOR      1: a handle may name any address inside an
 *                        allocation and a close any address inside a
 *                        mapping (HIP); 0: the base only (CUDA)
 *   FC_IPC_PER_DEVICE    1: reopening a handle shares the mapping of the
 *                        same device only (HIP); 0: of the process (CUDA)
 *   FC_STREAM_SAME_DEVICE 1: a copy's stream must belong to the device of
 *                        the destination (HIP); 0: any stream (CUDA)
 *   FC_ENV(x)            the vendor's variable name: "FAKECUDA_" x
 *
 * Peer copies (fc_can_access_peer, fc_peer_copy): every pair of devices has
 * a P2P path unless FC_ENV("NO_P2P") lists it ("0-1,2-3": physical device
 * indices, either order); a peer copy across such a pair is refused with
 * FC_PEER_UNSUPPORTED, so a backend must stage through host memory. Peer
 * copies run on the stream's thread through the paced engine of the
 * stream's device, like host-to-device copies. FC_ENV("PEER_ERROR") =
 * "<code>" fails every peer copy with that code, "<code>@<k>" the k-th
 * (1-based) and every later one of the process: a copy failing mid-way.
 *
 * The calls return the codes both vendors share (FC_SUCCESS ...
 * FC_ILLEGAL_ADDRESS, equal in CUDA and HIP); "(fc_mu held)" marks those
 * the caller calls with fc_mu locked.
 */
#ifndef WCACHE_FAKECORE_H
#define WCACHE_FAKECORE_H

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "fakeengine.h"
#include "fakeipc.h"
#include "fakesticky.h"

#if !defined(FC_PREFIX) || !defined(FC_VA_BASE) || !defined(FC_IPC_MAGIC) || !defined(FC_STICKY_ENV) || \
    !defined(FC_HTOD_NAME) || !defined(FC_HOSTALLOC_NAME) || !defined(FC_IPC_INTERIOR) ||              \
    !defined(FC_IPC_PER_DEVICE) || !defined(FC_STREAM_SAME_DEVICE) || !defined(FC_ENV)
#error "fakecore.h: define the FC_ macros first (see the header's comment)"
#endif

/* The result codes CUDA and HIP share. */
enum {
    FC_SUCCESS = 0,
    FC_INVALID_VALUE = 1,
    FC_OUT_OF_MEMORY = 2,
    FC_INVALID_CONTEXT = 201,
    FC_PEER_UNSUPPORTED = 217,
    FC_INVALID_HANDLE = 400,
    FC_ILLEGAL_ADDRESS = 700,
};

#define FC_GRANULE (2ULL << 20)
#define FC_MAX_DEVICES FE_MAX_DEVICES

/* fc_round rounds n up to whole granules. */
static unsigned long long fc_round(unsigned long long n) { return (n + FC_GRANULE - 1) / FC_GRANULE * FC_GRANULE; }

/* ---------------------------------------------------------------- state */

/* fc_dev is the memory of a visible device. */
struct fc_dev {
    int phys_index; /* index in the physical device table */
    unsigned long long total, used;
};

/* fc_alloc is device memory: an own allocation (a memfd), an imported IPC
 * mapping, or (CUDA) a virtual memory mapping of a physical allocation. */
struct fc_alloc {
    uintptr_t base;
    size_t size;
    unsigned char *host;
    int fd;        /* exporter: memfd; importer and VMM mapping: -1 */
    int dev;       /* visible ordinal */
    int phys;      /* physical index of the device whose memory it is */
    int imported;  /* opened through IPC */
    int refs;      /* IPC open count (imported only) */
    pid_t owner;   /* exporting process */
    uint64_t id;   /* allocation id in the exporting process */
    uint64_t nonce;
    void *vmm;        /* the vendor's physical allocation of a VMM mapping, or NULL */
    unsigned access;  /* a VMM mapping's access: 0 none, 1 read, 3 read-write */
    struct fc_alloc *next;
};

struct fc_pinned {
    unsigned char *p;
    size_t size;
    struct fc_pinned *next;
};

struct fc_stream {
    struct fe_stream *s;
    struct fc_stream *next;
};

struct fc_event {
    struct fe_stream *stream;
    uint64_t seq;
};

static pthread_mutex_t fc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fc_dev fc_devs[FC_MAX_DEVICES];
static struct fc_alloc *fc_allocs;
static struct fc_pinned *fc_pinned_list;
static struct fc_stream *fc_streams;
static uint64_t fc_next_id = 1;
static uintptr_t fc_next_va = FC_VA_BASE;
static int fc_opens, fc_closes; /* IPC opens and closes, for tests */
static int fc_ndevs;            /* visible devices (fc_set_devices) */
static uint64_t fc_peer_calls;  /* peer copies asked for, for PEER_ERROR */

/* ------------------------------------------------------------- helpers */

/* FC_LINK puts node at the head of the list head (fc_mu held); FC_PUSH
 * does so taking fc_mu. The tables above are such lists. */
#define FC_LINK(head, node) ((node)->next = (head), (head) = (node))
#define FC_PUSH(head, node)           \
    do {                              \
        pthread_mutex_lock(&fc_mu);   \
        FC_LINK(head, node);          \
        pthread_mutex_unlock(&fc_mu); \
    } while (0)

/* fc_env_int returns the integer in variable name, or def when unset. */
static int fc_env_int(const char *name, int def) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : def;
}

/* fc_env_double returns the number in variable name, or 0 when unset. */
static double fc_env_double(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? strtod(v, NULL) : 0;
}

/* fc_sticky returns the process's sticky error (fakesticky.h), latching
 * one from the file FC_STICKY_ENV names when it exists and holds a code. */
static int fc_sticky(void) { return fs_check(&fc_mu, FC_STICKY_ENV); }

static uint64_t fc_rand64(void) { return fi_rand64(fc_next_id); }

/* fc_exporter_gone reports whether an imported mapping's exporting
 * process has exited (its memfd is no longer reachable). */
static int fc_exporter_gone(const struct fc_alloc *a) { return a->imported && fi_exporter_gone(a->owner); }

/* fc_find_range returns the allocation holding [p, p+n) (fc_mu held). */
static struct fc_alloc *fc_find_range(uintptr_t p, size_t n) {
    for (struct fc_alloc *a = fc_allocs; a; a = a->next) {
        if (p >= a->base && p - a->base <= a->size && n <= a->size - (p - a->base)) return a;
    }
    return NULL;
}

/* fc_is_pinned reports whether [p, p+n) is pinned host memory (fc_mu held). */
static int fc_is_pinned(const void *p, size_t n) {
    const unsigned char *c = p;
    for (struct fc_pinned *q = fc_pinned_list; q; q = q->next) {
        if (c >= q->p && (size_t)(c - q->p) <= q->size && n <= q->size - (size_t)(c - q->p)) return 1;
    }
    return 0;
}

/* fc_reserve_va returns the base of a fresh range of n bytes of fake
 * device addresses, with a guard gap after it; addresses are never reused
 * (fc_mu held). */
static uintptr_t fc_reserve_va(unsigned long long n) {
    uintptr_t base = fc_next_va;
    fc_next_va += fc_round(n) + FC_GRANULE;
    return base;
}

/* fc_unmap_list unmaps and frees a list of allocations taken off the
 * table, closing the memfds of own ones. */
static void fc_unmap_list(struct fc_alloc *dead) {
    while (dead) {
        struct fc_alloc *a = dead;
        dead = a->next;
        munmap(a->host, a->size);
        if (a->fd >= 0) close(a->fd);
        free(a);
    }
}

/* ------------------------------------------------------- visible devices */

/* fc_pick_list applies a comma list of visible devices to n candidates:
 * an index entry picks map[index], another entry resolve(entry, arg)
 * (-1 when resolve is NULL); spaces around entries are ignored. The first
 * entry that picks nothing (negative) or repeats a pick ends the list.
 * Returns the count written to out. */
static int fc_pick_list(const char *list, const int *map, int n, int (*resolve)(const char *entry, void *arg), void *arg,
                        int *out) {
    int k = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        size_t tl = strlen(tok);
        while (tl > 0 && tok[tl - 1] == ' ') tok[--tl] = '\0';
        int pick = -1;
        if (tl > 0 && strspn(tok, "0123456789") == tl) {
            if (atoi(tok) < n) pick = map[atoi(tok)];
        } else if (resolve) {
            pick = resolve(tok, arg);
        }
        if (pick < 0) break;
        int dup = 0;
        for (int i = 0; i < k; i++) dup |= out[i] == pick;
        if (dup) break;
        out[k++] = pick;
    }
    free(copy);
    return k;
}

/* fc_set_devices sets the memory of the visible devices: n of them, from
 * the physical devices phys[0..n), mem bytes each. */
static void fc_set_devices(const int *phys, int n, unsigned long long mem) {
    fc_ndevs = n;
    for (int i = 0; i < n; i++) {
        fc_devs[i].phys_index = phys[i];
        fc_devs[i].total = mem;
        fc_devs[i].used = 0;
    }
}

/* -------------------------------------------------------------- memory */

/* fc_mem_info returns a device's free and total bytes. */
static void fc_mem_info(int dev, size_t *free_b, size_t *total_b) {
    pthread_mutex_lock(&fc_mu);
    *total_b = (size_t)fc_devs[dev].total;
    *free_b = (size_t)(fc_devs[dev].total - fc_devs[dev].used);
    pthread_mutex_unlock(&fc_mu);
}

/* fc_malloc allocates size (> 0) bytes on dev, accounted in granules:
 * a memfd named FC_PREFIX-<pid>-<id>-<nonce>, mapped (with MAP_POPULATE
 * when populate) at a fresh fake device address. FC_OUT_OF_MEMORY when
 * the device is full or the memfd cannot be made. */
static int fc_malloc(int dev, size_t size, int populate, uintptr_t *out) {
    unsigned long long rounded = fc_round(size);
    pthread_mutex_lock(&fc_mu);
    struct fc_dev *dv = &fc_devs[dev];
    if (rounded > dv->total - dv->used) {
        pthread_mutex_unlock(&fc_mu);
        return FC_OUT_OF_MEMORY;
    }
    struct fc_alloc *a = calloc(1, sizeof *a);
    a->id = fc_next_id++;
    a->nonce = fc_rand64();
    a->owner = getpid();
    char name[96];
    fi_memfd_name(name, sizeof name, FC_PREFIX, a->owner, a->id, a->nonce);
    a->fd = memfd_create(name, MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)size) != 0 ||
        (a->host = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), a->fd, 0)) ==
            MAP_FAILED) {
        if (a->fd >= 0) close(a->fd);
        free(a);
        pthread_mutex_unlock(&fc_mu);
        return FC_OUT_OF_MEMORY;
    }
    a->size = size;
    a->dev = dev;
    a->phys = dv->phys_index;
    a->base = fc_reserve_va(size);
    FC_LINK(fc_allocs, a);
    dv->used += rounded;
    *out = a->base;
    pthread_mutex_unlock(&fc_mu);
    return FC_SUCCESS;
}

/* fc_free frees the own allocation based at p; FC_INVALID_VALUE when
 * there is none (an imported or VMM mapping is none). */
static int fc_free(uintptr_t p) {
    pthread_mutex_lock(&fc_mu);
    struct fc_alloc **pp = &fc_allocs;
    while (*pp && !((*pp)->base == p && !(*pp)->imported && !(*pp)->vmm)) pp = &(*pp)->next;
    struct fc_alloc *a = *pp;
    if (!a) {
        pthread_mutex_unlock(&fc_mu);
        return FC_INVALID_VALUE;
    }
    *pp = a->next;
    fc_devs[a->dev].used -= fc_round(a->size);
    pthread_mutex_unlock(&fc_mu);
    a->next = NULL;
    fc_unmap_list(a);
    return FC_SUCCESS;
}

/* fc_address_range returns the base and size (either may be NULL) of the
 * allocation holding p; FC_INVALID_VALUE when none does (one past the end
 * is outside). */
static int fc_address_range(uintptr_t p, uintptr_t *base, size_t *size) {
    pthread_mutex_lock(&fc_mu);
    struct fc_alloc *a = fc_find_range(p, 0);
    if (a && p == a->base + a->size) a = NULL;
    if (a) {
        if (base) *base = a->base;
        if (size) *size = a->size;
    }
    pthread_mutex_unlock(&fc_mu);
    return a ? FC_SUCCESS : FC_INVALID_VALUE;
}

/* fc_host_alloc allocates size bytes of pinned host memory (resident at
 * once when populate). */
static int fc_host_alloc(size_t size, int populate, void **out) {
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    if (m == MAP_FAILED) return FC_OUT_OF_MEMORY;
    struct fc_pinned *q = calloc(1, sizeof *q);
    q->p = m;
    q->size = size;
    FC_PUSH(fc_pinned_list, q);
    *out = m;
    return FC_SUCCESS;
}

/* fc_host_free frees pinned memory from fc_host_alloc; FC_INVALID_VALUE
 * for anything else. */
static int fc_host_free(void *p) {
    pthread_mutex_lock(&fc_mu);
    struct fc_pinned **pp = &fc_pinned_list;
    while (*pp && (*pp)->p != p) pp = &(*pp)->next;
    struct fc_pinned *q = *pp;
    if (q) *pp = q->next;
    pthread_mutex_unlock(&fc_mu);
    if (!q) return FC_INVALID_VALUE;
    munmap(q->p, q->size);
    free(q);
    return FC_SUCCESS;
}

/* ------------------------------------------------------ streams/events */

/* fc_lookup_stream returns the stream p, or NULL (fc_mu held). */
static struct fc_stream *fc_lookup_stream(void *p) {
    for (struct fc_stream *s = fc_streams; s; s = s->next)
        if (s == p) return s;
    return NULL;
}

/* fc_stream_create starts a stream of dev whose copies wait delay_us and
 * share the device's engine of gbps GB/s (0: unpaced). */
static int fc_stream_create(int dev, int delay_us, double gbps, void **out) {
    struct fc_stream *s = calloc(1, sizeof *s);
    s->s = fe_stream_create(dev, delay_us, gbps);
    if (!s->s) {
        free(s);
        return FC_OUT_OF_MEMORY;
    }
    FC_PUSH(fc_streams, s);
    *out = s;
    return FC_SUCCESS;
}

/* fc_stream_sync waits for the copies queued on sp (NULL: none). */
static int fc_stream_sync(void *sp) {
    if (sp == NULL) return FC_SUCCESS;
    pthread_mutex_lock(&fc_mu);
    struct fc_stream *s = fc_lookup_stream(sp);
    pthread_mutex_unlock(&fc_mu);
    if (!s) return FC_INVALID_HANDLE;
    fe_stream_wait(s->s, fe_stream_last(s->s));
    return FC_SUCCESS;
}

/* fc_stream_destroy completes sp's copies and frees it. */
static int fc_stream_destroy(void *sp) {
    pthread_mutex_lock(&fc_mu);
    struct fc_stream **pp = &fc_streams;
    while (*pp && *pp != sp) pp = &(*pp)->next;
    struct fc_stream *s = *pp;
    if (s) *pp = s->next;
    pthread_mutex_unlock(&fc_mu);
    if (!s) return FC_INVALID_HANDLE;
    fe_stream_destroy(s->s);
    free(s);
    return FC_SUCCESS;
}

/* fc_device_sync waits for every stream of dev, re-scanning after each
 * wait. */
static int fc_device_sync(int dev) {
    for (;;) {
        struct fe_stream *pending = NULL;
        pthread_mutex_lock(&fc_mu);
        for (struct fc_stream *s = fc_streams; s && !pending; s = s->next)
            if (s->s->dev == dev && fe_stream_pending(s->s)) pending = s->s;
        pthread_mutex_unlock(&fc_mu);
        if (!pending) return FC_SUCCESS;
        fe_stream_wait(pending, fe_stream_last(pending));
    }
}

static int fc_event_create(void **out) {
    *out = calloc(1, sizeof(struct fc_event));
    return FC_SUCCESS;
}

static int fc_event_destroy(void *e) {
    if (!e) return FC_INVALID_HANDLE;
    free(e);
    return FC_SUCCESS;
}

/* fc_event_record marks the last copy queued on sp (NULL: none). */
static int fc_event_record(void *ep, void *sp) {
    struct fc_event *e = ep;
    if (!e) return FC_INVALID_HANDLE;
    if (sp == NULL) {
        e->stream = NULL;
        e->seq = 0;
        return FC_SUCCESS;
    }
    pthread_mutex_lock(&fc_mu);
    struct fc_stream *s = fc_lookup_stream(sp);
    pthread_mutex_unlock(&fc_mu);
    if (!s) return FC_INVALID_HANDLE;
    e->stream = s->s;
    e->seq = fe_stream_last(s->s);
    return FC_SUCCESS;
}

/* fc_event_sync waits until the copy the event marked has completed. */
static int fc_event_sync(void *ep) {
    struct fc_event *e = ep;
    if (!e) return FC_INVALID_HANDLE;
    if (e->stream) fe_stream_wait(e->stream, e->seq);
    return FC_SUCCESS;
}

/* -------------------------------------------------------------- copies */

/* fc_copy_htod copies n bytes from src into device memory at dst: on
 * stream sp later, by the stream's thread (fakeengine.h), or at once when
 * sp is NULL. The source must be pinned unless allow_pageable; a VMM
 * mapping must be read-write (FC_INVALID_VALUE otherwise). */
static int fc_copy_htod(uintptr_t dst, const void *src, size_t n, void *sp, int allow_pageable) {
    if (n == 0) return FC_SUCCESS;
    if (!src) return FC_INVALID_VALUE;
    pthread_mutex_lock(&fc_mu);
    struct fc_alloc *a = fc_find_range(dst, n);
    int pinned = fc_is_pinned(src, n);
    struct fc_stream *s = sp ? fc_lookup_stream(sp) : NULL;
    if (a && a->vmm && a->access != 3) a = NULL;
    pthread_mutex_unlock(&fc_mu);
    if (!a) return FC_INVALID_VALUE;
    if (sp && !s) return FC_INVALID_HANDLE;
    if (!pinned && !allow_pageable) {
        fprintf(stderr, "%s: %s from pageable memory %p (not from %s)\n", FC_PREFIX, FC_HTOD_NAME, src, FC_HOSTALLOC_NAME);
        return FC_INVALID_VALUE;
    }
    if (FC_STREAM_SAME_DEVICE && s && s->s->dev != a->dev) {
        fprintf(stderr, "%s: %s on a stream of device %d into memory of device %d\n", FC_PREFIX, FC_HTOD_NAME, s->s->dev,
                a->dev);
        return FC_INVALID_VALUE;
    }
    unsigned char *d = a->host + (dst - a->base);
    if (!s) {
        memcpy(d, src, n);
        return FC_SUCCESS;
    }
    fe_stream_enqueue(s->s, d, src, n);
    return FC_SUCCESS;
}

/* fc_copy_dtoh copies n bytes of device memory at src to dst. Reading an
 * imported mapping whose exporter has exited latches FC_ILLEGAL_ADDRESS,
 * as a kernel faulting on the vanished memory would; a VMM mapping must
 * be readable. */
static int fc_copy_dtoh(void *dst, uintptr_t src, size_t n) {
    if (n == 0) return FC_SUCCESS;
    if (!dst) return FC_INVALID_VALUE;
    pthread_mutex_lock(&fc_mu);
    struct fc_alloc *a = fc_find_range(src, n);
    if (a && a->vmm && !(a->access & 1)) a = NULL;
    if (a && fc_exporter_gone(a)) fs_latch(FC_ILLEGAL_ADDRESS);
    pthread_mutex_unlock(&fc_mu);
    if (!a) return FC_INVALID_VALUE;
    if (fs_sticky) return fs_sticky;
    memcpy(dst, a->host + (src - a->base), n);
    return FC_SUCCESS;
}

/* ----------------------------------------------------------------- IPC */

/* fc_ipc_wire is what a 64-byte IPC handle holds. */
struct fc_ipc_wire {
    char magic[8];
    uint32_t version;
    int32_t pid;
    int32_t fd;
    int32_t phys_index;
    uint64_t id, size, offset, nonce;
};

/* fc_ipc_get writes the handle of the own allocation holding p (its base
 * only unless FC_IPC_INTERIOR) into the 64 bytes at out. */
static int fc_ipc_get(void *out, uintptr_t p) {
    pthread_mutex_lock(&fc_mu);
    struct fc_alloc *a = fc_find_range(p, 0);
    if (a && (a->imported || a->vmm || p == a->base + a->size || (!FC_IPC_INTERIOR && p != a->base))) a = NULL;
    struct fc_ipc_wire w;
    memset(&w, 0, sizeof w);
    if (a) {
        memcpy(w.magic, FC_IPC_MAGIC, 8);
        w.version = 1;
        w.pid = a->owner;
        w.fd = a->fd;
        w.phys_index = fc_devs[a->dev].phys_index;
        w.id = a->id;
        w.size = a->size;
        w.offset = p - a->base;
        w.nonce = a->nonce;
    }
    pthread_mutex_unlock(&fc_mu);
    if (!a) return FC_INVALID_VALUE;
    memset(out, 0, 64);
    memcpy(out, &w, sizeof w);
    return FC_SUCCESS;
}

/* fc_ipc_decode reads a handle's 64 bytes: FC_INVALID_VALUE for garbage,
 * FC_INVALID_CONTEXT when this process exported it. */
static int fc_ipc_decode(const void *h, struct fc_ipc_wire *w) {
    memcpy(w, h, sizeof *w);
    if (memcmp(w->magic, FC_IPC_MAGIC, 8) != 0 || w->version != 1 || w->size == 0) return FC_INVALID_VALUE;
    if (w->pid == getpid()) return FC_INVALID_CONTEXT;
    return FC_SUCCESS;
}

/* fc_ipc_open maps a decoded handle on dev: the mapping the process (with
 * FC_IPC_PER_DEVICE: the device) already has of it, reference counted, or
 * a new one of the exporter's memfd (FC_INVALID_VALUE when it is gone,
 * freed or too small). */
static int fc_ipc_open(const struct fc_ipc_wire *w, int dev, uintptr_t *out) {
    pthread_mutex_lock(&fc_mu);
    for (struct fc_alloc *a = fc_allocs; a; a = a->next) {
        if (a->imported && a->owner == w->pid && a->id == w->id && a->nonce == w->nonce && (!FC_IPC_PER_DEVICE || a->dev == dev)) {
            a->refs++;
            fc_opens++;
            *out = a->base + w->offset;
            pthread_mutex_unlock(&fc_mu);
            return FC_SUCCESS;
        }
    }
    pthread_mutex_unlock(&fc_mu);
    if (w->offset >= w->size) return FC_INVALID_VALUE;
    unsigned char *m = NULL;
    int mapped = fi_map_exported(FC_PREFIX, w->pid, w->fd, w->id, w->nonce, w->size, &m);
    if (mapped == FI_NOMEM) return FC_OUT_OF_MEMORY;
    if (mapped != FI_OK) return FC_INVALID_VALUE;
    struct fc_alloc *a = calloc(1, sizeof *a);
    a->host = m;
    a->size = w->size;
    a->fd = -1;
    a->dev = dev;
    a->phys = w->phys_index;
    a->imported = 1;
    a->refs = 1;
    a->owner = w->pid;
    a->id = w->id;
    a->nonce = w->nonce;
    pthread_mutex_lock(&fc_mu);
    a->base = fc_reserve_va(w->size);
    FC_LINK(fc_allocs, a);
    fc_opens++;
    *out = a->base + w->offset;
    pthread_mutex_unlock(&fc_mu);
    return FC_SUCCESS;
}

/* fc_ipc_close drops a reference to the imported mapping at p (its base,
 * or with FC_IPC_INTERIOR any address inside it), unmapping it with the
 * last. */
static int fc_ipc_close(uintptr_t p) {
    pthread_mutex_lock(&fc_mu);
    struct fc_alloc **pp = &fc_allocs;
    while (*pp && !((*pp)->imported &&
                    (FC_IPC_INTERIOR ? (p >= (*pp)->base && p < (*pp)->base + (*pp)->size) : (*pp)->base == p)))
        pp = &(*pp)->next;
    struct fc_alloc *a = *pp;
    if (!a) {
        pthread_mutex_unlock(&fc_mu);
        return FC_INVALID_VALUE;
    }
    fc_closes++;
    if (--a->refs > 0) {
        pthread_mutex_unlock(&fc_mu);
        return FC_SUCCESS;
    }
    *pp = a->next;
    pthread_mutex_unlock(&fc_mu);
    a->next = NULL;
    fc_unmap_list(a);
    return FC_SUCCESS;
}

/* --------------------------------------------------------- peer copies */

/* fc_visible_of returns the visible ordinal of physical device phys, or -1
 * (fc_mu held). */
static int fc_visible_of(int phys) {
    for (int i = 0; i < fc_ndevs; i++)
        if (fc_devs[i].phys_index == phys) return i;
    return -1;
}

/* fc_pointer_device returns in *ordinal the visible ordinal of the device
 * whose memory p is (-1: a device this process does not see);
 * FC_INVALID_VALUE when p is no device memory. */
static int fc_pointer_device(uintptr_t p, int *ordinal) {
    pthread_mutex_lock(&fc_mu);
    struct fc_alloc *a = fc_find_range(p, 0);
    if (a && p == a->base + a->size) a = NULL;
    if (a) *ordinal = fc_visible_of(a->phys);
    pthread_mutex_unlock(&fc_mu);
    return a ? FC_SUCCESS : FC_INVALID_VALUE;
}

/* fc_no_p2p reports whether FC_ENV("NO_P2P") lists the physical pair. */
static int fc_no_p2p(int a, int b) {
    const char *v = getenv(FC_ENV("NO_P2P"));
    if (!v || !*v) return 0;
    char *copy = strdup(v), *save = NULL;
    int found = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && !found; tok = strtok_r(NULL, ",", &save)) {
        int x, y;
        if (sscanf(tok, " %d-%d", &x, &y) == 2) found = (x == a && y == b) || (x == b && y == a);
    }
    free(copy);
    return found;
}

/* fc_can_access_peer answers whether visible device dev reaches peer's
 * memory directly: 0 for the same device (as CUDA and HIP answer) and for
 * a pair FC_ENV("NO_P2P") lists; FC_INVALID_VALUE for an unknown ordinal. */
static int fc_can_access_peer(int dev, int peer, int *can) {
    if (dev < 0 || dev >= fc_ndevs || peer < 0 || peer >= fc_ndevs) return FC_INVALID_VALUE;
    *can = dev != peer && !fc_no_p2p(fc_devs[dev].phys_index, fc_devs[peer].phys_index);
    return FC_SUCCESS;
}

/* fc_peer_error returns the injected failure of this peer copy
 * (FC_ENV("PEER_ERROR")), 0 for none. */
static int fc_peer_error(void) {
    const char *v = getenv(FC_ENV("PEER_ERROR"));
    pthread_mutex_lock(&fc_mu);
    uint64_t call = ++fc_peer_calls;
    pthread_mutex_unlock(&fc_mu);
    if (!v || !*v) return 0;
    int code = atoi(v);
    const char *at = strchr(v, '@');
    if (at && call < strtoull(at + 1, NULL, 10)) return 0;
    return code;
}

/* fc_peer_copy copies n bytes from device memory at src (of visible device
 * src_dev) to device memory at dst (of dst_dev): on stream sp later,
 * paced by the stream's device's engine, or at once when sp is NULL. A
 * pointer that is not memory of the device named for it, or a VMM mapping
 * without the access, is FC_INVALID_VALUE; a pair of different devices
 * without a P2P path FC_PEER_UNSUPPORTED; reading an imported mapping whose
 * exporter has exited latches FC_ILLEGAL_ADDRESS. */
static int fc_peer_copy(uintptr_t dst, int dst_dev, uintptr_t src, int src_dev, size_t n, void *sp) {
    int injected = fc_peer_error();
    if (injected) return injected;
    if (n == 0) return FC_SUCCESS;
    if (dst_dev < 0 || dst_dev >= fc_ndevs || src_dev < 0 || src_dev >= fc_ndevs) return FC_INVALID_VALUE;
    pthread_mutex_lock(&fc_mu);
    struct fc_alloc *d = fc_find_range(dst, n), *s = fc_find_range(src, n);
    struct fc_stream *st = sp ? fc_lookup_stream(sp) : NULL;
    if (d && (d->phys != fc_devs[dst_dev].phys_index || (d->vmm && d->access != 3))) d = NULL;
    if (s && (s->phys != fc_devs[src_dev].phys_index || (s->vmm && !(s->access & 1)))) s = NULL;
    int no_p2p = dst_dev != src_dev && fc_no_p2p(fc_devs[dst_dev].phys_index, fc_devs[src_dev].phys_index);
    if (s && fc_exporter_gone(s)) fs_latch(FC_ILLEGAL_ADDRESS);
    pthread_mutex_unlock(&fc_mu);
    if (!d || !s) return FC_INVALID_VALUE;
    if (sp && !st) return FC_INVALID_HANDLE;
    if (fs_sticky) return fs_sticky;
    if (no_p2p) {
        fprintf(stderr, "%s: peer copy from device %d to device %d: no P2P path between them\n", FC_PREFIX, src_dev, dst_dev);
        return FC_PEER_UNSUPPORTED;
    }
    unsigned char *to = d->host + (dst - d->base);
    const unsigned char *from = s->host + (src - s->base);
    if (!st) {
        memcpy(to, from, n);
        return FC_SUCCESS;
    }
    fe_stream_enqueue(st->s, to, from, n);
    return FC_SUCCESS;
}

/* -------------------------------------------------------------- errors */

/* fc_error is a row of a vendor's error table. */
struct fc_error {
    int code;
    const char *name, *desc;
};

/* fc_error_find returns the row of code in table (n rows), or NULL. */
static const struct fc_error *fc_error_find(const struct fc_error *table, size_t n, int code) {
    for (size_t i = 0; i < n; i++)
        if (table[i].code == code) return &table[i];
    return NULL;
}

#endif
