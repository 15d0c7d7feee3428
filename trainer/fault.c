/* fault.c -- the fault spec parser (fault.h). */
#include "trainer/fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct KindInfo {
    const char *name;
    FaultKind kind;
    const char *keys; // the keys it requires, for messages
} KindInfo;

static const KindInfo KINDS[] = {{"nogt", FAULT_NOGT, "rank=R,iter=I"}};
#define N_KINDS ((int)(sizeof KINDS / sizeof KINDS[0]))

static int parse_count(const char *spec, const char *key, const char *text, int64_t hi,
                       int64_t *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > hi) {
        snprintf(err, errlen, "fault=%s: %s=%s: expected an integer in [0, %lld]", spec, key, text,
                 (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int fault_parse(const char *spec, Fault *out, char *err, size_t errlen) {
    const char *colon = strchr(spec, ':');
    size_t kind_len = colon ? (size_t)(colon - spec) : strlen(spec);
    const KindInfo *info = NULL;
    for (int k = 0; k < N_KINDS; k++)
        if (strlen(KINDS[k].name) == kind_len && !strncmp(spec, KINDS[k].name, kind_len))
            info = &KINDS[k];
    if (!info) {
        snprintf(err, errlen, "fault=%s: unknown fault '%.*s' (expected nogt:rank=R,iter=I)", spec,
                 (int)kind_len, spec);
        return -1;
    }
    if (!colon) {
        snprintf(err, errlen, "fault=%s: expected %s:%s", spec, info->name, info->keys);
        return -1;
    }
    *out = (Fault){.kind = info->kind, .rank = -1, .iter = -1};
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", colon + 1) >= (int)sizeof buf) {
        snprintf(err, errlen, "fault=%.64s...: too long", spec);
        return -1;
    }
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, errlen, "fault=%s: '%s' is not key=value (expected %s:%s)", spec, item,
                     info->name, info->keys);
            return -1;
        }
        *eq = '\0';
        int64_t v;
        if (!strcmp(item, "rank")) {
            if (out->rank >= 0) goto repeated;
            if (parse_count(spec, item, eq + 1, 1 << 16, &v, err, errlen)) return -1;
            out->rank = (int)v;
        } else if (!strcmp(item, "iter")) {
            if (out->iter >= 0) goto repeated;
            if (parse_count(spec, item, eq + 1, INT64_MAX, &v, err, errlen)) return -1;
            out->iter = v;
        } else {
            snprintf(err, errlen, "fault=%s: unknown key '%s' (expected %s:%s)", spec, item,
                     info->name, info->keys);
            return -1;
        }
        continue;
    repeated:
        snprintf(err, errlen, "fault=%s: '%s' given twice", spec, item);
        return -1;
    }
    if (out->rank < 0 || out->iter < 0) {
        snprintf(err, errlen, "fault=%s: missing %s (expected %s:%s)", spec,
                 out->rank < 0 ? "rank=" : "iter=", info->name, info->keys);
        return -1;
    }
    return 0;
}

bool fault_hits(const Fault *faults, int n, FaultKind kind, int rank, int64_t ni) {
    for (int k = 0; k < n; k++)
        if (faults[k].kind == kind && faults[k].rank == rank && faults[k].iter == ni) return true;
    return false;
}
