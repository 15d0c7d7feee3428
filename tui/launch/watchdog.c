/* watchdog.c -- the launcher's hang watchdog (watchdog.h). */
#include "tui/launch/watchdog.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/base.h" // xcalloc
#include "probe/probe.h"
#include "probe/ring.h" // ring_read: the launches and completions the database has not stored yet

struct Watchdog {
    char dir[4096];
    int n;
    int *ranks;
    ProbeRing **rings; // attached once the rank created its ring; NULL before
    double timeout_s;
    bool *straggler_said;
    bool reported;
    int64_t *checked_since; // per rank: the phase_t_ns of the all-waiting state last checked
                            // for a certain deadlock (checked once per such state)
};

enum { CERTAIN_AFTER_MS = 500 }; // every rank waiting this long, in collectives that cannot
                                 // match: a certain deadlock, whatever --hang-timeout says

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

Watchdog *watchdog_new(const char *dir, const int *ranks, int n, double timeout_s) {
    Watchdog *w = xcalloc(1, sizeof *w);
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    w->n = n;
    w->ranks = xcalloc((size_t)n, sizeof(int));
    memcpy(w->ranks, ranks, sizeof(int) * (size_t)n);
    w->rings = xcalloc((size_t)n, sizeof(ProbeRing *));
    w->straggler_said = xcalloc((size_t)n, sizeof(bool));
    w->checked_since = xcalloc((size_t)n, sizeof(int64_t));
    w->timeout_s = timeout_s;
    return w;
}

void watchdog_free(Watchdog *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++)
        probe_ring_close(w->rings[i]);
    free(w->rings);
    free(w->ranks);
    free(w->straggler_said);
    free(w->checked_since);
    free(w);
}

