/* model.c -- the trace directory as plain arrays (model.h). Each rank<R>.db is checked
 * (probe_db_check), opened read-only and read inside one read transaction, so that the params
 * table and the events are the same snapshot; its events are folded (model_fold.c) into
 * per-iteration bitmaps, bucket times and the collective list, so the model never holds the
 * raw events. Hook rows, most of a trace, are read only where the iteration's own events do
 * not vouch for them (read_rank). Ranks load in parallel (a thread per rank, at most one per
 * core). model_refresh reads the events above each rank's last seq. */
#include "tui/model/model.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/base.h"   // xcalloc, xrealloc, xstrdup, MIN, MAX
#include "probe/probe.h"    // ProbeKind, probe_db_check
#include "tui/model/model_fold.h" // RankLoader, Event, fold_event

static void set_err(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t len, const char *fmt, ...) {
    if (!err || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

// ---- one rank ------------------------------------------------------------------------------

static int64_t query_int(sqlite3 *db, const char *sql, int64_t fallback) {
    sqlite3_stmt *st;
    int64_t v = fallback;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return fallback;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void read_meta(ModelRank *r, sqlite3 *db, int *world) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT key, value FROM meta", -1, &st, NULL) != SQLITE_OK) return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0);
        const char *v = (const char *)sqlite3_column_text(st, 1);
        if (!k || !v) continue;
        if (!strcmp(k, "world"))
            *world = atoi(v);
        else if (!strcmp(k, "pid"))
            r->pid = atoi(v);
        else if (!strcmp(k, "host"))
            snprintf(r->host, sizeof r->host, "%s", v);
        else if (!strcmp(k, "args"))
            snprintf(r->args, sizeof r->args, "%s", v);
        else if (!strcmp(k, "closed"))
            snprintf(r->closed, sizeof r->closed, "%s", v);
        else if (!strcmp(k, "overruns"))
            r->overruns = atoll(v);
        else if (!strcmp(k, "exit"))
            snprintf(r->exit, sizeof r->exit, "%s", v);
        else if (!strcmp(k, "source"))
            r->snapshot = !strcmp(v, "flight_recorder");
        else if (!strcmp(k, "bucket_cap_bytes"))
            r->bucket_cap_bytes = atoll(v);
        else if (!strcmp(k, "first_bucket_bytes"))
            r->first_bucket_bytes = atoll(v);
        else if (!strcmp(k, "failed_first"))
            r->failed_first = !strcmp(v, "1");
    }
    sqlite3_finalize(st);
}

// Reads the rank's params table when it has grown (the first read, or a live trace whose
// writer had not stored it all). names/shapes go to the model from the first present rank.
static void read_params(ModelRank *r, RankLoader *L, char ***names, char ***shapes) {
    int n = (int)query_int(L->db, "SELECT count(*) FROM params", 0);
    if (n <= r->n_params) return;
    L->param_numel = xrealloc(L->param_numel, sizeof(int64_t) * (size_t)n);
    *names = xcalloc((size_t)n, sizeof(char *));
    *shapes = xcalloc((size_t)n, sizeof(char *));
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(L->db, "SELECT idx, name, shape, numel FROM params ORDER BY idx", -1,
                           &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            int i = sqlite3_column_int(st, 0);
            if (i < 0 || i >= n || (*names)[i]) continue;
            const char *name = (const char *)sqlite3_column_text(st, 1);
            const char *shape = (const char *)sqlite3_column_text(st, 2);
            (*names)[i] = xstrdup(name ? name : "?");
            (*shapes)[i] = xstrdup(shape ? shape : "");
            L->param_numel[i] = sqlite3_column_int64(st, 3);
        }
        sqlite3_finalize(st);
    }
    for (int i = 0; i < n; i++) { // a gap in idx (a damaged table): named, never NULL
        if (!(*names)[i]) (*names)[i] = xstrdup("?");
        if (!(*shapes)[i]) (*shapes)[i] = xstrdup("");
    }
    r->n_params = n;
    fold_grow_bitmaps(r, L, (n + 7) / 8);
}

