/* trace_synth.c -- synthetic trace directories (trace_synth.h). */
#include "tests/trace_synth.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "probe/probe.h"
#include "probe/tracedb.h"

SynthSpec synth_default(void) {
    return (SynthSpec){.world = 2,
                       .n_params = 16,
                       .n_iters = 3,
                       .n_buckets = 2,
                       .unused_rank = -1,
                       .empty_rank = -1,
                       .skip_rank = -1,
                       .short_rank = -1,
                       .dead_rank = -1,
                       .layout_rank = -1,
                       .slow_rank = -1};
}

enum { NUMEL = 64, BUFFERS = 100 };

// One rank's writer: a time cursor (base + k * dt + shift) and the database.
typedef struct W {
    TraceDb *db;
    uint64_t seq;
    int64_t base, dt, shift;
    int k;
    int64_t n_events;
    int64_t coll_seq; // the group's sequence number so far
    int rc;
} W;

static void ev(W *w, int kind, int64_t iter, int32_t a, int32_t b, int64_t c, int64_t d, int flags,
               const char *text) {
    if (w->rc) return;
    ProbeRecord r = {.seq = ++w->seq,
                     .t_ns = w->base + w->k++ * w->dt + w->shift,
                     .iter = iter,
                     .c = c,
                     .d = d,
                     .kind = (uint16_t)kind,
                     .flags = (uint16_t)flags,
                     .a = a,
                     .b = b};
    size_t len = text ? strlen(text) : 0;
    if (len) memcpy(r.text, text, len < PROBE_TEXT_BYTES ? len : PROBE_TEXT_BYTES);
    w->rc = tracedb_insert(w->db, &r, text, len);
    w->n_events++;
    if (w->n_events % 65536 == 0 && !w->rc) w->rc = tracedb_commit(w->db) || tracedb_begin(w->db);
}

// A collective launch (returns its seq); done: also its completion.
static int64_t coll(W *w, int64_t iter, int op, int bucket, int64_t numel, const char *what,
                    bool done) {
    int64_t s = ++w->coll_seq;
    ev(w, PROBE_COLL_LAUNCH, iter, op, bucket, s, numel, 0, what);
    if (done) ev(w, PROBE_COLL_DONE, iter, op, bucket, s, numel, PROBE_FLAG_OK, what);
    return s;
}

// Bucket b of n holds the parameters [lo, hi): the last ones first (DDP's reverse order).
static void bucket_range(int n_params, int n_buckets, int b, int *lo, int *hi) {
    int per = (n_params + n_buckets - 1) / n_buckets;
    *hi = n_params - b * per;
    *lo = *hi - per < 0 ? 0 : *hi - per;
}

static int bucket_of(int n_params, int n_buckets, int p) {
    for (int b = 0; b < n_buckets; b++) {
        int lo, hi;
        bucket_range(n_params, n_buckets, b, &lo, &hi);
        if (p >= lo && p < hi) return b;
    }
    return n_buckets - 1;
}

static bool is_unused(const SynthSpec *s, int rank, int64_t iter, int p) {
    return (s->unused_rank == rank || s->unused_rank == -2) && iter == s->unused_iter &&
           p >= s->unused_first && p < s->unused_first + s->unused_count;
}