static const char *phase_name(ProbePhase p) {
    static const char *names[] = {"idle",     "startup",  "data",     "forward",    "backward",
                                  "waiting in a collective", "optimiser step", "validation",
                                  "checkpoint",
                                  "done"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

// What one rank's database says about its latest iteration (all -1 when unknown).
typedef struct RankFacts {
    int64_t iter;
    int64_t launched_seq, done_seq; // last collective launched / completed
    char launched_what[96]; // "allreduce of bucket 1", "broadcast of buffers"
    int launched_bucket;
    int64_t launched_numel;
    int n_buckets, n_launched; // buckets of the current layout, launched this iteration
    char not_launched[256];    // "1, 2" or ""
} RankFacts;

static int64_t query_int(sqlite3 *db, const char *sql, int64_t arg, int64_t fallback) {
    sqlite3_stmt *st;
    int64_t v = fallback;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return fallback;
    sqlite3_bind_int64(st, 1, arg);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void rank_facts(const Watchdog *w, int rank, RankFacts *f) {
    *f = (RankFacts){.iter = -1, .launched_seq = -1, .done_seq = -1, .launched_bucket = -1};
    char path[4200];
    snprintf(path, sizeof path, "%s/rank%d.db", w->dir, rank);
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return;
    }
    sqlite3_busy_timeout(db, 200);
    f->iter = query_int(db, "SELECT max(iter) FROM events WHERE kind = ?", PROBE_FORWARD_BEGIN, -1);
    f->done_seq = query_int(db, "SELECT max(c) FROM events WHERE kind = ? AND (flags & 1)",
                            PROBE_COLL_DONE, -1);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT c, b, d, coalesce(text, ''), a FROM events WHERE kind = ? "
                               "ORDER BY seq DESC LIMIT 1",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int(st, 1, PROBE_COLL_LAUNCH);
        if (sqlite3_step(st) == SQLITE_ROW) {
            static const char *ops[] = {"?", "allreduce", "broadcast", "allgather", "barrier"};
            int op = sqlite3_column_int(st, 4);
            f->launched_seq = sqlite3_column_int64(st, 0);
            f->launched_bucket = sqlite3_column_int(st, 1);
            f->launched_numel = sqlite3_column_int64(st, 2);
            const char *what = (const char *)sqlite3_column_text(st, 3);
            const char *op_name = op >= 1 && op <= 4 ? ops[op] : ops[0];
            if (f->launched_bucket >= 0)
                snprintf(f->launched_what, sizeof f->launched_what, "%s of bucket %d, %lld elements",
                         op_name, f->launched_bucket, (long long)f->launched_numel);
            else
                snprintf(f->launched_what, sizeof f->launched_what, "%s of %s, %lld elements",
                         op_name, what, (long long)f->launched_numel);
        }
        sqlite3_finalize(st);
    }
    int64_t gen = query_int(db, "SELECT max(generation) FROM layouts WHERE generation >= ?", 0, -1);
    if (gen >= 0) {
        sqlite3_stmt *q;
        f->n_buckets = (int)query_int(db, "SELECT count(DISTINCT bucket) FROM layouts WHERE "
                                          "generation = (SELECT max(generation) FROM layouts) "
                                          "AND ? = 0",
                                      0, 0);
        size_t at = 0;
        if (sqlite3_prepare_v2(db, "SELECT DISTINCT bucket FROM layouts WHERE generation = (SELECT "
                                   "max(generation) FROM layouts) AND bucket NOT IN (SELECT b "
                                   "FROM events WHERE kind = ? AND iter = ? AND text = 'bucket') "
                                   "ORDER BY bucket",
                               -1, &q, NULL) == SQLITE_OK) {
            sqlite3_bind_int(q, 1, PROBE_COLL_LAUNCH);
            sqlite3_bind_int64(q, 2, f->iter);
            while (sqlite3_step(q) == SQLITE_ROW && at < sizeof f->not_launched - 16)
                at += (size_t)snprintf(f->not_launched + at, sizeof f->not_launched - at, "%s%d",
                                       at ? ", " : "", sqlite3_column_int(q, 0));
            sqlite3_finalize(q);
        }
        f->n_launched = (int)query_int(db, "SELECT count(DISTINCT b) FROM events WHERE kind = 11 "
                                           "AND text = 'bucket' AND iter = ?",
                                       f->iter, 0);
    }
    sqlite3_close(db);
}

// ---- a certain deadlock ------------------------------------------------------------------------

// The collective a waiting rank waits in: the first it launched that has not completed.
typedef struct Pending {
    int64_t seq; // 0: none found
    int op, bucket;
    int64_t numel;
    char what[24];
} Pending;

// A launch (kind COLL_LAUNCH: c seq, a op, b bucket, d numel, text what) or a completion
// (COLL_DONE: c seq) into the list of launched and not completed ones (at most cap).
static void pending_apply(Pending *list, int *n, int cap, int kind, const ProbeRecord *r,
                          const char *what) {
    if (kind == PROBE_COLL_LAUNCH && *n < cap) {
        Pending *p = &list[(*n)++];
        *p = (Pending){.seq = r->c, .op = r->a, .bucket = r->b, .numel = r->d};
        snprintf(p->what, sizeof p->what, "%s", what ? what : "");
    } else if (kind == PROBE_COLL_DONE) {
        for (int i = 0; i < *n; i++)
            if (list[i].seq == r->c) {
                list[i] = list[--*n];
                break;
            }
    }
}

// Rank i's pending collective: the database's launches and completions among its last 100000
// events (seq is its primary key: a range, no scan), then the ring's records above the tail,
// which the writer has not stored yet (up to a second of them).
static Pending rank_pending(const Watchdog *w, int i, const ProbeRingState *st) {
    enum { CAP = 4096 };
    Pending *list = xcalloc(CAP, sizeof(Pending)), best = {0};
    int n = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/rank%d.db", w->dir, w->ranks[i]);
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 200);
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(db,
                               "SELECT kind, c, a, b, d, coalesce(text, '') FROM events WHERE seq > "
                               "(SELECT coalesce(max(seq), 0) - 100000 FROM events) AND kind IN "
                               "(?, ?) AND (kind = ? OR (flags & 1)) ORDER BY seq",
                               -1, &q, NULL) == SQLITE_OK) {
            sqlite3_bind_int(q, 1, PROBE_COLL_LAUNCH);
            sqlite3_bind_int(q, 2, PROBE_COLL_DONE);
            sqlite3_bind_int(q, 3, PROBE_COLL_LAUNCH);
            while (sqlite3_step(q) == SQLITE_ROW) {
                ProbeRecord r = {.c = sqlite3_column_int64(q, 1),
                                 .a = sqlite3_column_int(q, 2),
                                 .b = sqlite3_column_int(q, 3),
                                 .d = sqlite3_column_int64(q, 4)};
                pending_apply(list, &n, CAP, sqlite3_column_int(q, 0), &r,
                              (const char *)sqlite3_column_text(q, 5));
            }
            sqlite3_finalize(q);
        }
    }
    sqlite3_close(db);
    TextBuf text = {0};
    for (uint64_t seq = st->tail + 1; seq < st->head;) {
        ProbeRecord r;
        uint64_t span = 1;
        RingRead got = ring_read(w->rings[i], seq, &r, &text, &span);
        if (got == RING_READ_OK && (r.kind == PROBE_COLL_LAUNCH || r.flags & 1))
            pending_apply(list, &n, CAP, r.kind, &r, text.data);
        seq += got == RING_READ_OK ? span : 1;
    }
    textbuf_free(&text);
    for (int k = 0; k < n; k++)
        if (!best.seq || list[k].seq < best.seq) best = list[k];
    free(list);
    return best;
}

