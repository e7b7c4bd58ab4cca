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
 *  - cuDriverGetVersion reports 13000. */
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