// Derives state, phase and the pending collective from what was read.
static void finish_rank(ModelRank *r, RankLoader *L) {
    r->pending_seq = 0;
    for (int i = 0; i < r->n_colls; i++)
        if (!r->colls[i].t_done_ns && r->colls[i].seq > 0) {
            r->pending_seq = r->colls[i].seq;
            break;
        }
    // The newest word on the phase: a heartbeat's phase if it began after the last trainer
    // event, else what that event implies; a pending collective launched last is a wait.
    bool hb_newer = L->hb_phase >= 0 && L->hb_phase_t >= L->last_trainer_t;
    if (hb_newer) {
        r->phase = L->hb_phase;
        r->phase_t_ns = L->hb_phase_t;
    } else if (r->pending_seq && L->last_kind == PROBE_COLL_LAUNCH) {
        r->phase = PROBE_PHASE_COLLECTIVE;
        r->phase_t_ns = L->last_trainer_t;
    } else if (L->ev_phase >= 0) {
        r->phase = L->ev_phase;
        r->phase_t_ns = L->ev_phase_t;
    } else if (L->hb_phase >= 0) { // nothing but construction yet: the heartbeat's word
        r->phase = L->hb_phase;
        r->phase_t_ns = L->hb_phase_t;
    }
    r->wait_seq = 0;
    if (r->error)
        r->state = RANK_ERRORED;
    else if (!strcmp(r->closed, "clean")) {
        r->state = RANK_FINISHED;
        r->phase = PROBE_PHASE_DONE;
    } else if (!strcmp(r->closed, "drained"))
        r->state = RANK_DEAD;
    else if (r->pending_seq && r->phase == PROBE_PHASE_COLLECTIVE) {
        r->state = RANK_WAITING;
        r->wait_seq = r->pending_seq;
    } else
        r->state = RANK_RUNNING;
}

// Hook events (GRAD_READY, MARK_READY) are most of a trace: one per parameter per backward
// (two in a version 1 trace, whose hooks had a MARK_READY row of their own).
// An iteration whose backward finalized without an error had every parameter of its layout
// marked ready exactly once (the reducer finalizes only when every bucket is ready, and a
// second mark is its error), so without find_unused_parameters or static_graph (where the
// reducer marks unused parameters itself) its bitmaps are its layout and its hook rows are not
// read; GRAD_READY's c is then taken as 1 (the trainer fires a hook only for an accumulated
// gradient). Every other iteration's hooks are read by seq range (ModelIter.seq_first, the
// next iteration's seq_forward): the writer keeps no index on iter, whose upkeep was a quarter
// of its cost per row.

static sqlite3_stmt *prepare(RankLoader *L, sqlite3_stmt **st, const char *sql) {
    if (!*st && sqlite3_prepare_v2(L->db, sql, -1, st, NULL) != SQLITE_OK) *st = NULL;
    if (*st) sqlite3_reset(*st);
    return *st;
}

// Steps st, applying each row; returns the last sqlite3_step result.
static int apply_rows(ModelRank *r, RankLoader *L, sqlite3_stmt *st) {
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        Event e = {.seq = sqlite3_column_int64(st, 0),
                   .t = sqlite3_column_int64(st, 1),
                   .iter = sqlite3_column_int64(st, 2),
                   .kind = sqlite3_column_int(st, 3),
                   .a = sqlite3_column_int(st, 4),
                   .b = sqlite3_column_int(st, 5),
                   .c = sqlite3_column_int64(st, 6),
                   .d = sqlite3_column_int64(st, 7),
                   .flags = sqlite3_column_int(st, 8)};
        if (e.kind == PROBE_COLL_LAUNCH || e.kind == PROBE_COLL_DONE || e.kind == PROBE_ERROR ||
            e.kind == PROBE_HANG || e.kind == PROBE_GPU_KERNEL || e.kind == PROBE_GPU_MEMCPY ||
            e.kind == PROBE_GPU_MEMSET)
            e.text = (const char *)sqlite3_column_text(st, 9);
        fold_event(r, L, &e);
    }
    sqlite3_reset(st);
    return rc;
}