static void pending_text(const Pending *p, char *out, size_t len) {
    static const char *ops[] = {"?", "allreduce", "broadcast", "allgather", "barrier"};
    const char *op = p->op >= 1 && p->op <= 4 ? ops[p->op] : ops[0];
    if (p->bucket >= 0 && !strcmp(p->what, "bucket"))
        snprintf(out, len, "%s of bucket %d, %lld elements", op, p->bucket, (long long)p->numel);
    else
        snprintf(out, len, "%s of %s, %lld elements", op, p->what, (long long)p->numel);
}

// When every rank of this node waits, has for CERTAIN_AFTER_MS, and their pending collectives
// cannot pair up (different numbers, or one number with a different op or size), writes
// "certain deadlock: ..." into why and returns true. Checked once per such state.
static bool certain_deadlock(Watchdog *w, const bool *exited, const ProbeRingState *st,
                             const bool *have, int64_t now, Pending *p, char *why, size_t len) {
    if (w->n < 2) return false;
    bool fresh = false;
    for (int i = 0; i < w->n; i++) {
        if (exited[i] || !have[i] || st[i].phase != PROBE_PHASE_COLLECTIVE ||
            now - st[i].phase_t_ns < (int64_t)CERTAIN_AFTER_MS * 1000000)
            return false;
        fresh |= w->checked_since[i] != st[i].phase_t_ns;
    }
    if (!fresh) return false;
    for (int i = 0; i < w->n; i++)
        w->checked_since[i] = st[i].phase_t_ns;
    bool differ = false, known = true;
    for (int i = 0; i < w->n; i++) {
        p[i] = rank_pending(w, i, &st[i]);
        known &= p[i].seq > 0;
        differ |= i > 0 && (p[i].seq != p[0].seq || p[i].op != p[0].op ||
                            p[i].numel != p[0].numel || strcmp(p[i].what, p[0].what));
    }
    if (known && differ) {
        size_t at = (size_t)snprintf(why, len,
                                     "certain deadlock: every rank waits, in collectives that "
                                     "cannot match:");
        for (int i = 0; i < w->n && at < len; i++) {
            char a[96];
            pending_text(&p[i], a, sizeof a);
            at += (size_t)snprintf(why + at, len - at, "%s rank %d in #%lld (%s)", i ? "," : "",
                                   w->ranks[i], (long long)p[i].seq, a);
        }
    }
    return known && differ;
}

// The summary: one line per rank, then who waits for whom.
static void summarise(Watchdog *w, const bool *exited, const ProbeRingState *st, const bool *have,
                      int stuck, double waited, const char *certain, const Pending *pend,
                      char *out, size_t len) {
    size_t at = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (at < len) at += (size_t)snprintf(out + at, len - at, __VA_ARGS__);                     \
    } while (0)
    RankFacts *facts = xcalloc((size_t)w->n, sizeof(RankFacts));
    for (int i = 0; i < w->n; i++)
        rank_facts(w, w->ranks[i], &facts[i]);
    if (certain)
        ADD("hang: %s\n", certain);
    else
        ADD("hang: rank %d has waited %.1f s in collective #%lld (%s) and no rank is working\n",
            w->ranks[stuck], waited, (long long)facts[stuck].launched_seq,
            facts[stuck].launched_what[0] ? facts[stuck].launched_what : "?");
    for (int i = 0; i < w->n; i++) {
        const RankFacts *f = &facts[i];
        ADD("  rank %d: ", w->ranks[i]);
        if (exited[i]) ADD("exited; ");
        else if (have[i]) {
            double in_phase = (double)(now_ns() - st[i].phase_t_ns) / 1e9;
            ADD("%s for %.1f s; ", phase_name(st[i].phase), in_phase);
        }
        if (pend) { // from the ring too: the database may be a second behind
            char a[96];
            pending_text(&pend[i], a, sizeof a);
            ADD("pending #%lld (%s)\n", (long long)pend[i].seq, a);
            continue;
        }
        ADD("iteration %lld, last collective launched #%lld", (long long)f->iter,
            (long long)f->launched_seq);
        if (f->launched_what[0]) ADD(" (%s)", f->launched_what);
        ADD(", completed #%lld", (long long)f->done_seq);
        if (f->n_buckets > 0)
            ADD("; buckets launched %d of %d%s%s", f->n_launched, f->n_buckets,
                f->not_launched[0] ? ", never launched: " : "", f->not_launched);
        ADD("\n");
    }
    for (int i = 0; i < w->n && !pend; i++) {
        if (exited[i] || !have[i] || st[i].phase != PROBE_PHASE_COLLECTIVE) continue;
        for (int j = 0; j < w->n; j++) {
            if (j == i || facts[j].launched_seq >= facts[i].launched_seq) continue;
            ADD("  rank %d waits for rank %d: rank %d waits in #%lld, rank %d %s only up to #%lld\n",
                w->ranks[i], w->ranks[j], w->ranks[i], (long long)facts[i].launched_seq,
                w->ranks[j], exited[j] ? "exited having launched" : "has launched",
                (long long)facts[j].launched_seq);
        }
    }
