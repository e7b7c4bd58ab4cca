/* A fake libcuda.so.1 for testing wcache's ctypes driver path without a GPU.
 *
 * Implements only the entry points wcache.ipc.CudaDriver binds. "Device
 * memory" is host memory: an IPC handle's 64 bytes hold the NUL-terminated
 * path of a file (at most 59 bytes) and, in bytes 60..63, the exporting
 * process's pid (0: none, as in handles tests write by hand);
 * cuIpcOpenMemHandle_v2 maps that file. Device d has the UUID whose 16 bytes
 * are all 0x11 * d (device 0: 00..., device 1: 11...). Counters let tests
 * check that each handle is opened once and closed.
 *
 * As strict as the real driver where wcache relies on it:
 *  - opening a handle in its exporting process fails with
 *    CUDA_ERROR_INVALID_CONTEXT (201);
 *  - opening the same handle again in one context is reference counted and
 *    returns the same pointer; the mapping goes with the last close;
 *  - a handle whose exporter has exited cannot be opened (INVALID_VALUE);
 *  - the last cuDevicePrimaryCtxRelease_v2 of a device destroys its context:
 *    its mappings are unmapped and later calls in it fail;
 *  - sticky errors stick: after fake_fault(code) every call returns code;
 *  - cuDriverGetVersion reports 13000.
 *
 * Virtual memory management (cuda-vmm-fd): cuMemImportFromShareableHandle
 * takes a dup of any regular-file or memfd descriptor whose size is a
 * multiple of the 2 MiB granularity; cuMemAddressReserve reserves host
 * address space (PROT_NONE); cuMemMap maps the file there, still
 * inaccessible, so touching it before cuMemSetAccess faults as on a GPU;
 * cuMemSetAccess makes it readable (PROT_READ = 1) or writable (3);
 * sizes and offsets off the granularity, a map past the file's end, an
 * unknown handle and cuMemAddressFree over a mapping are INVALID_VALUE.
 * fake_vmm_mapped() counts the live mappings, fake_vmm_handles() the
 * handles not yet released, fake_vmm_access_grants(flags) the
 * cuMemSetAccess calls that granted flags. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <errno.h>

typedef struct { char bytes[16]; } CUuuid;
typedef struct { char reserved[64]; } CUipcMemHandle;

enum { OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_CONTEXT = 201, INVALID_DEVICE = 101,
       MAP_FAILED_ = 205, CONTEXT_IS_DESTROYED = 709 };
enum { NDEV = 2, MAXMAP = 64 };

static int initialized, current_ctx, opens, closes, sticky;
static int retains[NDEV];
static struct { uint64_t ptr; size_t len; int dev; int refs; char path[60]; } maps[MAXMAP];

int fake_opens(void) { return opens; }
int fake_closes(void) { return closes; }
int fake_retains(void) { return retains[0] + retains[1]; }
int fake_mapped(void) {
    int n = 0;
    for (int i = 0; i < MAXMAP; i++) n += maps[i].ptr != 0;
    return n;
}
void fake_fault(int code) { sticky = code; }

int cuInit(unsigned flags) { if (sticky) return sticky; if (flags) return INVALID_VALUE; initialized = 1; return OK; }
int cuDriverGetVersion(int *v) { *v = 13000; return OK; }
int cuDeviceGetCount(int *n) { if (sticky) return sticky; if (!initialized) return NOT_INITIALIZED; *n = NDEV; return OK; }
int cuDeviceGet(int *dev, int ordinal) {
    if (sticky) return sticky;
    if (!initialized) return NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= NDEV) return INVALID_DEVICE;
    *dev = ordinal; return OK;
}
int cuDeviceGetUuid_v2(CUuuid *u, int dev) {
    if (sticky) return sticky;
    if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
    memset(u->bytes, 0x11 * dev, 16); return OK;
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (sticky) return sticky;
    if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
    *ctx = (void *)(intptr_t)(dev + 1); retains[dev]++; return OK;
}
int cuDevicePrimaryCtxRelease_v2(int dev) {
    if (dev < 0 || dev >= NDEV || retains[dev] == 0) return INVALID_DEVICE;
    if (--retains[dev] == 0) {
        /* The last release destroys the context and its mappings. */
        for (int i = 0; i < MAXMAP; i++) {
            if (maps[i].ptr && maps[i].dev == dev) {
                munmap((void *)(uintptr_t)maps[i].ptr, maps[i].len);
                maps[i].ptr = 0;
            }
        }
    }
    return sticky ? sticky : OK;
}
int cuCtxPushCurrent_v2(void *ctx) { current_ctx = (int)(intptr_t)ctx; return sticky ? sticky : OK; }
int cuCtxPopCurrent_v2(void **old) { *old = (void *)(intptr_t)current_ctx; current_ctx = 0; return sticky ? sticky : OK; }