// Whether the reducer may mark parameters itself (then every hook row is read).
static bool reducer_marks_itself(const ModelRank *r) {
    static const char *keys[] = {"find_unused_parameters=true", "find_unused_parameters=True",
                                 "find_unused_parameters=1",    "static_graph=true",
                                 "static_graph=True",           "static_graph=1"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        if (strstr(r->args, keys[k])) return true;
    for (int i = 0; i < r->n_colls; i++)
        if (!strcmp(r->colls[i].what, "local_used_map")) return true;
    return false;
}

static void fill_from_layout(ModelRank *r, ModelIter *it) {
    const ModelLayout *l = &r->layouts[it->layout];
    for (int b = 0; b < l->n_buckets; b++) {
        for (int k = l->start[b]; k < l->start[b + 1]; k++) {
            int v = l->vars[k];
            if (v < 0 || v >= r->n_params) continue;
            fold_set_bit(it->grad_ready, v);
            fold_set_bit(it->marked, v);
        }
        it->bucket_ready[b] = l->start[b + 1] - l->start[b];
    }
    it->n_grad_ready = it->n_marked = l->start[l->n_buckets];
}

#define EVENT_COLUMNS "seq, t_ns, iter, kind, a, b, c, d, flags, text"

// Reads the events above last_seq. Returns 0, or -1 with the reason in r->load_error.
static int read_rank(ModelRank *r, char ***names, char ***shapes, int *world) {
    RankLoader *L = r->loader;
    *names = *shapes = NULL;
    // One read transaction: params, meta and events from the same snapshot of a live trace.
    if (sqlite3_exec(L->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        set_err(r->load_error, sizeof r->load_error, "trace %s: %s", L->path,
                sqlite3_errmsg(L->db));
        return -1;
    }
    read_meta(r, L->db, world);
    read_params(r, L, names, shapes);
    bool first = r->last_seq == 0;
    int64_t newest = query_int(L->db, "SELECT max(seq) FROM events", 0);
    int64_t n_new = first ? query_int(L->db, "SELECT count(*) FROM events", 0) : 0;
    // 1. Every event but the hooks, in seq order.
    sqlite3_stmt *st = prepare(L, &L->others,
                               "SELECT " EVENT_COLUMNS " FROM events WHERE seq > ?1 AND "
                               "kind NOT IN (8, 9) ORDER BY seq");
    int rc = SQLITE_ERROR;
    if (st) {
        sqlite3_bind_int64(st, 1, r->last_seq);
        rc = apply_rows(r, L, st);
    }
    fold_finish_layout(r, L);
    // 2. The iterations that may have new hooks: on a first load every one whose backward
    // began; on a refresh those the new hook rows name.
    int64_t *iters = NULL;
    int n_iters = 0;
    if (rc == SQLITE_DONE && first) {
        iters = xcalloc((size_t)MAX(r->n_iters, 1), sizeof(int64_t));
        for (int i = 0; i < r->n_iters; i++)
            if (r->iters[i].t_backward_ns) iters[n_iters++] = r->iters[i].iter;
    } else if (rc == SQLITE_DONE) {
        st = prepare(
            L, &L->hook_iters,
            "SELECT DISTINCT iter FROM events WHERE seq > ?1 AND kind IN (8, 9) ORDER BY iter");
        rc = st ? SQLITE_DONE : SQLITE_ERROR;
        if (st) sqlite3_bind_int64(st, 1, r->last_seq);
        int cap = 0;
        while (st && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (n_iters == cap)
                iters = xrealloc(iters, sizeof(int64_t) * (size_t)(cap = cap ? 2 * cap : 16));
            iters[n_iters++] = sqlite3_column_int64(st, 0);
        }
        if (st) sqlite3_reset(st);
    }
    // 3. Their hooks: from the layout where the finalize vouches for them, else row by row.
    bool self_marks = reducer_marks_itself(r);
    for (int k = 0; k < n_iters && rc == SQLITE_DONE; k++) {
        if (iters[k] < 0) continue;
        ModelIter *it = fold_iter(r, L, iters[k]);
        if (!self_marks && it->finalized && it->layout >= 0 && !it->n_grad_ready && !it->n_marked &&
            !(r->error && r->error_iter == it->iter)) {
            fill_from_layout(r, it);
            continue;
        }
        // Its rows by seq (the primary key; the trace has no index on iter): after its first
        // event and before the next iteration's forward.
        int64_t lo = MAX(r->last_seq, it->seq_first - 1), hi = INT64_MAX;
        for (int n = (int)(it - r->iters) + 1; n < r->n_iters && hi == INT64_MAX; n++)
            if (r->iters[n].seq_forward) hi = r->iters[n].seq_forward;
        st = prepare(L, &L->hook_rows,
                     "SELECT " EVENT_COLUMNS " FROM events WHERE seq > ?2 AND seq < ?3 AND "
                     "iter = ?1 AND kind IN (8, 9) ORDER BY seq");
        if (!st) {
            rc = SQLITE_ERROR;
            break;
        }
        sqlite3_bind_int64(st, 1, iters[k]);
        sqlite3_bind_int64(st, 2, lo);
        sqlite3_bind_int64(st, 3, hi);
        rc = apply_rows(r, L, st);
    }
    free(iters);
    if (rc == SQLITE_DONE) {
        if (!first) {
            sqlite3_stmt *c =
                prepare(L, &L->count_new, "SELECT count(*) FROM events WHERE seq > ?1");
            if (c) {
                sqlite3_bind_int64(c, 1, r->last_seq);
                if (sqlite3_step(c) == SQLITE_ROW) n_new = sqlite3_column_int64(c, 0);
                sqlite3_reset(c);
            }
        }
        r->n_events += n_new;
        r->last_seq = MAX(r->last_seq, newest);
    } else
        set_err(r->load_error, sizeof r->load_error, "trace %s: reading its events: %s", L->path,
                sqlite3_errmsg(L->db));
    sqlite3_exec(L->db, "COMMIT", NULL, NULL, NULL);
    finish_rank(r, L);
    return rc == SQLITE_DONE ? 0 : -1;
}

static void loader_free(RankLoader *L) {
    if (!L) return;
    sqlite3_stmt *all[] = {L->others, L->hook_iters, L->hook_rows, L->count_new};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        sqlite3_finalize(all[i]);
    sqlite3_close(L->db);
    free(L->param_numel);
    free(L->b_bucket);
    free(L->b_var);
    free(L->coll_by_seq);
    free(L->name_slots);
    free(L->corr_keys);
    free(L->corr_seqs);
    free(L);
}

// Checks and opens rank<R>.db. Returns 0, or -1 with r->load_error set.
static int open_rank(ModelRank *r, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank%d.db", dir, r->rank);
    struct stat sb;
    if (stat(path, &sb) < 0) {
        set_err(r->load_error, sizeof r->load_error, "trace %s: %s", path, strerror(errno));
        return -1;
    }
    if (probe_db_check(path, r->load_error, sizeof r->load_error) < 0) return -1;
    RankLoader *L = xcalloc(1, sizeof *L);
    snprintf(L->path, sizeof L->path, "%s", path);
    L->building = -1;
    L->cur = -1;
    L->hb_phase = L->ev_phase = -1;
    if (sqlite3_open_v2(path, &L->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        set_err(r->load_error, sizeof r->load_error, "trace %s cannot be read: %s", path,
                sqlite3_errmsg(L->db));
        loader_free(L);
        return -1;
    }
    sqlite3_busy_timeout(L->db, 1000); // a live writer holds its lock for a batch, a few ms
    r->loader = L;
    r->hang_rank = -1;
    return 0;
}

static void rank_clear(ModelRank *r) {
    loader_free(r->loader);
    free(r->error);
    free(r->hang);
    for (int i = 0; i < r->n_layouts; i++) {
        free(r->layouts[i].start);
        free(r->layouts[i].vars);
        free(r->layouts[i].numel);
    }
    free(r->layouts);
    for (int i = 0; i < r->n_iters; i++)
        fold_iter_free(&r->iters[i]);
    free(r->iters);
    free(r->colls);
    free(r->gpu);
    for (int i = 0; i < r->n_gpu_names; i++)
        free(r->gpu_names[i]);
    free(r->gpu_names);
    int rank = r->rank;
    *r = (ModelRank){.rank = rank, .hang_rank = -1};
}

// ---- the whole directory -------------------------------------------------------------------

typedef struct Job {
    ModelRank *rank;
    const char *dir;
    bool opened; // this job opened the rank (a first load, not a refresh)
    int rc, world;
    char **names, **shapes; // params the read found (owned by the job until taken)
    int n_names;
} Job;

typedef struct Pool {
    Job *jobs;
    int n, next;
    pthread_mutex_t lock;
} Pool;

static void run_job(Job *j) {
    ModelRank *r = j->rank;
    if (!r->loader) {
        j->opened = true;
        if (open_rank(r, j->dir) < 0) {
            j->rc = -1;
            return;
        }
    }
    j->rc = read_rank(r, &j->names, &j->shapes, &j->world);
    j->n_names = j->names ? r->n_params : 0;
    if (j->rc == 0) r->present = true;
}

static void *worker(void *arg) {
    Pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int k = p->next < p->n ? p->next++ : -1;
        pthread_mutex_unlock(&p->lock);
        if (k < 0) return NULL;
        run_job(&p->jobs[k]);
    }
}

// Runs the jobs on up to one thread per core.
static void run_jobs(Job *jobs, int n) {
    Pool pool = {.jobs = jobs, .n = n};
    pthread_mutex_init(&pool.lock, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = (int)MIN((long)n, MAX(1L, MIN(cores, 16L)));
    pthread_t *threads = xcalloc((size_t)MAX(n_threads, 1), sizeof(pthread_t));
    int started = 0;
    for (int i = 1; i < n_threads; i++)
        if (pthread_create(&threads[started], NULL, worker, &pool) == 0) started++;
    worker(&pool); // this thread works too
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    pthread_mutex_destroy(&pool.lock);
}

// The rank numbers of dir's rank<R>.db files, ascending; -1 when dir cannot be listed.
static int list_ranks(const char *dir, int **out) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    *out = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        int rank, end = 0;
        if (sscanf(de->d_name, "rank%d.db%n", &rank, &end) != 1 || de->d_name[end] || rank < 0 ||
            rank > 1 << 20)
            continue;
        char canon[32]; // "rank007.db" is not ours
        snprintf(canon, sizeof canon, "rank%d.db", rank);
        if (strcmp(canon, de->d_name)) continue;
        if (n == cap) *out = xrealloc(*out, sizeof(int) * (size_t)(cap = cap ? 2 * cap : 16));
        (*out)[n++] = rank;
    }
    closedir(d);
    for (int i = 1; i < n; i++) // insertion sort: a few hundred at most
        for (int k = i; k > 0 && (*out)[k - 1] > (*out)[k]; k--) {
            int t = (*out)[k];
            (*out)[k] = (*out)[k - 1];
            (*out)[k - 1] = t;
        }
    return n;
}

// Grows m->ranks to world entries (new ones: absent, not yet looked at).
static void ensure_world(Model *m, int world) {
    if (world <= m->world) return;
    m->ranks = xrealloc(m->ranks, sizeof(ModelRank) * (size_t)world);
    for (int r = m->world; r < world; r++) {
        m->ranks[r] = (ModelRank){.rank = r, .hang_rank = -1};
        set_err(m->ranks[r].load_error, sizeof m->ranks[r].load_error, "trace %s/rank%d.db: %s",
                m->dir, r, strerror(ENOENT));
    }
    m->world = world;
}

// Frees the parameter table (names, shapes, numel); the caller resets or replaces it.
static void free_params(Model *m) {
    for (int i = 0; i < m->n_params; i++) {
        free(m->param_names[i]);
        free(m->param_shapes[i]);
    }
    free(m->param_names);
    free(m->param_shapes);
    free(m->param_numel);
}

static void take_params(Model *m, Job *j) {
    if (j->names && j->n_names > m->n_params) {
        free_params(m);
        m->n_params = j->n_names;
        m->param_names = j->names;
        m->param_shapes = j->shapes;
        m->param_numel = xcalloc((size_t)m->n_params, sizeof(int64_t));
        memcpy(m->param_numel, j->rank->loader->param_numel, sizeof(int64_t) * (size_t)m->n_params);
        j->names = j->shapes = NULL;
    }
    for (int i = 0; j->names && i < j->n_names; i++) {
        free(j->names[i]);
        free(j->shapes[i]);
    }
    free(j->names);
    free(j->shapes);
}

static void summarise(Model *m) {
    m->t0_ns = m->t1_ns = 0;
    m->min_iter = 0;
    m->max_iter = -1;
    m->n_present = 0;
    bool any_iter = false;
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present) continue;
        m->n_present++;
        for (int i = 0; i < mr->n_iters; i++) {
            const ModelIter *it = &mr->iters[i];
            if (it->t_first_ns && (!m->t0_ns || it->t_first_ns < m->t0_ns))
                m->t0_ns = it->t_first_ns;
        }
        for (int i = 0; i < mr->n_colls; i++)
            if (!m->t0_ns || mr->colls[i].t_launch_ns < m->t0_ns)
                m->t0_ns = mr->colls[i].t_launch_ns;
        for (int i = 0; i < mr->n_gpu; i++)
            if (mr->gpu[i].t_start_ns && (!m->t0_ns || mr->gpu[i].t_start_ns < m->t0_ns))
                m->t0_ns = mr->gpu[i].t_start_ns;
        m->t1_ns = MAX(m->t1_ns, MAX(mr->last_event_ns, mr->last_heartbeat_ns));
        if (mr->n_iters) {
            if (!any_iter || mr->iters[0].iter < m->min_iter) m->min_iter = mr->iters[0].iter;
            if (!any_iter || mr->iters[mr->n_iters - 1].iter > m->max_iter)
                m->max_iter = mr->iters[mr->n_iters - 1].iter;
            any_iter = true;
        }
    }
    if (!m->t0_ns) m->t0_ns = m->t1_ns;
}

