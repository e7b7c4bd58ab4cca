/*
 * fakesticky.h - the sticky error of the fake GPU drivers
 * (plugins/internal/testkit/fakelib): the first fatal error (CUDA's sticky errors,
 * HIP's fatal ones), returned by every later call of the process. A test
 * latches one from outside by writing its code into the file the variable
 * named by the driver (FAKECUDA_STICKY_FILE, FAKEHIP_STICKY_FILE) points
 * at. Include it in exactly one C file, after <pthread.h>.
 */
#ifndef WCACHE_FAKESTICKY_H
#define WCACHE_FAKESTICKY_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* fs_sticky is the latched code, 0 while none. */
static int fs_sticky;

/* fs_latch latches code unless an error is latched already. */
static void fs_latch(int code) {
    if (!fs_sticky) fs_sticky = code;
}

/* fs_check returns the latched code, latching one from the file named by
 * the environment variable env when that file exists and holds a code;
 * mu guards the latch. */
static int fs_check(pthread_mutex_t *mu, const char *env) {
    if (fs_sticky) return fs_sticky;
    const char *f = getenv(env);
    if (f && *f) {
        FILE *fp = fopen(f, "r");
        if (fp) {
            int code = 0;
            if (fscanf(fp, "%d", &code) == 1 && code != 0) {
                pthread_mutex_lock(mu);
                fs_latch(code);
                pthread_mutex_unlock(mu);
            }
            fclose(fp);
        }
    }
    return fs_sticky;
}

#endif