#undef ADD
    free(facts);
}

// Prints the summary and appends it as a HANG record to every rank's ring.
static void report_hang(Watchdog *w, const bool *exited, const ProbeRingState *st, const bool *have,
                        int stuck, double waited, const char *certain, const Pending *pend,
                        FILE *out) {
    char text[8192];
    summarise(w, exited, st, have, stuck, waited, certain, pend, text, sizeof text);
    fprintf(out, "ddpdbg run: %s", text);
    fflush(out);
    for (int i = 0; i < w->n; i++)
        if (w->rings[i])
            probe_ring_emit(w->rings[i], PROBE_HANG, 0, st[i].phase_iter, w->ranks[stuck], 0, 0, 0,
                            text, strlen(text));
    w->reported = true;
}

bool watchdog_poll(Watchdog *w, const bool *exited, FILE *out) {
    if (w->reported) return false;
    ProbeRingState *st = xcalloc((size_t)w->n, sizeof(ProbeRingState));
    bool *have = xcalloc((size_t)w->n, sizeof(bool));
    int64_t now = now_ns();
    int stuck = -1, working = -1;
    double waited = 0;
    for (int i = 0; i < w->n; i++) {
        if (!w->rings[i] && !exited[i]) {
            char path[4200], err[256];
            snprintf(path, sizeof path, "%s/rank%d.ring", w->dir, w->ranks[i]);
            w->rings[i] = probe_ring_attach(path, err, sizeof err); // NULL until it exists
        }
        if (!w->rings[i] || exited[i]) continue;
        st[i] = probe_ring_state(w->rings[i]);
        have[i] = true;
        double in_phase = (double)(now - st[i].phase_t_ns) / 1e9;
        if (st[i].phase == PROBE_PHASE_COLLECTIVE) {
            if (in_phase > w->timeout_s && in_phase > waited) {
                stuck = i;
                waited = in_phase;
            }
        } else if (st[i].phase != PROBE_PHASE_DONE) {
            working = i;
        }
    }
    bool hang = false;
    char certain[1024] = "";
    Pending *pend = xcalloc((size_t)w->n, sizeof(Pending));
    if (working < 0 && certain_deadlock(w, exited, st, have, now, pend, certain, sizeof certain)) {
        for (int i = 0; i < w->n; i++) { // the one that waited longest, for the record
            double in_phase = (double)(now - st[i].phase_t_ns) / 1e9;
            if (have[i] && !exited[i] && in_phase > waited) stuck = i, waited = in_phase;
        }
    }
    if (certain[0] && stuck >= 0) {
        report_hang(w, exited, st, have, stuck, waited, certain, pend, out);
        hang = true;
    } else if (stuck >= 0 && working >= 0 && !w->straggler_said[stuck]) {
        w->straggler_said[stuck] = true;
        fprintf(out,
                "ddpdbg run: rank %d has waited %.1f s in a collective while rank %d is still in "
                "%s: a straggler (not a hang while it works)\n",
                w->ranks[stuck], waited, w->ranks[working], phase_name(st[working].phase));
    } else if (stuck >= 0 && working < 0) {
        report_hang(w, exited, st, have, stuck, waited, NULL, NULL, out);
        hang = true;
    }
    free(pend);
    free(st);
    free(have);
    return hang;
}