// Loads (first) or refreshes every rank; on a refresh an absent rank is retried once its file
// exists.
static void load_ranks(Model *m, bool first) {
    Job *jobs = xcalloc((size_t)m->world, sizeof(Job));
    int n = 0;
    for (int r = 0; r < m->world; r++) {
        ModelRank *mr = &m->ranks[r];
        if (!first && !mr->loader) { // absent at the last look: has its file appeared?
            char path[4200];
            struct stat sb;
            snprintf(path, sizeof path, "%s/rank%d.db", m->dir, r);
            if (stat(path, &sb) < 0) continue;
        }
        jobs[n++] = (Job){.rank = mr, .dir = m->dir};
    }
    run_jobs(jobs, n);
    int world = m->world;
    for (int k = 0; k < n; k++) {
        if (jobs[k].rc == 0)
            take_params(m, &jobs[k]);
        else if (jobs[k].opened) { // keep the reason, drop the half-open state
            char why[256];
            snprintf(why, sizeof why, "%s", jobs[k].rank->load_error);
            rank_clear(jobs[k].rank);
            set_err(jobs[k].rank->load_error, sizeof jobs[k].rank->load_error, "%s", why);
        }
        if (jobs[k].rc == 0) {
            jobs[k].rank->load_error[0] = '\0';
            world = MAX(world, jobs[k].world);
        }
    }
    free(jobs);
    ensure_world(m, world); // meta may say more ranks than there are files: those are missing
    summarise(m);
}