static int need_ctx(void) {
    if (sticky) return sticky;
    if (!current_ctx) return INVALID_CONTEXT;
    if (retains[current_ctx - 1] == 0) return CONTEXT_IS_DESTROYED;
    return OK;
}

int cuIpcOpenMemHandle_v2(uint64_t *p, CUipcMemHandle h, unsigned flags) {
    int r = need_ctx();
    if (r) return r;
    if (flags != 1) return INVALID_VALUE; /* wcache must ask for lazy peer access */
    int32_t pid;
    memcpy(&pid, h.reserved + 60, 4);
    if (pid == getpid()) return INVALID_CONTEXT;
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) return INVALID_VALUE; /* exporter gone */
    char path[61];
    memcpy(path, h.reserved, 60); path[60] = 0;
    int dev = current_ctx - 1;
    for (int i = 0; i < MAXMAP; i++) {
        if (maps[i].ptr && maps[i].dev == dev && strcmp(maps[i].path, path) == 0) {
            maps[i].refs++;
            *p = maps[i].ptr;
            return OK;
        }
    }
    int fd = open(path, O_RDWR);
    if (fd < 0) return INVALID_VALUE;
    struct stat st;
    fstat(fd, &st);
    void *m = mmap(0, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return MAP_FAILED_;
    for (int i = 0; i < MAXMAP; i++) {
        if (!maps[i].ptr) {
            maps[i].ptr = (uint64_t)(uintptr_t)m; maps[i].len = st.st_size; maps[i].dev = dev; maps[i].refs = 1;
            strncpy(maps[i].path, path, sizeof maps[i].path - 1);
            break;
        }
    }
    *p = (uint64_t)(uintptr_t)m; opens++;
    return OK;
}

int cuIpcCloseMemHandle(uint64_t p) {
    int r = need_ctx();
    if (r) return r;
    for (int i = 0; i < MAXMAP; i++) {
        if (maps[i].ptr == p) {
            if (--maps[i].refs == 0) { munmap((void *)(uintptr_t)p, maps[i].len); maps[i].ptr = 0; }
            closes++;
            return OK;
        }
    }
    return INVALID_VALUE;
}

/* ------------------------------------------------ virtual memory management */

typedef struct { int type, id; } CUmemLocation;
typedef struct {
    unsigned type, requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct { CUmemLocation location; unsigned flags; } CUmemAccessDesc;

enum { GRAN = 2 << 20, MAXVMM = 64, NOT_SUPPORTED = 801 };
static struct { int fd; size_t size; int live; } vhandles[MAXVMM];
static struct { uint64_t base; size_t size; int mapped; } vres[MAXVMM];

/* access_grants counts the cuMemSetAccess calls that granted each flags
 * value (0 none, 1 read, 3 read-write): fake_vmm_access_grants(flags). */
static int access_grants[4];
int fake_vmm_access_grants(int flags) { return flags >= 0 && flags < 4 ? access_grants[flags] : -1; }
int fake_vmm_mapped(void) { int n = 0; for (int i = 0; i < MAXVMM; i++) n += vres[i].mapped; return n; }
int fake_vmm_handles(void) { int n = 0; for (int i = 0; i < MAXVMM; i++) n += vhandles[i].live; return n; }

int cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option) {
    if (sticky) return sticky;
    if (!g || !prop || prop->type != 1 || prop->location.type != 1 || (option != 0 && option != 1)) return INVALID_VALUE;
    if (prop->location.id < 0 || prop->location.id >= NDEV) return INVALID_DEVICE;
    *g = GRAN; return OK;
}

