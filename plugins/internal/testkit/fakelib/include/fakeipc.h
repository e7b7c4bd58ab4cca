/*
 * fakeipc.h - the cross-process IPC of the fake GPU drivers
 * (plugins/internal/testkit/fakelib): device memory is a memfd per allocation,
 * named <prefix>-<pid>-<id>-<nonce>; a handle names the exporter's pid, the
 * memfd's descriptor number, the id and the nonce; another process maps
 * /proc/<pid>/fd/<fd> after checking the link still names that memfd (so
 * a freed allocation whose descriptor number was reused is not mapped).
 * Include it in exactly one C file, after <sys/types.h>.
 */
#ifndef WCACHE_FAKEIPC_H
#define WCACHE_FAKEIPC_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* fi_rand64 returns a fresh nonce (salted with salt). */
static uint64_t fi_rand64(uint64_t salt) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ ((uint64_t)getpid() << 16) ^ salt;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* fi_memfd_name writes the memfd name of an allocation. */
static void fi_memfd_name(char *buf, size_t len, const char *prefix, pid_t pid, uint64_t id, uint64_t nonce) {
    snprintf(buf, len, "%s-%d-%llu-%016llx", prefix, (int)pid, (unsigned long long)id, (unsigned long long)nonce);
}

/* fi_exporter_gone reports whether process pid has exited. */
static int fi_exporter_gone(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    return access(path, F_OK) != 0;
}

enum { FI_OK = 0, FI_INVALID = 1, FI_NOMEM = 2 };

/* fi_map_exported maps size bytes of the memfd fd of process pid after
 * checking it is still the allocation (prefix, id, nonce) and holds size
 * bytes. FI_INVALID: exporter gone, freed, or too small; FI_NOMEM: mmap
 * failed. */
static int fi_map_exported(const char *prefix, pid_t pid, int fd, uint64_t id, uint64_t nonce, uint64_t size,
                           unsigned char **out) {
    char path[64], link[256], want[160], name[112];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0) return FI_INVALID;
    link[n] = '\0';
    fi_memfd_name(name, sizeof name, prefix, pid, id, nonce);
    snprintf(want, sizeof want, "/memfd:%s (deleted)", name);
    if (strcmp(link, want) != 0) return FI_INVALID;
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) return FI_INVALID;
    struct stat st;
    if (fstat(f, &st) != 0 || (uint64_t)st.st_size < size) {
        close(f);
        return FI_INVALID;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    close(f);
    if (m == MAP_FAILED) return FI_NOMEM;
    *out = m;
    return FI_OK;
}

#endif
