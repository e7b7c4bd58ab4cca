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

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

/* fake_device_count reads variable name ("2" when unset or empty) into
 * *env. It returns the count when the value is a bare count, -1 when it is
 * a list, and -2 when the count exceeds max (reported on stderr, as who). */
static int fake_device_count(const char *who, const char *name, int max, const char **env) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') v = "2";
    *env = v;
    for (const char *p = v; *p; p++)
        if (!isdigit((unsigned char)*p)) return -1;
    int n = atoi(v);
    if (n < 0 || n > max) {
        fprintf(stderr, "%s: %s=%s: at most %d devices\n", who, name, v, max);
        return -2;
    }
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
