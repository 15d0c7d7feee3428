/* fault.c -- the fault spec parser (fault.h). */
#include "trainer/fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The keys a kind takes, all required.
enum { KEY_RANK = 1, KEY_ITER = 2, KEY_BATCHES = 4, KEY_MS = 8, KEY_MB = 16, KEY_PHASE = 32,
       KEY_PARAM = 64 };

typedef struct KindInfo {
    const char *name;
    FaultKind kind;
    unsigned keys;
    const char *usage; // for messages
} KindInfo;

static const KindInfo KINDS[] = {
    {"nogt", FAULT_NOGT, KEY_RANK | KEY_ITER, "nogt:rank=R,iter=I"},
    {"unused", FAULT_UNUSED, KEY_PARAM | KEY_RANK, "unused:param=GLOB,rank=R"},
    {"skip_backward", FAULT_SKIP_BACKWARD, KEY_RANK | KEY_ITER, "skip_backward:rank=R,iter=I"},
    {"uneven", FAULT_UNEVEN, KEY_RANK | KEY_BATCHES, "uneven:rank=R,batches=K"},
    {"no_sync", FAULT_NO_SYNC, KEY_RANK | KEY_ITER, "no_sync:rank=R,iter=I"},
    {"bucket_cap", FAULT_BUCKET_CAP, KEY_RANK | KEY_MB, "bucket_cap:rank=R,mb=M"},
    {"kill", FAULT_KILL, KEY_RANK | KEY_ITER | KEY_PHASE,
     "kill:rank=R,iter=I,phase=forward|backward|allreduce"},
    {"slow", FAULT_SLOW, KEY_RANK | KEY_MS, "slow:rank=R,ms=M"},
    {"shape", FAULT_SHAPE, KEY_RANK, "shape:rank=R"},
};
#define N_KINDS ((int)(sizeof KINDS / sizeof KINDS[0]))

static const struct {
    const char *name;
    unsigned bit;
} KEYS[] = {{"rank", KEY_RANK}, {"iter", KEY_ITER},   {"batches", KEY_BATCHES}, {"ms", KEY_MS},
            {"mb", KEY_MB},     {"phase", KEY_PHASE}, {"param", KEY_PARAM}};
#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

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

// One key=value into out; -1 with err.
static int parse_value(const char *spec, unsigned bit, const char *key, const char *value,
                       Fault *out, char *err, size_t errlen) {
    int64_t v;
    switch (bit) {
    case KEY_RANK:
        if (parse_count(spec, key, value, 1 << 16, &v, err, errlen)) return -1;
        out->rank = (int)v;
        return 0;
    case KEY_ITER: return parse_count(spec, key, value, INT64_MAX, &out->iter, err, errlen);
    case KEY_BATCHES:
        if (parse_count(spec, key, value, INT64_MAX, &out->batches, err, errlen)) return -1;
        if (out->batches == 0) break;
        return 0;
    case KEY_MS:
        if (parse_count(spec, key, value, 3600 * 1000, &out->ms, err, errlen)) return -1;
        return 0;
    case KEY_MB: {
        char *end;
        errno = 0;
        out->mb = strtod(value, &end);
        if (errno || end == value || *end || !(out->mb > 0) || out->mb > 1e6) break;
        return 0;
    }
    case KEY_PHASE:
        if (!strcmp(value, "forward")) out->phase = FAULT_PHASE_FORWARD;
        else if (!strcmp(value, "backward")) out->phase = FAULT_PHASE_BACKWARD;
        else if (!strcmp(value, "allreduce")) out->phase = FAULT_PHASE_ALLREDUCE;
        else {
            snprintf(err, errlen, "fault=%s: phase=%s: expected forward, backward or allreduce",
                     spec, value);
            return -1;
        }
        return 0;
    case KEY_PARAM:
        if (!*value || strlen(value) >= sizeof out->param) break;
        snprintf(out->param, sizeof out->param, "%s", value);
        return 0;
    }
    snprintf(err, errlen, "fault=%s: %s=%s: expected %s", spec, key, value,
             bit == KEY_MB        ? "a size in MiB in (0, 1e6]"
             : bit == KEY_BATCHES ? "an integer >= 1"
                                  : "a name pattern under 128 characters");
    return -1;
}

int fault_parse(const char *spec, Fault *out, char *err, size_t errlen) {
    const char *colon = strchr(spec, ':');
    size_t kind_len = colon ? (size_t)(colon - spec) : strlen(spec);
    const KindInfo *info = NULL;
    for (int k = 0; k < N_KINDS; k++)
        if (strlen(KINDS[k].name) == kind_len && !strncmp(spec, KINDS[k].name, kind_len))
            info = &KINDS[k];
    if (!info) {
        snprintf(err, errlen,
                 "fault=%s: unknown fault '%.*s' (expected nogt, unused, skip_backward, uneven, "
                 "no_sync, bucket_cap, kill, slow or shape)",
                 spec, (int)kind_len, spec);
        return -1;
    }
    *out = (Fault){.kind = info->kind, .rank = -1, .iter = -1};
    unsigned seen = 0;
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", colon ? colon + 1 : "") >= (int)sizeof buf) {
        snprintf(err, errlen, "fault=%.64s...: too long", spec);
        return -1;
    }
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, errlen, "fault=%s: '%s' is not key=value (expected %s)", spec, item,
                     info->usage);
            return -1;
        }
        *eq = '\0';
        unsigned bit = 0;
        for (int k = 0; k < N_KEYS; k++)
            if (!strcmp(item, KEYS[k].name)) bit = KEYS[k].bit;
        if (!(bit & info->keys)) {
            snprintf(err, errlen, "fault=%s: unknown key '%s' (expected %s)", spec, item,
                     info->usage);
            return -1;
        }
        if (seen & bit) {
            snprintf(err, errlen, "fault=%s: '%s' given twice", spec, item);
            return -1;
        }
        seen |= bit;
        if (parse_value(spec, bit, item, eq + 1, out, err, errlen)) return -1;
    }
    for (int k = 0; k < N_KEYS; k++)
        if ((info->keys & KEYS[k].bit) && !(seen & KEYS[k].bit)) {
            snprintf(err, errlen, "fault=%s: missing %s= (expected %s)", spec, KEYS[k].name,
                     info->usage);
            return -1;
        }
    return 0;
}

const Fault *fault_find(const Fault *faults, int n, FaultKind kind, int rank, int64_t ni) {
    for (int k = 0; k < n; k++)
        if (faults[k].kind == kind && faults[k].rank == rank &&
            (ni < 0 || faults[k].iter < 0 || faults[k].iter == ni))
            return &faults[k];
    return NULL;
}

bool fault_hits(const Fault *faults, int n, FaultKind kind, int rank, int64_t ni) {
    return fault_find(faults, n, kind, rank, ni) != NULL;
}
