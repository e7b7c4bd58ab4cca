/*
 * fakedevices.h - what every fake vendor library (the fake CUDA and NVML,
 * the fake HIP and amdsmi) does with devices alike: read the device-list
 * variable (FAKECUDA_DEVICES in plugins/cuda/testdata/fakecuda/fakeconfig.h,
 * FAKEHIP_DEVICES in plugins/rocm/testdata/fakehip/fakeamd.h: a count
 * ("3") or a comma list of entries in the vendor's own form), and open an
 * entry point on one device (FAKE_CHECK_DEVICE).
 */
#ifndef WCACHE_FAKEDEVICES_H
#define WCACHE_FAKEDEVICES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fake_devices reads the device-list variable name ("2" when unset or
 * empty) into the vendor's table out of at most max devices: for a count
 * n it calls generate(out, i) for each device i < n, for a comma list
 * entry(out, i, tok) for each entry (tok NUL-terminated and the entry's
 * own to change; an empty one but a trailing one included), which returns
 * nonzero, after saying why on stderr, when tok is malformed. It returns
 * the count, or -1 when the variable is malformed (told as who). */
static int fake_devices(const char *who, const char *name, int max, void *out, void (*generate)(void *out, int i),
                        int (*entry)(void *out, int i, char *tok)) {
    const char *env = getenv(name);
    if (env == NULL || *env == '\0') env = "2";
    if (strspn(env, "0123456789") == strlen(env)) {
        int n = atoi(env);
        if (n < 0 || n > max) {
            fprintf(stderr, "%s: %s=%s: at most %d devices\n", who, name, env, max);
            return -1;
        }
        for (int i = 0; i < n; i++) generate(out, i);
        return n;
    }
    char *copy = strdup(env), *end;
    int n = 0;
    for (char *tok = copy; tok; tok = end ? end + 1 : NULL) {
        end = strchr(tok, ',');
        if (end) *end = '\0';
        else if (*tok == '\0') break; /* a trailing comma */
        if (n == max) {
            fprintf(stderr, "%s: %s: at most %d devices\n", who, name, max);
            n = -1;
            break;
        }
        if (entry(out, n, tok) != 0) {
            n = -1;
            break;
        }
        n++;
    }
    free(copy);
    return n;
}

/* FAKE_CHECK_DEVICE opens an entry point on device d: it returns
 * check(d)'s error (the library's own device check: initialisation, the
 * sticky error, the device), then code when bad holds (the arguments; d
 * is valid by then). */
#define FAKE_CHECK_DEVICE(check, d, bad, code) \
    do {                                       \
        int fake_r_ = (check)(d);              \
        if (fake_r_) return fake_r_;           \
        if (bad) return code;                  \
    } while (0)

#endif
