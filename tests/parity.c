/* parity.c -- the parity harness (contracts in tests/parity.h): the Backend field list, the
 * buffers a case makes, running a row on two backends, the comparison and the coverage list.
 * The case table is in tests/parity_cases.c. */
#include "tests/parity.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"

// ---- the fields of Backend, by name ----
// Every function-pointer slot of Backend must be here (parity_coverage checks the layout), so
// a field added to kernels/backend.h without a parity case fails test_parity_harness.
typedef struct Field {
    const char *name;
    size_t off;
} Field;

static const Field fields[] = {
    {"alloc", offsetof(Backend, alloc)},
    {"free", offsetof(Backend, free)},
    {"to_device", offsetof(Backend, to_device)},
    {"to_host", offsetof(Backend, to_host)},
    {"set_threads", offsetof(Backend, set_threads)},
    {"set_device", offsetof(Backend, set_device)},
    {"fill", offsetof(Backend, fill)},
    {"copy", offsetof(Backend, copy)},
    {"axpy", offsetof(Backend, axpy)},
    {"gemm", offsetof(Backend, gemm)},
    {"gemm_batched", offsetof(Backend, gemm_batched)},
    {"relu_fwd", offsetof(Backend, relu_fwd)},
    {"relu_bwd", offsetof(Backend, relu_bwd)},
    {"silu_fwd", offsetof(Backend, silu_fwd)},
    {"silu_bwd", offsetof(Backend, silu_bwd)},
    {"gelu_fwd", offsetof(Backend, gelu_fwd)},
    {"gelu_bwd", offsetof(Backend, gelu_bwd)},
    {"sigmoid_fwd", offsetof(Backend, sigmoid_fwd)},
    {"sigmoid_bwd", offsetof(Backend, sigmoid_bwd)},
    {"inverse_sigmoid_fwd", offsetof(Backend, inverse_sigmoid_fwd)},
    {"inverse_sigmoid_bwd", offsetof(Backend, inverse_sigmoid_bwd)},
    {"exp_fwd", offsetof(Backend, exp_fwd)},
    {"exp_bwd", offsetof(Backend, exp_bwd)},
    {"log_fwd", offsetof(Backend, log_fwd)},
    {"log_bwd", offsetof(Backend, log_bwd)},
    {"abs_fwd", offsetof(Backend, abs_fwd)},
    {"abs_bwd", offsetof(Backend, abs_bwd)},
    {"pow_scalar_fwd", offsetof(Backend, pow_scalar_fwd)},
    {"pow_scalar_bwd", offsetof(Backend, pow_scalar_bwd)},
    {"clamp_fwd", offsetof(Backend, clamp_fwd)},
    {"clamp_bwd", offsetof(Backend, clamp_bwd)},
    {"scale_fwd", offsetof(Backend, scale_fwd)},
    {"add_scalar_fwd", offsetof(Backend, add_scalar_fwd)},
    {"add_fwd", offsetof(Backend, add_fwd)},
    {"sub_fwd", offsetof(Backend, sub_fwd)},
    {"mul_fwd", offsetof(Backend, mul_fwd)},
    {"div_fwd", offsetof(Backend, div_fwd)},
    {"maximum_fwd", offsetof(Backend, maximum_fwd)},
    {"minimum_fwd", offsetof(Backend, minimum_fwd)},
    {"add_bwd", offsetof(Backend, add_bwd)},
    {"sub_bwd", offsetof(Backend, sub_bwd)},
    {"mul_bwd", offsetof(Backend, mul_bwd)},
    {"div_bwd", offsetof(Backend, div_bwd)},
    {"maximum_bwd", offsetof(Backend, maximum_bwd)},
    {"minimum_bwd", offsetof(Backend, minimum_bwd)},
    {"bce_logits_fwd", offsetof(Backend, bce_logits_fwd)},
    {"bce_logits_bwd", offsetof(Backend, bce_logits_bwd)},
    {"sum_dim_fwd", offsetof(Backend, sum_dim_fwd)},
    {"mean_dim_fwd", offsetof(Backend, mean_dim_fwd)},
    {"sum_dim_bwd", offsetof(Backend, sum_dim_bwd)},
    {"mean_dim_bwd", offsetof(Backend, mean_dim_bwd)},
    {"softmax_fwd", offsetof(Backend, softmax_fwd)},
    {"softmax_bwd", offsetof(Backend, softmax_bwd)},
    {"layernorm_fwd", offsetof(Backend, layernorm_fwd)},
    {"layernorm_bwd", offsetof(Backend, layernorm_bwd)},
    {"batchnorm_train_fwd", offsetof(Backend, batchnorm_train_fwd)},
    {"batchnorm_eval_fwd", offsetof(Backend, batchnorm_eval_fwd)},
    {"batchnorm_apply", offsetof(Backend, batchnorm_apply)},
    {"batchnorm_bwd", offsetof(Backend, batchnorm_bwd)},
    {"conv2d_fwd", offsetof(Backend, conv2d_fwd)},
    {"conv2d_bwd", offsetof(Backend, conv2d_bwd)},
    {"maxpool2d_fwd", offsetof(Backend, maxpool2d_fwd)},
    {"maxpool2d_bwd", offsetof(Backend, maxpool2d_bwd)},
    {"pad2d_fwd", offsetof(Backend, pad2d_fwd)},
    {"pad2d_bwd", offsetof(Backend, pad2d_bwd)},
    {"upsample_nearest2d_fwd", offsetof(Backend, upsample_nearest2d_fwd)},
    {"upsample_nearest2d_bwd", offsetof(Backend, upsample_nearest2d_bwd)},
    {"bias_rows_fwd", offsetof(Backend, bias_rows_fwd)},
    {"bias_rows_bwd", offsetof(Backend, bias_rows_bwd)},
    {"attention_fwd", offsetof(Backend, attention_fwd)},
    {"attention_bwd", offsetof(Backend, attention_bwd)},
    {"grid_sample_fwd", offsetof(Backend, grid_sample_fwd)},
    {"grid_sample_bwd", offsetof(Backend, grid_sample_bwd)},
    {"msdeform_attn_fwd", offsetof(Backend, msdeform_attn_fwd)},
    {"msdeform_attn_bwd", offsetof(Backend, msdeform_attn_bwd)},
    {"permute_fwd", offsetof(Backend, permute_fwd)},
    {"permute_bwd", offsetof(Backend, permute_bwd)},
    {"block_copy", offsetof(Backend, block_copy)},
    {"block_add", offsetof(Backend, block_add)},
    {"gather_rows_fwd", offsetof(Backend, gather_rows_fwd)},
    {"gather_rows_bwd", offsetof(Backend, gather_rows_bwd)},
};
static const int n_fields = (int)(sizeof fields / sizeof fields[0]);

