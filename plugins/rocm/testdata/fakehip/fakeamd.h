/*
 * fakeamd.h - the physical device table shared by the fake HIP runtime
 * (fakehip.c) and the fake amdsmi library (../fakeamdsmi/fakeamdsmi.c).
 *
 * Environment (read once per process):
 *   FAKEHIP_DEVICES  a count ("3") or a comma list of devices, each the
 *                    16 hex digits of its KFD unique_id, optionally
 *                    followed by "@<bus>" (hex PCI bus number): partitions
 *                    of one GPU (MI300X CPX mode) share a bus; "XX" is a
 *                    device without a unique id (HIP reports "XX"). Default: 2
 *                    devices. Order = KFD node order (HIP's default order).
 *   FAKEHIP_MEMORY   bytes of device memory per device (default 1 GiB).
 *
 * Count form: device i has unique_id 0x1901ead3a2ecd4a0 + i and sits on PCI
 * bus 0x10*(i+1), domain 0, device 0, function 0.
 */
#ifndef FAKEAMD_H
#define FAKEAMD_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakedevices.h"

#define FAKE_MAX_DEVICES 16

struct fake_phys {
    unsigned long long unique_id;
    char uuid[17]; /* the 16 hex characters HIP reports as UUID bytes */
    int bus;
};

/* fake_generated_device is device i of the count form. */
static void fake_generated_device(void *out, int i) {
    struct fake_phys *d = (struct fake_phys *)out + i;
    d->unique_id = 0x1901ead3a2ecd4a0ULL + (unsigned long long)i;
    d->bus = 0x10 * (i + 1);
}

/* fake_listed_device is device n of the list form: 16 hex digits or "XX",
 * then optionally "@<bus>". */
static int fake_listed_device(void *out, int n, char *tok) {
    struct fake_phys *d = (struct fake_phys *)out + n;
    char *at = strchr(tok, '@');
    d->bus = 0x10 * (n + 1);
    if (at) {
        *at = '\0';
        d->bus = (int)strtol(at + 1, NULL, 16);
    }
    if (strcmp(tok, "XX") == 0) { /* a device without a unique id: HIP reports "XX" */
        d->unique_id = 0;
        return 0;
    }
    if (strlen(tok) != 16 || strspn(tok, "0123456789abcdefABCDEF") != 16) {
        fprintf(stderr, "fake HIP: FAKEHIP_DEVICES entry %s is not 16 hex digits\n", tok);
        return -1;
    }
    d->unique_id = strtoull(tok, NULL, 16);
    return 0;
}

static int fake_parse_devices(struct fake_phys *out) {
    int n = fake_devices("fake HIP", "FAKEHIP_DEVICES", FAKE_MAX_DEVICES, out, fake_generated_device, fake_listed_device);
    for (int i = 0; i < n; i++) {
        if (out[i].unique_id) snprintf(out[i].uuid, sizeof out[i].uuid, "%016llx", out[i].unique_id);
        else snprintf(out[i].uuid, sizeof out[i].uuid, "XX");
    }
    return n;
}

static unsigned long long fake_memory(void) {
    const char *env = getenv("FAKEHIP_MEMORY");
    if (env == NULL || *env == '\0') return 1ULL << 30;
    return strtoull(env, NULL, 10);
}

#define FAKE_NAME "AMD Instinct MI300X (fake)"

#endif
