/* teach_load.c -- the teaching mode's loader (teach.h): the events of every rank for a range
 * of iterations, straight from the rank databases, opened read-only. The Model keeps per
 * iteration summaries; the replay needs every event, in order. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h" // xrealloc, xstrdup, MIN, MAX
#include "probe/probe.h"  // ProbeKind, PROBE_SCHEMA_VERSION
#include "tui/teach/teach.h"

static int cmp_event(const void *pa, const void *pb) {
    const TeachEvent *a = pa, *b = pb;
    if (a->t_ns != b->t_ns) return a->t_ns < b->t_ns ? -1 : 1;
    if (a->rank != b->rank) return a->rank - b->rank;
    if (a->seq != b->seq) return a->seq < b->seq ? -1 : 1;
    return a->kind - b->kind; // a marking hook's two steps: GRAD_READY, then MARK_READY
}

static TeachEvent *append(TeachEvent **ev, int *n, int *cap) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 4096;
        *ev = xrealloc(*ev, (size_t)*cap * sizeof(TeachEvent));
    }
    return &(*ev)[(*n)++];
}

void teach_default_range(const Model *m, int64_t *lo, int64_t *hi) {
    int64_t first_bad = -1;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *rk = &m->ranks[r];
        if (!rk->present) continue;
        int64_t last = rk->n_iters ? rk->iters[rk->n_iters - 1].iter : -1;
        int64_t at = rk->error           ? rk->error_iter
                     : !rk->hang         ? -1
                     : rk->hang_iter > 0 ? rk->hang_iter
                                         : last;
        if (at >= 0 && (first_bad < 0 || at < first_bad)) first_bad = at;
    }
    int64_t start = MAX(m->min_iter, 0);
    if (first_bad >= 0)
        *lo = MAX(first_bad - 2, start), *hi = first_bad;
    else
        *lo = start, *hi = MIN(start + 2, m->max_iter);
}

// Appends rank r's events to *ev. Returns 0, or -1 with err.
static int load_rank(const Model *m, int r, int64_t lo, int64_t hi, TeachEvent **ev, int *n,
                     int *cap, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank%d.db", m->dir, r);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s: cannot open: %s", path,
                 db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    sqlite3_stmt *st = NULL;
    int version = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (version < 1 || version > PROBE_SCHEMA_VERSION) {
        snprintf(err, errlen, "%s: schema version %d, this ddpdbg reads 1 to %d", path, version,
                 PROBE_SCHEMA_VERSION);
        sqlite3_close(db);
        return -1;
    }
    // By seq (the primary key: the trace has no index on iter), from the first event of the
    // iteration before lo: iteration lo's own first rows can precede what the model counts as
    // its first event (the rebuilt layout, recorded as the forward begins). Rows of other
    // iterations are filtered out as they come.
    int64_t from_seq = 0;
    const ModelRank *rk = &m->ranks[r];
    for (int k = 0; k < rk->n_iters && rk->iters[k].iter < lo; k++)
        if (rk->iters[k].seq_first) from_seq = rk->iters[k].seq_first - 1;
    const char *sql = "SELECT seq, t_ns, iter, kind, a, b, c, d, flags, text FROM events "
                      "WHERE seq > ?7 AND iter BETWEEN ?1 AND ?2 AND kind NOT IN (?3, ?4, ?5, ?6) "
                      "ORDER BY seq";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s: not a ddpdbg trace: %s", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    sqlite3_bind_int64(st, 1, lo), sqlite3_bind_int64(st, 2, hi);
    sqlite3_bind_int(st, 3, PROBE_META), sqlite3_bind_int(st, 4, PROBE_PARAM);
    sqlite3_bind_int(st, 5, PROBE_HEARTBEAT), sqlite3_bind_int(st, 6, PROBE_TEXT);
    sqlite3_bind_int64(st, 7, from_seq);
    int rc, generation = -1;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int kind = sqlite3_column_int(st, 3);
        int a = sqlite3_column_int(st, 4);
        if (kind == PROBE_LAYOUT) { // one event per rebuild: the generation's first record
            if (a == generation) continue;
            generation = a;
        }
        const unsigned char *text = sqlite3_column_text(st, 9);
        TeachEvent *e = append(ev, n, cap);
        *e = (TeachEvent){
            .rank = r,
            .seq = sqlite3_column_int64(st, 0),
            .t_ns = sqlite3_column_int64(st, 1),
            .iter = sqlite3_column_int64(st, 2),
            .kind = kind,
            .a = a,
            .b = sqlite3_column_int(st, 5),
            .c = sqlite3_column_int64(st, 6),
            .d = sqlite3_column_int64(st, 7),
            .flags = (uint16_t)sqlite3_column_int(st, 8),
            .text = text ? xstrdup((const char *)text) : NULL,
        };
        // A hook that marked its parameter at once is one row; the replay shows the reducer's
        // two steps: the gradient is ready, then it is marked ready in its bucket.
        if (kind == PROBE_GRAD_READY && (e->flags & PROBE_FLAG_MARKED)) {
            e->flags &= (uint16_t)~PROBE_FLAG_MARKED;
            TeachEvent mark = {.rank = r,
                               .seq = e->seq,
                               .t_ns = e->t_ns,
                               .iter = e->iter,
                               .kind = PROBE_MARK_READY,
                               .a = e->a,
                               .b = (int32_t)e->d};
            *append(ev, n, cap) = mark; // e is invalid from here: append may move the array
        }
    }
    if (rc != SQLITE_DONE)
        snprintf(err, errlen, "%s: reading events: %s", path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc == SQLITE_DONE ? 0 : -1;
}

int teach_load(Teach *t, const Model *m, int64_t iter_lo, int64_t iter_hi, char *err,
               size_t errlen) {
    TeachEvent *ev = NULL;
    int n = 0, cap = 0;
    for (int r = 0; r < m->world; r++) {
        if (!m->ranks[r].present) continue;
        if (load_rank(m, r, iter_lo, iter_hi, &ev, &n, &cap, err, errlen) < 0) {
            for (int i = 0; i < n; i++)
                free(ev[i].text);
            free(ev);
            return -1;
        }
    }
    if (!n) {
        snprintf(err, errlen, "%s: no events in iterations %lld to %lld", m->dir,
                 (long long)iter_lo, (long long)iter_hi);
        free(ev);
        return -1;
    }
    qsort(ev, (size_t)n, sizeof(TeachEvent), cmp_event);
    teach_init(t, m, ev, n, iter_lo, iter_hi);
    return 0;
}
