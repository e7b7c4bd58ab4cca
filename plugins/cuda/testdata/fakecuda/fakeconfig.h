/*
 * fakeconfig.h - the physical device table shared by the fake CUDA driver
 * (fakecuda.c) and the fake NVML library (../fakenvml/fakenvml.c).
 *
 * Environment (read once per process):
 *   FAKECUDA_DEVICES   a count ("3") or a comma list of device UUIDs, each
 *                      32 hex digits, dashes optional, optional "GPU-" or
 *                      "MIG-" prefix. A "MIG-" entry is a MIG compute
 *                      instance. Default: 2 devices. Order = PCI bus order.
 *   FAKECUDA_MEMORY    bytes of device memory per device (default 1 GiB).
 *
 * Generated UUIDs (count form): a<i>cec0da-0000-4000-8000-0000000000<i>,
 * i.e. GPU-a0cec0da-..., GPU-a1cec0da-..., distinct from the first digit.
 * Device i sits on PCI bus 0x10*(i+1), domain 0, device 0.
 * A MIG instance's physical GPU UUID (what cuDeviceGetUuid v1 returns in
 * CUDA 12) is its MIG UUID with every byte inverted.
 */
#ifndef FAKECONFIG_H
#define FAKECONFIG_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakedevices.h"

#define FAKE_MAX_DEVICES 16

struct fake_phys {
    unsigned char uuid[16];   /* MIG UUID for MIG instances */
    unsigned char parent[16]; /* physical GPU UUID (== uuid unless mig) */
    int mig;
    int bus;
};

static int fake_hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* fake_parse_uuid parses 32 hex digits (dashes ignored) into out. */
static int fake_parse_uuid(const char *s, size_t n, unsigned char out[16]) {
    int digits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '-') continue;
        int v = fake_hexval((unsigned char)s[i]);
        if (v < 0 || digits >= 32) return -1;
        if (digits % 2 == 0) out[digits / 2] = (unsigned char)(v << 4);
        else out[digits / 2] |= (unsigned char)v;
        digits++;
    }
    return digits == 32 ? 0 : -1;
}

/* fake_uuid_hex writes the 8-4-4-4-12 lowercase form (36 chars + NUL). */
static void fake_uuid_hex(const unsigned char u[16], char out[37]) {
    snprintf(out, 37,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
             u[11], u[12], u[13], u[14], u[15]);
}

/* fake_generated_device is device i of the count form. */
static void fake_generated_device(void *out, int i) {
    struct fake_phys *d = (struct fake_phys *)out + i;
    memset(d, 0, sizeof *d);
    d->uuid[0] = (unsigned char)(0xa0 + i);
    d->uuid[1] = 0xce;
    d->uuid[2] = 0xc0;
    d->uuid[3] = 0xda;
    d->uuid[6] = 0x40;
    d->uuid[8] = 0x80;
    d->uuid[15] = (unsigned char)i;
    memcpy(d->parent, d->uuid, 16);
    d->bus = 0x10 * (i + 1);
}

/* fake_listed_device is device n of the list form: a UUID, optionally
 * prefixed "GPU-" or "MIG-". */
static int fake_listed_device(void *out, int n, char *tok) {
    struct fake_phys *d = (struct fake_phys *)out + n;
    memset(d, 0, sizeof *d);
    const char *q = tok;
    if (strncasecmp(q, "MIG-", 4) == 0) {
        d->mig = 1;
        q += 4;
    } else if (strncasecmp(q, "GPU-", 4) == 0) {
        q += 4;
    }
    if (fake_parse_uuid(q, strlen(q), d->uuid) != 0) {
        fprintf(stderr, "fake driver: FAKECUDA_DEVICES entry %s is not a 32-hex-digit UUID\n", tok);
        return -1;
    }
    for (int i = 0; i < 16; i++)
        d->parent[i] = d->mig ? (unsigned char)~d->uuid[i] : d->uuid[i];
    d->bus = 0x10 * (n + 1);
    return 0;
}

/* fake_parse_devices fills out (at most FAKE_MAX_DEVICES) from
 * FAKECUDA_DEVICES and returns the count, or -1 when the variable is
 * malformed (reported on stderr). */
static int fake_parse_devices(struct fake_phys *out) {
    return fake_devices("fake driver", "FAKECUDA_DEVICES", FAKE_MAX_DEVICES, out, fake_generated_device,
                        fake_listed_device);
}

/* fake_memory returns FAKECUDA_MEMORY (default 1 GiB). */
static unsigned long long fake_memory(void) {
    const char *env = getenv("FAKECUDA_MEMORY");
    if (env == NULL || *env == '\0') return 1ULL << 30;
    return strtoull(env, NULL, 10);
}

#endif