int model_load(Model *m, const char *dir, char *err, size_t errlen) {
    *m = (Model){.min_iter = 0, .max_iter = -1};
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    struct stat sb;
    if (stat(dir, &sb) < 0) {
        set_err(err, errlen, "trace %s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        set_err(err, errlen,
                "trace %s is not a directory: expected a trace directory holding rank<R>.db files",
                dir);
        return -1;
    }
    int *ranks;
    int n = list_ranks(dir, &ranks);
    if (n < 0) {
        set_err(err, errlen, "trace %s: %s", dir, strerror(errno));
        return -1;
    }
    if (n == 0) {
        set_err(err, errlen, "trace %s holds no rank<R>.db files: not a ddpdbg trace directory",
                dir);
        return -1;
    }
    ensure_world(m, ranks[n - 1] + 1);
    free(ranks);
    load_ranks(m, true);
    if (m->n_present == 0) {
        set_err(err, errlen, "%s", m->ranks[0].load_error);
        for (int r = 0; r < m->world; r++) // the first rank whose file exists says why
            if (m->ranks[r].load_error[0] && !strstr(m->ranks[r].load_error, strerror(ENOENT))) {
                set_err(err, errlen, "%s", m->ranks[r].load_error);
                break;
            }
        model_free(m);
        return -1;
    }
    return 0;
}

int model_refresh(Model *m, char *err, size_t errlen) {
    int *ranks;
    int n = list_ranks(m->dir, &ranks);
    if (n < 0) {
        set_err(err, errlen, "trace %s: %s", m->dir, strerror(errno));
        return -1;
    }
    if (n > 0) ensure_world(m, ranks[n - 1] + 1);
    free(ranks);
    load_ranks(m, false);
    for (int r = 0; r < m->world; r++)
        if (m->ranks[r].loader && m->ranks[r].load_error[0]) {
            set_err(err, errlen, "%s", m->ranks[r].load_error);
            return -1;
        }
    return 0;
}

void model_free(Model *m) {
    for (int r = 0; r < m->world; r++)
        rank_clear(&m->ranks[r]);
    free(m->ranks);
    free_params(m);
    *m = (Model){.min_iter = 0, .max_iter = -1};
}