int cuMemImportFromShareableHandle(uint64_t *h, void *os_handle, int type) {
    int r = need_ctx();
    if (r) return r;
    if (type != 1) return NOT_SUPPORTED;
    struct stat st;
    int fd = (int)(intptr_t)os_handle;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0 || st.st_size % GRAN) return INVALID_VALUE;
    for (int i = 0; i < MAXVMM; i++) {
        if (!vhandles[i].live) {
            vhandles[i].fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
            vhandles[i].size = st.st_size; vhandles[i].live = 1;
            *h = (uint64_t)i + 1; return OK;
        }
    }
    return INVALID_VALUE;
}

int cuMemRelease(uint64_t h) {
    if (h == 0 || h > MAXVMM || !vhandles[h - 1].live) return INVALID_VALUE;
    close(vhandles[h - 1].fd); vhandles[h - 1].live = 0; return OK; /* mappings keep the pages */
}

int cuMemAddressReserve(uint64_t *p, size_t size, size_t align, uint64_t addr, unsigned long long flags) {
    (void)align; (void)addr;
    if (sticky) return sticky;
    if (!p || size == 0 || size % GRAN || flags) return INVALID_VALUE;
    for (int i = 0; i < MAXVMM; i++) {
        if (!vres[i].base) {
            void *m = mmap(0, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) return 2;
            vres[i].base = (uint64_t)(uintptr_t)m; vres[i].size = size; vres[i].mapped = 0;
            *p = vres[i].base; return OK;
        }
    }
    return INVALID_VALUE;
}

static int find_res(uint64_t p, size_t size) {
    for (int i = 0; i < MAXVMM; i++) if (vres[i].base == p && vres[i].size == size) return i;
    return -1;
}

int cuMemMap(uint64_t p, size_t size, size_t off, uint64_t h, unsigned long long flags) {
    int r = need_ctx();
    if (r) return r;
    int i = find_res(p, size); /* whole reservations only: all wcache maps */
    if (i < 0 || flags || off % GRAN || vres[i].mapped) return INVALID_VALUE;
    if (h == 0 || h > MAXVMM || !vhandles[h - 1].live || off > vhandles[h - 1].size || size > vhandles[h - 1].size - off)
        return INVALID_VALUE;
    void *m = mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, vhandles[h - 1].fd, (off_t)off);
    if (m == MAP_FAILED) return 2;
    vres[i].mapped = 1; return OK;
}

int cuMemSetAccess(uint64_t p, size_t size, const CUmemAccessDesc *d, size_t count) {
    int r = need_ctx();
    if (r) return r;
    int i = find_res(p, size);
    if (i < 0 || !vres[i].mapped || !d || count != 1 || d->location.type != 1) return INVALID_VALUE;
    if (d->location.id != current_ctx - 1) return INVALID_DEVICE;
    int prot = d->flags == 1 ? PROT_READ : d->flags == 3 ? PROT_READ | PROT_WRITE : d->flags == 0 ? PROT_NONE : -1;
    if (prot < 0) return INVALID_VALUE;
    if (mprotect((void *)(uintptr_t)p, size, prot) != 0) return INVALID_VALUE;
    access_grants[d->flags]++;
    return OK;
}

int cuMemUnmap(uint64_t p, size_t size) {
    int i = find_res(p, size);
    if (i < 0 || !vres[i].mapped) return INVALID_VALUE;
    mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    vres[i].mapped = 0; return OK;
}

int cuMemAddressFree(uint64_t p, size_t size) {
    int i = find_res(p, size);
    if (i < 0 || vres[i].mapped) return INVALID_VALUE;
    munmap((void *)(uintptr_t)p, size);
    vres[i].base = 0; return OK;
}
