/* A fake libcuda.so.1 for testing wcache's ctypes driver path without a GPU.
 *
 * Implements only the entry points wcache.ipc.CudaDriver binds. "Device
 * memory" is host memory: an IPC handle's 64 bytes hold the NUL-terminated
 * path of a file, and cuIpcOpenMemHandle_v2 maps that file. Device d has the
 * UUID whose 16 bytes are all 0x11 * d (device 0: 00…, device 1: 11…).
 * Counters let tests check that each handle is opened once and closed. */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct { char bytes[16]; } CUuuid;
typedef struct { char reserved[64]; } CUipcMemHandle;

enum { OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_CONTEXT = 201, INVALID_DEVICE = 101, MAP_FAILED_ = 205 };
enum { NDEV = 2, MAXMAP = 64 };

static int initialized, current_ctx, retains, opens, closes;
static struct { uint64_t ptr; size_t len; } maps[MAXMAP];

int fake_opens(void) { return opens; }
int fake_closes(void) { return closes; }
int fake_retains(void) { return retains; }

int cuInit(unsigned flags) { if (flags) return INVALID_VALUE; initialized = 1; return OK; }
int cuDeviceGetCount(int *n) { if (!initialized) return NOT_INITIALIZED; *n = NDEV; return OK; }
int cuDeviceGet(int *dev, int ordinal) {
    if (!initialized) return NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= NDEV) return INVALID_DEVICE;
    *dev = ordinal; return OK;
}
int cuDeviceGetUuid_v2(CUuuid *u, int dev) {
    if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
    memset(u->bytes, 0x11 * dev, 16); return OK;
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
    *ctx = (void *)(intptr_t)(dev + 1); retains++; return OK;
}
int cuDevicePrimaryCtxRelease_v2(int dev) {
    if (dev < 0 || dev >= NDEV || retains == 0) return INVALID_DEVICE;
    retains--; return OK;
}
int cuCtxPushCurrent_v2(void *ctx) { current_ctx = (int)(intptr_t)ctx; return OK; }
int cuCtxPopCurrent_v2(void **old) { *old = (void *)(intptr_t)current_ctx; current_ctx = 0; return OK; }

int cuIpcOpenMemHandle_v2(uint64_t *p, CUipcMemHandle h, unsigned flags) {
    if (!current_ctx) return INVALID_CONTEXT;
    if (flags != 1) return INVALID_VALUE; /* wcache must ask for lazy peer access */
    char path[65];
    memcpy(path, h.reserved, 64); path[64] = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return INVALID_VALUE;
    struct stat st;
    fstat(fd, &st);
    void *m = mmap(0, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return MAP_FAILED_;
    for (int i = 0; i < MAXMAP; i++) {
        if (!maps[i].ptr) { maps[i].ptr = (uint64_t)(uintptr_t)m; maps[i].len = st.st_size; break; }
    }
    *p = (uint64_t)(uintptr_t)m; opens++;
    return OK;
}

int cuIpcCloseMemHandle(uint64_t p) {
    if (!current_ctx) return INVALID_CONTEXT;
    for (int i = 0; i < MAXMAP; i++) {
        if (maps[i].ptr == p) { munmap((void *)(uintptr_t)p, maps[i].len); maps[i].ptr = 0; closes++; return OK; }
    }
    return INVALID_VALUE;
}
