/* flightrec.c -- a Flight Recorder dump's pickle as FrDump (flightrec.h): each field looked up
 * by key and type-checked, so that a pickle of something else is named as such. */
#include "tui/postmortem/flightrec.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xcalloc
#include "tui/postmortem/pickle.h"

typedef struct Ctx {
    char *err;
    size_t errlen;
    char where[48]; // "entry 3: ", "" at the top
} Ctx;

static int bad(Ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(Ctx *c, const char *fmt, ...) {
    int n = snprintf(c->err, c->errlen, "not a Flight Recorder dump: %s", c->where);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < c->errlen) vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

// A string from the dump into out: control characters become '?', so that no text the dump
// holds can break a line of ours (an error, a trace's text, a report).
static void copy_text(char *out, size_t len, const char *s) {
    size_t n = 0;
    for (; s && *s && n + 1 < len; s++)
        out[n++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    if (len) out[n] = '\0';
}

// Field key of dict as an integer: 0 and *out set; 1 when absent or None (and !required);
// -1 (an error) when of another type, or absent and required.
static int get_int(Ctx *c, const PickleValue *dict, const char *key, bool required, int64_t *out) {
    const PickleValue *v = pickle_get(dict, key);
    if (!v || v->type == PICKLE_NONE) {
        if (required) return bad(c, "%s is missing", key);
        return 1;
    }
    if (v->type == PICKLE_BOOL) {
        *out = v->b;
        return 0;
    }
    if (v->type != PICKLE_INT)
        return bad(c, "%s is a %s, expected an int", key, pickle_type_name(v->type));
    *out = v->i;
    return 0;
}

static int get_str(Ctx *c, const PickleValue *dict, const char *key, bool required, char *out,
                   size_t len) {
    const PickleValue *v = pickle_get(dict, key);
    if (!v || v->type == PICKLE_NONE) {
        if (required) return bad(c, "%s is missing", key);
        return 1;
    }
    if (v->type != PICKLE_STR)
        return bad(c, "%s is a %s, expected a str", key, pickle_type_name(v->type));
    copy_text(out, len, v->s);
    return 0;
}

static int64_t mul_sat(int64_t a, int64_t b) {
    if (a <= 0 || b <= 0) return 0;
    return a > INT64_MAX / b ? INT64_MAX : a * b;
}

// The sizes list ([[d0, d1], [d0]]): the summed numel into *numel, the first one's shape text.
static int sizes(Ctx *c, const PickleValue *e, const char *key, int64_t *numel, char *shape,
                 size_t len) {
    *numel = 0;
    const PickleValue *v = pickle_get(e, key);
    if (!v) return 0;
    if (v->type != PICKLE_LIST && v->type != PICKLE_TUPLE)
        return bad(c, "%s is a %s, expected a list of sizes", key, pickle_type_name(v->type));
    for (int t = 0; t < v->n; t++) {
        const PickleValue *dims = v->items[t];
        if (dims->type != PICKLE_LIST && dims->type != PICKLE_TUPLE)
            return bad(c, "%s[%d] is a %s, expected a list of ints", key, t,
                       pickle_type_name(dims->type));
        int64_t n = 1;
        size_t at = 0;
        if (t == 0 && shape) at += (size_t)snprintf(shape, len, "[");
        for (int d = 0; d < dims->n; d++) {
            if (dims->items[d]->type != PICKLE_INT)
                return bad(c, "%s[%d][%d] is a %s, expected an int", key, t, d,
                           pickle_type_name(dims->items[d]->type));
            n = mul_sat(n, dims->items[d]->i);
            if (t == 0 && shape && at < len)
                at += (size_t)snprintf(shape + at, len - at, "%s%lld", d ? "," : "",
                                       (long long)dims->items[d]->i);
        }
        if (t == 0 && shape && at < len) snprintf(shape + at, len - at, "]");
        *numel = *numel > INT64_MAX - n ? INT64_MAX : *numel + n;
    }
    return 0;
}

// The innermost frame whose file is not PyTorch's own: where the user's code called in.
static void call_site(const PickleValue *e, char *out, size_t len) {
    out[0] = '\0';
    const PickleValue *frames = pickle_get(e, "frames");
    if (!frames || frames->type != PICKLE_LIST) return;
    for (int k = 0; k < frames->n; k++) {
        const PickleValue *name = pickle_get(frames->items[k], "name");
        const PickleValue *file = pickle_get(frames->items[k], "filename");
        const PickleValue *line = pickle_get(frames->items[k], "line");
        if (!file || file->type != PICKLE_STR || strstr(file->s, "/torch/")) continue;
        const char *base = strrchr(file->s, '/');
        char fn[48], where[80];
        copy_text(fn, sizeof fn, name && name->type == PICKLE_STR ? name->s : "?");
        copy_text(where, sizeof where, base ? base + 1 : file->s);
        snprintf(out, len, "%s (%s:%lld)", fn, where,
                 line && line->type == PICKLE_INT ? (long long)line->i : 0LL);
        return;
    }
}

static int read_entry(Ctx *c, const PickleValue *e, FrEntry *out) {
    *out = (FrEntry){.duration_ms = -1, .pg_id = -1};
    if (e->type != PICKLE_DICT) return bad(c, "a %s, expected a dict", pickle_type_name(e->type));
    char name[64] = "";
    int64_t flag = 0;
    if (get_int(c, e, "record_id", true, &out->record_id) < 0 ||
        get_int(c, e, "collective_seq_id", true, &out->collective_seq_id) < 0 ||
        get_int(c, e, "time_created_ns", true, &out->time_created_ns) < 0 ||
        get_str(c, e, "profiling_name", true, name, sizeof name) < 0 ||
        get_str(c, e, "state", true, out->state, sizeof out->state) < 0 ||
        get_int(c, e, "pg_id", false, &out->pg_id) < 0 ||
        get_int(c, e, "p2p_seq_id", false, &out->p2p_seq_id) < 0 ||
        get_int(c, e, "op_id", false, &out->op_id) < 0 ||
        get_int(c, e, "time_discovered_started_ns", false, &out->time_started_ns) < 0 ||
        get_int(c, e, "time_discovered_completed_ns", false, &out->time_completed_ns) < 0 ||
        get_int(c, e, "timeout_ms", false, &out->timeout_ms) < 0)
        return -1;
    int rc = get_int(c, e, "retired", false, &flag);
    if (rc < 0) return -1;
    out->retired = rc == 0 && flag;
    rc = get_int(c, e, "is_p2p", false, &flag);
    if (rc < 0) return -1;
    out->is_p2p = rc == 0 && flag;
    const char *colon = strchr(name, ':');
    snprintf(out->op, sizeof out->op, "%s", colon ? colon + 1 : name);
    const PickleValue *d = pickle_get(e, "duration_ms");
    if (d && d->type == PICKLE_FLOAT) out->duration_ms = d->f;
    if (d && d->type == PICKLE_INT) out->duration_ms = (double)d->i;
    const PickleValue *pg = pickle_get(e, "process_group");
    if (pg && (pg->type == PICKLE_TUPLE || pg->type == PICKLE_LIST) && pg->n == 2 &&
        pg->items[0]->type == PICKLE_STR && pg->items[1]->type == PICKLE_STR) {
        copy_text(out->pg_name, sizeof out->pg_name, pg->items[0]->s);
        copy_text(out->pg_desc, sizeof out->pg_desc, pg->items[1]->s);
    }
    if (sizes(c, e, "input_sizes", &out->numel_in, out->shape, sizeof out->shape) < 0 ||
        sizes(c, e, "output_sizes", &out->numel_out, NULL, 0) < 0)
        return -1;
    const PickleValue *dt = pickle_get(e, "input_dtypes");
    if (dt && dt->type == PICKLE_LIST && dt->n > 0 && dt->items[0]->type == PICKLE_STR)
        copy_text(out->dtype, sizeof out->dtype, dt->items[0]->s);
    call_site(e, out->site, sizeof out->site);
    return 0;
}

// "[0, 1, 2]" (pg_config's ranks) into g->ranks.
static void parse_ranks(const char *text, FrGroup *g) {
    for (const char *p = text; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        if (v >= 0 && v <= INT_MAX) {
            g->ranks = xrealloc(g->ranks, sizeof(int) * (size_t)(g->n_ranks + 1));
            g->ranks[g->n_ranks++] = (int)v;
        }
        p = end;
    }
}

static int read_groups(Ctx *c, const PickleValue *root, FrDump *out) {
    const PickleValue *cfg = pickle_get(root, "pg_config");
    if (!cfg) return 0;
    if (cfg->type != PICKLE_DICT)
        return bad(c, "pg_config is a %s, expected a dict", pickle_type_name(cfg->type));
    const PickleValue *status = pickle_get(root, "pg_status");
    out->groups = xcalloc((size_t)cfg->n / 2 + 1, sizeof(FrGroup));
    for (int k = 0; k + 1 < cfg->n; k += 2) {
        const PickleValue *info = cfg->items[k + 1];
        FrGroup *g = &out->groups[out->n_groups++];
        *g = (FrGroup){.last_enqueued = -1, .last_started = -1, .last_completed = -1};
        snprintf(c->where, sizeof c->where, "pg_config entry %d: ", k / 2);
        char ranks[4096] = "";
        if (info->type != PICKLE_DICT)
            return bad(c, "a %s, expected a dict", pickle_type_name(info->type));
        if (get_str(c, info, "name", false, g->name, sizeof g->name) < 0 ||
            get_str(c, info, "desc", false, g->desc, sizeof g->desc) < 0 ||
            get_str(c, info, "ranks", false, ranks, sizeof ranks) < 0)
            return -1;
        if (!g->name[0] && cfg->items[k]->type == PICKLE_STR)
            copy_text(g->name, sizeof g->name, cfg->items[k]->s);
        parse_ranks(ranks, g);
        // pg_status is keyed by pg id: the id the entries of this group carry, else its name.
        char id[64];
        snprintf(id, sizeof id, "%s", g->name);
        for (int i = 0; i < out->n_entries; i++)
            if (!strcmp(out->entries[i].pg_name, g->name) && out->entries[i].pg_id >= 0) {
                snprintf(id, sizeof id, "%lld", (long long)out->entries[i].pg_id);
                break;
            }
        const PickleValue *st = pickle_get(status, id);
        if (st && st->type == PICKLE_DICT) {
            snprintf(c->where, sizeof c->where, "pg_status %.30s: ", id);
            if (get_int(c, st, "last_enqueued_collective", false, &g->last_enqueued) < 0 ||
                get_int(c, st, "last_started_collective", false, &g->last_started) < 0 ||
                get_int(c, st, "last_completed_collective", false, &g->last_completed) < 0)
                return -1;
        }
    }
    c->where[0] = '\0';
    return 0;
}

int fr_dump_read(const uint8_t *data, size_t len, FrDump *out, char *err, size_t errlen) {
    *out = (FrDump){0};
    Pickle *p = pickle_read(data, len, err, errlen);
    if (!p) return -1;
    Ctx c = {.err = err, .errlen = errlen};
    const PickleValue *root = pickle_root(p);
    int rc = -1;
    if (root->type != PICKLE_DICT) {
        bad(&c, "the pickle holds a %s, expected a dict with version and entries",
            pickle_type_name(root->type));
        goto done;
    }
    if (get_str(&c, root, "version", true, out->version, sizeof out->version) < 0) goto done;
    if (strncmp(out->version, "2.", 2)) {
        snprintf(err, errlen, "Flight Recorder dump version %s; this ddpdbg reads versions 2.x",
                 out->version);
        goto done;
    }
    const PickleValue *entries = pickle_get(root, "entries");
    if (entries && entries->type != PICKLE_LIST) {
        bad(&c, "entries is a %s, expected a list", pickle_type_name(entries->type));
        goto done;
    }
    int n = entries ? entries->n : 0;
    out->entries = xcalloc((size_t)n + 1, sizeof(FrEntry));
    for (int i = 0; i < n; i++) {
        snprintf(c.where, sizeof c.where, "entry %d: ", i);
        if (read_entry(&c, entries->items[i], &out->entries[i]) < 0) goto done;
        out->n_entries++;
    }
    c.where[0] = '\0';
    rc = read_groups(&c, root, out);
done:
    pickle_free(p);
    if (rc < 0) fr_dump_free(out);
    return rc;
}

void fr_dump_free(FrDump *d) {
    for (int g = 0; g < d->n_groups; g++)
        free(d->groups[g].ranks);
    free(d->groups);
    free(d->entries);
    *d = (FrDump){0};
}

const FrGroup *fr_group(const FrDump *d, const char *name) {
    for (int g = 0; g < d->n_groups; g++)
        if (!strcmp(d->groups[g].name, name) || !strcmp(d->groups[g].desc, name))
            return &d->groups[g];
    return NULL;
}
