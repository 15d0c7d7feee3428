/* device.c -- device= parsing and the default device (device.h). */
#include "trainer/device.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"

const char *device_default_spec(void) {
    const char *env = getenv("DDPDBG_DEVICE");
    return env && *env ? env : "cpu";
}

// One list entry: "cpu", "fake", "cuda", "cuda:N" or "N".
static int parse_one(const char *spec, const char *entry, size_t len, DeviceChoice *out,
                     char *err, size_t errlen) {
    char e[64];
    if (len == 0 || len >= sizeof e) {
        snprintf(err, errlen, "device=%s: an empty or overlong entry; expected cpu, fake, 0, "
                              "cuda:0 or a list such as 0,1", spec);
        return -1;
    }
    memcpy(e, entry, len);
    e[len] = '\0';
    for (char *c = e; *c; c++) *c = (char)tolower((unsigned char)*c);
    if (!strcmp(e, "cpu")) return *out = (DeviceChoice){DEV_CPU, 0}, 0;
    if (!strcmp(e, "fake")) return *out = (DeviceChoice){DEV_FAKE, 0}, 0;
    const char *num = e;
    if (!strcmp(e, "cuda")) num = "0";
    else if (!strncmp(e, "cuda:", 5)) num = e + 5;
    char *end = NULL;
    long idx = *num ? strtol(num, &end, 10) : -1;
    if (!*num || *end || idx < 0 || idx > 1023) {
        snprintf(err, errlen, "device=%s: '%s' is not a device; expected cpu, fake, a CUDA "
                              "index such as 0 or cuda:0, or a list such as 0,1", spec, e);
        return -1;
    }
    *out = (DeviceChoice){DEV_CUDA, (int)idx};
    return 0;
}

int device_parse(const char *spec, int local_rank, DeviceChoice *out, char *err, size_t errlen) {
    CHECK(local_rank >= 0, "local_rank %d", local_rank);
    int n = 1;
    for (const char *c = spec; *c; c++) n += *c == ',';
    int pick = n == 1 ? 0 : local_rank;
    if (pick >= n) {
        snprintf(err, errlen, "device=%s: LOCAL_RANK=%d but the list names %d devices (one per "
                              "local rank expected)", spec, local_rank, n);
        return -1;
    }
    const char *entry = spec;
    for (int k = 0; k < pick; k++) entry = strchr(entry, ',') + 1;
    const char *stop = strchr(entry, ',');
    size_t len = stop ? (size_t)(stop - entry) : strlen(entry);
    if (parse_one(spec, entry, len, out, err, errlen)) return -1;
    if (out->dev == DEV_CUDA && !backend_get(DEV_CUDA)) {
        snprintf(err, errlen, "device=%s: CUDA device %d requested, but this build has no CUDA "
                              "backend (build with `make CUDA=1`, run build/cuda/bin/ddpdbg-train)",
                 spec, out->index);
        return -1;
    }
    return 0;
}

int device_open(DeviceChoice d, char *err, size_t errlen) {
    const Backend *be = backend_get(d.dev);
    if (!be) {
        snprintf(err, errlen, "device %s is not available in this build", device_name(d.dev));
        return -1;
    }
    char why[256] = "";
    if (be->set_device(d.index, why, sizeof why)) {
        snprintf(err, errlen, "device=%s: %s", device_name(d.dev), why);
        return -1;
    }
    return 0;
}