// Writes rank r's whole run. Returns 0 or -1.
static int write_rank(const char *dir, const SynthSpec *s, int r, int64_t *events, char *err,
                      size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank%d.db", dir, r);
    W w = {.db = tracedb_create(path, err, errlen)};
    if (!w.db) return -1;
    int nb = s->layout_rank == r ? s->n_buckets + 1 : s->n_buckets;
    int64_t slow = s->slow_rank >= 0 ? s->slow_ns : 0;
    int64_t iter_ns = (s->iter_ns ? s->iter_ns : 10000000) + slow;
    int per_iter = 2 * s->n_params + 4 * nb + 16 + 2 * s->gpu_kernels;
    w.dt = (iter_ns - slow) / (per_iter + 8); // the slow rank's delay still fits the iteration
    if (w.dt < 1) w.dt = 1;
    w.base = (s->t0_ns ? s->t0_ns : 1000000000000000000) + r * 1000;
    tracedb_begin(w.db);
    char text[256];
    snprintf(text, sizeof text, "world=%d", s->world);
    ev(&w, PROBE_META, -1, 0, 0, 0, 0, 0, text);
    snprintf(text, sizeof text, "args=model=synth.yaml%s%s",
             s->layout_rank == r ? " bucket_cap_mb=1" : "",
             s->find_unused ? " find_unused_parameters=true" : "");
    ev(&w, PROBE_META, -1, 0, 0, 0, 0, 0, text);
    for (int p = 0; p < s->n_params; p++) {
        snprintf(text, sizeof text, "model.%d.block.%d.weight 8x8", p / 8, p % 8);
        ev(&w, PROBE_PARAM, -1, p, 2, NUMEL, 0, 0, text);
    }
    for (int b = 0; b < nb; b++) {
        int lo, hi;
        bucket_range(s->n_params, nb, b, &lo, &hi);
        for (int p = hi - 1, off = 0; p >= lo; p--, off += NUMEL)
            ev(&w, PROBE_LAYOUT, -1, 0, b, p, off, 0, NULL);
    }
    ev(&w, PROBE_HEARTBEAT, -1, PROBE_PHASE_STARTUP, 0, 0, w.base, 0, NULL);
    const char *closed = "clean";
    int n_iters = s->short_rank == r ? s->n_iters - s->short_by : s->n_iters;
    int64_t corr = 1000;
    for (int64_t it = 0; it < s->n_iters && !w.rc; it++) {
        w.base += it ? iter_ns : 0;
        w.k = 0;
        w.shift = 0;
        if (it == n_iters) { // the short rank is out of data: it leaves the loop
            coll(&w, it - 1, PROBE_OP_BROADCAST, -1, 1, "stop", false);
            closed = "drained";
            break;
        }
        bool others_stopped =
            s->short_rank >= 0 && s->short_rank != r && it == s->n_iters - s->short_by;
        ev(&w, PROBE_FORWARD_BEGIN, it, 0, 0, 0, 0, 0, NULL);
        bool after_skip = s->skip_rank == r && it == s->skip_iter + 1;
        if (after_skip || others_stopped) { // its broadcast pairs with what the others do instead
            coll(&w, it, PROBE_OP_BROADCAST, -1, BUFFERS, "buffers", false);
            closed = "drained";
            if (after_skip)
                ev(&w, PROBE_HEARTBEAT, it, PROBE_PHASE_COLLECTIVE, 0, 0, w.base, 0, NULL);
            break;
        }
        if (s->unused_iter >= 0 && it == s->unused_iter + 1 && !s->find_unused &&
            (s->unused_rank == r || s->unused_rank == -2)) {
            ev(&w, PROBE_ERROR, it, 0, 0, 0, 0, 0,
               "Expected to have finished reduction in the prior iteration before starting a new "
               "one. "
               "This error indicates that your module has parameters that were not used in "
               "producing loss.");
            break;
        }
        coll(&w, it, PROBE_OP_BROADCAST, -1, BUFFERS, "buffers", true);
        ev(&w, PROBE_BATCH, it, (int32_t)(it * s->world + r),
           s->empty_rank == r && it == s->unused_iter ? 0 : 2, 0, 0, 0, NULL);
        if (s->slow_rank == r) w.shift += slow;
        ev(&w, PROBE_FORWARD_END, it, 0, 0, 0, 0, 0, NULL);
        if (s->skip_rank == r && it == s->skip_iter) continue;
        ev(&w, PROBE_BACKWARD_BEGIN, it, 0, 0, 0, 0, 0, NULL);
        int *ready = calloc((size_t)nb, sizeof(int)), next = 0, order = 0, hooks = 0;
        bool stuck = false, dead = false;
        if (s->find_unused)
            for (int p = s->n_params - 1; p >= 0; p--)
                if (is_unused(s, r, it, p)) {
                    int b = bucket_of(s->n_params, nb, p);
                    ev(&w, PROBE_MARK_READY, it, p, b, 1, 0, 0, NULL);
                    ready[b]++;
                }
        for (int p = s->n_params - 1; p >= 0 && !dead; p--) {
            if (is_unused(s, r, it, p)) continue;
            if (s->dead_rank == r && it == s->dead_iter && hooks == 3) {
                dead = true;
                break;
            }
            int b = bucket_of(s->n_params, nb, p);
            if (s->split_marks) {
                ev(&w, PROBE_GRAD_READY, it, p, order++, 1, 0, 0, NULL);
                ev(&w, PROBE_MARK_READY, it, p, b, 0, 0, 0, NULL);
            } else {
                ev(&w, PROBE_GRAD_READY, it, p, order++, 1, b, PROBE_FLAG_MARKED, NULL);
            }
            hooks++;
            ready[b]++;
            for (;;) { // launch every full bucket in index order
                int lo, hi;
                if (next >= nb) break;
                bucket_range(s->n_params, nb, next, &lo, &hi);
                if (ready[next] < hi - lo) break;
                ev(&w, PROBE_BUCKET_READY, it, 0, next, 0, 0, 0, NULL);
                int64_t sq = coll(&w, it, PROBE_OP_ALLREDUCE, next, (int64_t)(hi - lo) * NUMEL,
                                  "bucket", false);
                for (int g = 0; g < s->gpu_kernels; g++) {
                    ev(&w, PROBE_GPU_CORRELATION, corr, (int32_t)corr, 0, sq, 0, 0, NULL);
                    int64_t t = w.base + w.k * w.dt;
                    ev(&w, PROBE_GPU_KERNEL, corr++, 0, 7, t, t + w.dt, 0,
                       "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
                }
                next++;
            }
        }
        free(ready);
        // Whether the launched buckets complete: not when a partner never launches them.
        bool partner_missing = (s->unused_rank >= 0 && s->unused_rank != r &&
                                it == s->unused_iter && !s->find_unused) ||
                               (s->skip_rank >= 0 && s->skip_rank != r && it == s->skip_iter) ||
                               (s->dead_rank >= 0 && s->dead_rank != r && it == s->dead_iter) ||
                               s->layout_rank >= 0;
        stuck = dead || partner_missing;
        if (stuck) { // the writer's heartbeat says it waits (the dead one wrote nothing more)
            if (!dead)
                ev(&w, PROBE_HEARTBEAT, it, PROBE_PHASE_COLLECTIVE, 0, 0, w.base + w.k * w.dt, 0,
                   NULL);
            closed = "drained";
            break;
        }
        if (s->slow_rank >= 0 && s->slow_rank != r) w.shift += slow; // waits for the slow one
        for (int b = 0; b < next; b++) {
            int lo, hi;
            bucket_range(s->n_params, nb, b, &lo, &hi);
            ev(&w, PROBE_COLL_DONE, it, PROBE_OP_ALLREDUCE, b, w.coll_seq - next + 1 + b,
               (int64_t)(hi - lo) * NUMEL, PROBE_FLAG_OK, "bucket");
        }
        if (s->find_unused)
            coll(&w, it, PROBE_OP_ALLREDUCE, -1, s->n_params, "local_used_map", true);
        if (next == nb) ev(&w, PROBE_FINALIZE, it, 0, 0, 0, 0, 0, NULL);
        ev(&w, PROBE_BACKWARD_END, it, 0, 0, 0, 0, 0, NULL);
        ev(&w, PROBE_OPTIM_STEP, it, 0, 0, 0, 0, 0, NULL);
    }
    if (s->skip_rank >= 0)
        ev(&w, PROBE_HANG, s->skip_iter, s->skip_rank, 0, 0, 0, 0,
           "hang: synthetic watchdog summary\n  rank 0: waiting in a collective");
    if (!w.rc) w.rc = tracedb_set_meta(w.db, "closed", closed);
    if (!w.rc && r == 0 && s->overruns) w.rc = tracedb_set_meta_int(w.db, "overruns", s->overruns);
    if (!w.rc) w.rc = tracedb_commit(w.db);
    if (w.rc) snprintf(err, errlen, "%s", tracedb_error(w.db));
    tracedb_close(w.db, true);
    *events += w.n_events;
    if (w.rc) return -1;
    int version = s->split_marks ? 1 : r == 0 ? s->user_version : 0;
    if (version) {
        sqlite3 *db;
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", version);
        if (sqlite3_open(path, &db) != SQLITE_OK ||
            sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            snprintf(err, errlen, "%s: %s", path, sqlite3_errmsg(db));
            sqlite3_close(db);
            return -1;
        }
        sqlite3_close(db);
    }
    return 0;
}

int synth_trace(const char *dir, const SynthSpec *s, int64_t *events_out, char *err,
                size_t errlen) {
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
        return -1;
    }
    int64_t events = 0;
    for (int r = 0; r < s->world; r++)
        if (write_rank(dir, s, r, &events, err, errlen) < 0) return -1;
    if (events_out) *events_out = events;
    return 0;
}