static const Field *field_named(const char *name, size_t len) {
    for (int i = 0; i < n_fields; i++)
        if (strlen(fields[i].name) == len && !strncmp(fields[i].name, name, len)) return &fields[i];
    return NULL;
}

static bool filled(const Backend *be, const Field *f) {
    void (*fn)(void);
    memcpy(&fn, (const char *)be + f->off, sizeof fn);
    return fn != NULL;
}

// Calls fn(field, len, ctx) for each space-separated word of `list`; stops at a nonzero return.
static int each_word(const char *list, int (*fn)(const char *w, size_t len, void *ctx), void *ctx) {
    for (const char *s = list; *s;) {
        while (*s == ' ')
            s++;
        size_t len = strcspn(s, " ");
        if (len) {
            int r = fn(s, len, ctx);
            if (r) return r;
        }
        s += len;
    }
    return 0;
}

static int word_is(const char *w, size_t len, void *ctx) {
    return strlen(ctx) == len && !strncmp(w, ctx, len);
}

static bool row_calls(const ParityCase *row, const char *field) {
    return each_word(row->fields, word_is, (void *)field) != 0;
}

// ---- buffers ----
// splitmix64: the same stream for the same (row, buffer, purpose) on every run.
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { // [0, 1)
    return (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t seed_of(const Pc *p, int salt) {
    return (uint64_t)(p->row - parity_cases) * 1000003u + (uint64_t)p->n_args * 7919u +
           (uint64_t)salt;
}

// A new buffer of n elements of `elem` bytes with its guards: host holds the starting contents
// (guards filled here, the data by the caller), dev the copy on p->be.
static PArg *new_arg(Pc *p, const char *name, size_t elem, int64_t n, bool out, bool is_float) {
    CHECK(p->n_args < PARITY_MAX_ARGS, "parity case %s: more than %d buffers", p->row->name,
          PARITY_MAX_ARGS);
    CHECK(n >= 0, "parity case %s: buffer %s of %lld elements", p->row->name, name, (long long)n);
    PArg *a = &p->args[p->n_args];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->elem = elem, a->n = n, a->out = out, a->is_float = is_float;
    size_t bytes = elem * (size_t)(n + 2 * PARITY_GUARD);
    a->host = xmalloc(bytes);
    uint64_t s = seed_of(p, 1);
    unsigned char *h = a->host;
    size_t guard = elem * PARITY_GUARD, data = elem * (size_t)n;
    for (size_t i = 0; i < guard; i++) { // bytes no kernel writes: 0x5A... then random
        h[i] = (unsigned char)(0x5A ^ (mix(&s) & 0x0F));
        h[guard + data + i] = (unsigned char)(0xA5 ^ (mix(&s) & 0x0F));
    }
    p->n_args++;
    return a;
}

// Uploads a buffer whose host data the caller has written; returns the data's device address.
static void *upload(Pc *p, PArg *a) {
    size_t bytes = a->elem * (size_t)(a->n + 2 * PARITY_GUARD);
    a->dev = p->be->alloc(bytes);
    p->be->to_device(a->dev, a->host, bytes);
    return (char *)a->dev + a->elem * PARITY_GUARD;
}

static float *data_f(PArg *a) {
    return (float *)a->host + PARITY_GUARD;
}

const float *pin(Pc *p, const char *name, int64_t n, float lo, float hi) {
    PArg *a = new_arg(p, name, sizeof(float), n, false, true);
    uint64_t s = seed_of(p, 2);
    for (int64_t i = 0; i < n; i++)
        data_f(a)[i] = lo + (float)unit(&s) * (hi - lo);
    return upload(p, a);
}

// The first five elements of a special row's buffer: NaN, +inf, -inf, 0, -0.
static void put_specials(const Pc *p, PArg *a) {
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
    for (int64_t i = 0; p->row->special && i < a->n && i < 5; i++)
        data_f(a)[i] = special[i];
}

const float *pin_sp(Pc *p, const char *name, int64_t n, float lo, float hi) {
    PArg *a = new_arg(p, name, sizeof(float), n, false, true);
    uint64_t s = seed_of(p, 2);
    for (int64_t i = 0; i < n; i++)
        data_f(a)[i] = lo + (float)unit(&s) * (hi - lo);
    put_specials(p, a);
    return upload(p, a);
}

const float *pin_values(Pc *p, const char *name, int64_t n, const float *values) {
    PArg *a = new_arg(p, name, sizeof(float), n, false, true);
    if (n) memcpy(data_f(a), values, sizeof(float) * (size_t)n);
    return upload(p, a);
}

const uint8_t *pin_bytes(Pc *p, const char *name, int64_t n, const uint8_t *values) {
    PArg *a = new_arg(p, name, 1, n, false, false);
    if (n) memcpy((uint8_t *)a->host + PARITY_GUARD, values, (size_t)n);
    return upload(p, a);
}

const int64_t *pin_idx(Pc *p, const char *name, int64_t n, int64_t n_src) {
    PArg *a = new_arg(p, name, sizeof(int64_t), n, false, false);
    uint64_t s = seed_of(p, 4);
    for (int64_t i = 0; i < n; i++)
        ((int64_t *)a->host)[PARITY_GUARD + i] = (int64_t)(mix(&s) % (uint64_t)MAX(n_src, 1));
    return upload(p, a);
}

// Outputs start in [-2, -0.5] u [0.5, 2]: never 0, so a kernel that leaves an element alone,
// or adds where it should assign, differs from one that does its job.
float *pout(Pc *p, const char *name, int64_t n) {
    PArg *a = new_arg(p, name, sizeof(float), n, true, true);
    uint64_t s = seed_of(p, 5);
    for (int64_t i = 0; i < n; i++) {
        float m = 0.5f + 1.5f * (float)unit(&s);
        data_f(a)[i] = mix(&s) & 1 ? m : -m;
    }
    return upload(p, a);
}

float *pout_sp(Pc *p, const char *name, int64_t n) {
    float *dev = pout(p, name, n);
    PArg *a = &p->args[p->n_args - 1];
    put_specials(p, a);
    p->be->to_device(a->dev, a->host, a->elem * (size_t)(n + 2 * PARITY_GUARD));
    return dev;
}

int32_t *pout_i32(Pc *p, const char *name, int64_t n) {
    PArg *a = new_arg(p, name, sizeof(int32_t), n, true, false);
    for (int64_t i = 0; i < n; i++)
        ((int32_t *)a->host)[PARITY_GUARD + i] = -1000 - (int32_t)i;
    return upload(p, a);
}

void pnondet(Pc *p) {
    CHECK(p->n_args > 0 && p->args[p->n_args - 1].out, "pnondet: after an output");
    p->args[p->n_args - 1].nondet = true;
}

// ---- one run of a row ----
// The contents of every buffer after the call (guards included), in the order made.
typedef struct Snapshot {
    int n;
    PArg args[PARITY_MAX_ARGS]; // host: the starting contents; dev: unused here
    void *after[PARITY_MAX_ARGS];
} Snapshot;

static void run_row(const ParityCase *row, const Backend *be, Snapshot *snap) {
    Pc p = {.be = be, .kc = {.n_threads = 2, .stream = NULL}, .row = row, .v = row->v};
    row->run(&p);
    snap->n = p.n_args;
    for (int k = 0; k < p.n_args; k++) {
        PArg *a = &p.args[k];
        size_t bytes = a->elem * (size_t)(a->n + 2 * PARITY_GUARD);
        snap->after[k] = xmalloc(bytes);
        be->to_host(snap->after[k], a->dev, bytes);
        be->free(a->dev);
        a->dev = NULL;
        snap->args[k] = *a;
    }
}

static void snapshot_free(Snapshot *s) {
    for (int k = 0; k < s->n; k++) {
        free(s->after[k]);
        free(s->args[k].host);
    }
    s->n = 0;
}

// ---- comparison ----
static bool agree(float t, float r, double atol, double rtol) {
    if (isnan(r) || isnan(t)) return isnan(r) && isnan(t);
    if (isinf(r) || isinf(t)) return t == r;
    return fabs((double)t - (double)r) <= atol + rtol * fabs((double)r);
}

// Bytes [from, to) of buffer k that differ between two snapshots' contents: the first index.
static int64_t first_diff(const void *x, const void *y, size_t elem, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++)
        if (memcmp((const char *)x + elem * (size_t)i, (const char *)y + elem * (size_t)i, elem))
            return i;
    return -1;
}

// Compares buffer k of the run under test with the reference and with its starting contents;
// prints what differs; returns the number of failures found.
static int compare_arg(const ParityCase *row, const char *test_name, const PArg *a, const void *ref,
                       const void *test, FILE *log, int *mismatches) {
    const int64_t g = PARITY_GUARD, total = a->n + 2 * g;
    int fails = 0;
    // Guards and inputs must be as they started, on both backends.
    const void *sides[2] = {ref, test};
    const char *names[2] = {"the reference", test_name};
    for (int s = 0; s < 2; s++) {
        int64_t i = first_diff(sides[s], a->host, a->elem, 0, g);
        if (i < 0) i = first_diff(sides[s], a->host, a->elem, g + a->n, total);
        if (i >= 0) {
            fprintf(log, "  %s: %s wrote %s its buffer (element %lld)\n", a->name, names[s],
                    i < g ? "before" : "after", (long long)(i < g ? i - g : i - g - a->n));
            fails++;
        }
        if (!a->out && (i = first_diff(sides[s], a->host, a->elem, g, g + a->n)) >= 0) {
            fprintf(log, "  %s: %s changed this input (element %lld)\n", a->name, names[s],
                    (long long)(i - g));
            fails++;
        }
    }
    if (!a->out) return fails;
    if (!a->is_float) {
        int64_t i = first_diff(test, ref, a->elem, g, g + a->n);
        if (i >= 0) {
            int32_t t, r;
            memcpy(&t, (const char *)test + a->elem * (size_t)i, sizeof t);
            memcpy(&r, (const char *)ref + a->elem * (size_t)i, sizeof r);
            fprintf(log, "  %s[%lld]: %s %d, reference %d\n", a->name, (long long)(i - g),
                    test_name, t, r);
            (*mismatches)++;
            fails++;
        }
        return fails;
    }
    const float *t = (const float *)test + g, *r = (const float *)ref + g;
    int64_t bad = 0, worst = -1;
    double worst_excess = 0;
    for (int64_t i = 0; i < a->n; i++) {
        if (agree(t[i], r[i], row->atol, row->rtol)) continue;
        bad++;
        double lim = row->atol + row->rtol * fabs((double)r[i]);
        double excess =
            isfinite(t[i]) && isfinite(r[i]) ? fabs((double)t[i] - r[i]) / lim : INFINITY;
        if (worst < 0 || excess > worst_excess) worst = i, worst_excess = excess;
    }
    if (bad) {
        fprintf(log,
                "  %s: %lld of %lld elements outside %g + %g |ref|; worst [%lld]: %s %.9g, "
                "reference %.9g\n",
                a->name, (long long)bad, (long long)a->n, row->atol, row->rtol, (long long)worst,
                test_name, t[worst], r[worst]);
        *mismatches += (int)bad;
        fails++;
    }
    return fails;
}

// ctx: the two backends and the log. Prints which backend lacks the field.
typedef struct Pair {
    const Backend *be[2];
    FILE *log;
} Pair;

static int field_missing(const char *w, size_t len, void *ctx) {
    const Pair *pair = ctx;
    const Field *f = field_named(w, len);
    CHECK(f, "parity: a row names the field '%.*s', which Backend does not have", (int)len, w);
    for (int i = 0; i < 2; i++)
        if (!filled(pair->be[i], f)) {
            fprintf(pair->log, "  no %s kernel for %s (a NULL field)\n", pair->be[i]->name,
                    f->name);
            return 1;
        }
    return 0;
}

static int only_matches(const char *w, size_t len, void *ctx) {
    return word_is(w, len, ctx);
}

// `only`: NULL (every row) or a comma-separated list of row-name prefixes and field names.
static bool selected(const ParityCase *row, const char *only) {
    if (!only) return true;
    for (const char *s = only; *s; s += *s == ',') {
        char item[64];
        size_t len = strcspn(s, ",");
        snprintf(item, sizeof item, "%.*s", (int)len, s);
        s += len;
        if (!len) continue;
        if (!strncmp(row->name, item, len) || each_word(row->fields, only_matches, item))
            return true;
    }
    return false;
}

ParityResult parity_run(const Backend *ref, const Backend *test, const char *only, FILE *log) {
    ParityResult res = {0};
    for (int c = 0; c < parity_n_cases; c++) {
        const ParityCase *row = &parity_cases[c];
        if (!selected(row, only)) continue;
        res.rows++;
        Pair pair = {{ref, test}, log};
        char *why = NULL;
        size_t why_len = 0;
        pair.log = open_memstream(&why, &why_len);
        int missing = each_word(row->fields, field_missing, &pair);
        fclose(pair.log);
        if (missing) {
            fprintf(log, "FAIL %s (%s)\n%s", row->name, row->fields, why);
            free(why);
            res.missing++, res.failed++;
            continue;
        }
        free(why);
        Snapshot sr = {0}, s1 = {0}, s2 = {0};
        run_row(row, ref, &sr);
        run_row(row, test, &s1);
        run_row(row, test, &s2);
        CHECK(sr.n == s1.n && s1.n == s2.n, "parity case %s made %d, %d and %d buffers", row->name,
              sr.n, s1.n, s2.n);
        int fails = 0;
        bool nondet = false;
        char *detail = NULL; // printed after the row's FAIL line
        size_t detail_len = 0;
        FILE *d = open_memstream(&detail, &detail_len);
        for (int k = 0; k < sr.n; k++) {
            const PArg *a = &s1.args[k];
            fails += compare_arg(row, test->name, a, sr.after[k], s1.after[k], d, &res.mismatches);
            if (a->nondet) continue;
            int64_t i = first_diff(s1.after[k], s2.after[k], a->elem, 0, a->n + 2 * PARITY_GUARD);
            if (i >= 0) {
                fprintf(d, "  %s: two runs on %s differ at element %lld (not deterministic)\n",
                        a->name, test->name, (long long)(i - PARITY_GUARD));
                nondet = true;
            }
        }
        fclose(d);
        if (fails || nondet) {
            fprintf(log, "FAIL %s (%s; tolerance %g + %g |ref|: %s)\n%s", row->name, row->fields,
                    row->atol, row->rtol, row->why, detail);
            res.failed++;
            res.nondet += nondet;
        } else {
            fprintf(log, "ok   %s\n", row->name);
        }
        free(detail);
        snapshot_free(&sr);
        snapshot_free(&s1);
        snapshot_free(&s2);
    }
    return res;
}

// ---- coverage ----
typedef struct Unknown {
    FILE *out;
    int n;
} Unknown;

static int count_unknown(const char *w, size_t len, void *ctx) {
    Unknown *u = ctx;
    if (field_named(w, len)) return 0;
    fprintf(u->out, "UNKNOWN: a row calls '%.*s', which is not a Backend field\n", (int)len, w);
    u->n++;
    return 0; // keep going
}

int parity_coverage(const ParityCase *rows, int n_rows, const Backend *test, FILE *out) {
    int gaps = 0;
    // Every function-pointer slot of Backend, from alloc to the end, must be in fields[].
    for (size_t off = offsetof(Backend, alloc); off < sizeof(Backend);
         off += sizeof(void (*)(void))) {
        bool known = false;
        for (int i = 0; i < n_fields && !known; i++)
            known = fields[i].off == off;
        if (!known) {
            fprintf(out,
                    "MISSING: Backend's slot at byte %zu is not in tests/parity.c's field "
                    "list: add it there and give it a case in tests/parity_cases.c\n",
                    off);
            gaps++;
        }
    }
    Unknown unknown = {out, 0}; // a typo in a row's field list would hide a gap
    for (int c = 0; c < n_rows; c++)
        each_word(rows[c].fields, count_unknown, &unknown);
    gaps += unknown.n;
    fprintf(out, "%-24s %-6s %s\n", "field", test->name, "cases");
    int with_kernel = 0, uncovered = 0;
    for (int i = 0; i < n_fields; i++) {
        char names[512] = "";
        int n_calls = 0;
        size_t used = 0;
        for (int c = 0; c < n_rows; c++) {
            if (!row_calls(&rows[c], fields[i].name)) continue;
            if (used < sizeof names - 64)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                                         n_calls ? " " : "", rows[c].name);
            n_calls++;
        }
        bool has = filled(test, &fields[i]);
        with_kernel += has;
        fprintf(out, "%-24s %-6s %s\n", fields[i].name, has ? "yes" : "NO",
                n_calls ? names : "NO CASE");
        uncovered += n_calls == 0;
    }
    fprintf(out, "%d of %d fields have a %s kernel; %d without a parity case\n", with_kernel,
            n_fields, test->name, uncovered);
    return gaps + uncovered;
}
