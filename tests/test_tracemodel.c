/* test_tracemodel.c -- tui/model/model.c: the example traces (traces/examples/, real 2-rank
 * rtdetr-tiny runs) and synthetic ones (tests/trace_synth.h) load into the counts, bitmaps,
 * bucket times and states they recorded; a missing rank file, a corrupt or truncated one, a
 * foreign file, an empty directory and a newer schema are refused with one clear line; a
 * refresh reads only what was appended; CUPTI records do not pose as iterations; loading never
 * writes to the trace. For every example (one per scenario), the hooks the model folds and the
 * events the teaching mode loads equal plain SQL counts. */
#include "tui/model/model.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe/probe.h"
#include "probe/tracedb.h"
#include "tests/expect.h"
#include "tests/sqlite_query.h"
#include "tests/trace_synth.h"
#include "tui/diagnosis/export.h"
#include "tui/teach/teach.h"

static char tmp[256];

static const char *path_in(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    return p;
}

static int count_bits(const uint8_t *bits, int n) {
    int k = 0;
    for (int i = 0; i < n; i++)
        k += model_bit(bits, i);
    return k;
}

static bool file_bytes(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc(*len + 1);
    bool ok = fread(*out, 1, *len, f) == *len;
    fclose(f);
    return ok;
}

static void test_examples(void) {
    Model m;
    char err[512] = "";
    if (model_load(&m, "traces/examples/healthy", err, sizeof err) < 0) {
        EXPECT(0, "healthy example: %s", err);
        return;
    }
    EXPECT(m.world == 2 && m.n_present == 2, "world %d, present %d", m.world, m.n_present);
    EXPECT(m.n_params == 323, "rtdetr-tiny has 323 parameters, got %d", m.n_params);
    EXPECT(m.min_iter == 0 && m.max_iter == 6, "iterations %lld..%lld", (long long)m.min_iter,
           (long long)m.max_iter);
    EXPECT(m.t0_ns > 0 && m.t1_ns > m.t0_ns, "times %lld..%lld", (long long)m.t0_ns,
           (long long)m.t1_ns);
    for (int r = 0; r < 2; r++) {
        const ModelRank *mr = &m.ranks[r];
        EXPECT(mr->state == RANK_FINISHED, "rank %d: %s", r, model_state_name(mr->state));
        EXPECT(mr->n_layouts == 2 && mr->layouts[0].n_buckets == 1,
               "rank %d: initial layout and a rebuild", r);
        EXPECT(mr->n_iters == 7, "rank %d: %d iterations", r, mr->n_iters);
        for (int i = 0; i < mr->n_iters; i++) {
            const ModelIter *it = &mr->iters[i];
            EXPECT(it->n_grad_ready == 323 && count_bits(it->grad_ready, 323) == 323 &&
                       it->finalized,
                   "rank %d iteration %lld: %d hooks, finalized %d", r, (long long)it->iter,
                   it->n_grad_ready, it->finalized);
            const ModelLayout *l = &mr->layouts[it->layout];
            for (int b = 0; b < l->n_buckets; b++)
                EXPECT(it->bucket_ready[b] == l->start[b + 1] - l->start[b] &&
                           it->bucket_seq[b] > 0 &&
                           it->bucket_done_ns[b] >= it->bucket_launch_ns[b],
                       "rank %d iteration %lld bucket %d", r, (long long)it->iter, b);
        }
        int done = 0;
        for (int k = 0; k < mr->n_colls; k++)
            done += mr->colls[k].ok && mr->colls[k].t_done_ns;
        EXPECT(mr->n_colls > 0 && done == mr->n_colls, "rank %d: %d of %d collectives completed", r,
               done, mr->n_colls);
        EXPECT(mr->pending_seq == 0 && !mr->error && !mr->hang, "rank %d: nothing pending", r);
    }
    EXPECT(model_iter(&m, 1, 6) && !model_iter(&m, 1, 7) && !model_iter(&m, 2, 0),
           "model_iter bounds");
    model_free(&m);

    EXPECT(model_load(&m, "traces/examples/field_report", err, sizeof err) == 0, "field report: %s",
           err);
    if (m.world == 2) {
        const ModelRank *r0 = &m.ranks[0], *r1 = &m.ranks[1];
        EXPECT(r0->state == RANK_ERRORED && r0->error && r0->error_iter == 2 &&
                   !strncmp(r0->error, "Expected to have finished reduction in the prior iteration",
                            58),
               "rank 0 errored at iteration 2: %s", r0->error ? r0->error : "(none)");
        const ModelIter *it = model_iter(&m, 0, 1);
        EXPECT(it && it->n_grad_ready == 298 && !it->finalized && it->t_backward_end_ns &&
                   it->n_boxes == 0 && it->n_images == 1,
               "rank 0 iteration 1: 298 hooks, no finalize, 0 boxes");
        int missing = 0, box_heads = 0;
        for (int p = 0; it && p < m.n_params; p++)
            if (!model_bit(it->marked, p)) {
                missing++;
                box_heads += strstr(m.param_names[p], "bbox_head") ||
                             strstr(m.param_names[p], "denoising_class_embed");
            }
        EXPECT(missing == 25 && box_heads == 25,
               "rank 0 iteration 1: %d unmarked, %d of them box heads", missing, box_heads);
        EXPECT(it && it->layout == 1 && it->bucket_seq[0] == 0 &&
                   it->bucket_ready[0] < r0->layouts[1].start[1],
               "rank 0: bucket 0 never launched at iteration 1");
        // stopped by the launcher (dead, drained) or, when Gloo noticed rank 0's exit first, an
        // error from its collective: the recording decides, both are what really happens
        EXPECT((r1->state == RANK_DEAD && !strcmp(r1->closed, "drained")) ||
                   (r1->state == RANK_ERRORED && r1->error && strstr(r1->error, "collective")),
               "rank 1 was stopped or lost its peer: %s", model_state_name(r1->state));
        const ModelIter *it1 = model_iter(&m, 1, 1);
        EXPECT(it1 && it1->n_boxes > 0, "rank 1's batch at iteration 1 had boxes");
    }
    model_free(&m);

    EXPECT(model_load(&m, "traces/examples/skip_backward", err, sizeof err) == 0, "hang: %s", err);
    if (m.world == 2) {
        for (int r = 0; r < 2; r++)
            EXPECT(m.ranks[r].hang && m.ranks[r].hang_rank >= 0 &&
                       !strncmp(m.ranks[r].hang, "hang: ", 6),
                   "rank %d holds the watchdog's HANG record", r);
        const ModelIter *it = model_iter(&m, 1, 1);
        EXPECT(it && it->t_forward_end_ns && !it->t_backward_ns,
               "rank 1: a forward without backward at iteration 1");
        // both waited in collective #N (rank 1's may have ended failed when rank 0 was stopped)
        EXPECT(m.ranks[0].pending_seq > 0 && (m.ranks[1].pending_seq == m.ranks[0].pending_seq ||
                                              m.ranks[1].state == RANK_ERRORED),
               "both wait in the same collective number (%lld, %lld)",
               (long long)m.ranks[0].pending_seq, (long long)m.ranks[1].pending_seq);
    }
    model_free(&m);

    EXPECT(model_load(&m, "traces/examples/find_unused", err, sizeof err) == 0, "find_unused: %s",
           err);
    if (m.world == 2) {
        const ModelIter *it = model_iter(&m, 0, 1);
        EXPECT(it && it->n_marked_unused == 25 && it->n_marked == 323 && it->n_grad_ready == 298 &&
                   it->finalized,
               "rank 0 iteration 1: 25 marked unused, all marked, finalized");
        EXPECT(m.ranks[0].state == RANK_FINISHED && m.ranks[1].state == RANK_FINISHED,
               "both finished");
    }
    model_free(&m);
}

// Opens rank r's database of dir read-only and prepares sql on it; NULL (and *db NULL) when
// either fails.
static sqlite3_stmt *rank_query(const char *dir, int r, const char *sql, sqlite3 **db) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank%d.db", dir, r);
    sqlite3_stmt *q = NULL;
    *db = db_open(path);
    if (sqlite3_prepare_v2(*db, sql, -1, &q, NULL) != SQLITE_OK) {
        EXPECT(0, "%s: %s", path, sqlite3_errmsg(*db));
        sqlite3_close(*db);
        *db = NULL;
    }
    return q;
}

static void query_done(sqlite3_stmt *q, sqlite3 *db) {
    sqlite3_finalize(q);
    sqlite3_close(db);
}

// The hooks the model folded for each rank and iteration (read by seq range, or vouched for by
// the layout of a finalized iteration) are the ones a plain SQL count over the table finds.
// Marks: MARK_READY rows and (version 2) GRAD_READY rows flagged marked.
static void check_hooks(const char *dir, const Model *m) {
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        sqlite3 *db;
        sqlite3_stmt *q = rank_query(
            dir, r,
            "SELECT (SELECT count(DISTINCT a) FROM events WHERE iter = ?1 AND kind = 8 AND c = 1),"
            " (SELECT count(DISTINCT a) FROM events WHERE iter = ?1 AND"
            " (kind = 9 OR (kind = 8 AND flags & 2)))",
            &db);
        for (int i = 0; q && i < mr->n_iters; i++) {
            const ModelIter *it = &mr->iters[i];
            sqlite3_bind_int64(q, 1, it->iter);
            bool row = sqlite3_step(q) == SQLITE_ROW;
            int hooks = row ? sqlite3_column_int(q, 0) : -1,
                marks = row ? sqlite3_column_int(q, 1) : -1;
            sqlite3_reset(q);
            EXPECT(it->n_grad_ready == hooks && it->n_marked == marks,
                   "%s rank %d iteration %lld: %d hooks and %d marks, SQL counts %d and %d", dir, r,
                   (long long)it->iter, it->n_grad_ready, it->n_marked, hooks, marks);
        }
        query_done(q, db);
    }
}

// The teaching mode's loader, for its default iterations, reads (by seq, from the iteration
// before) exactly the rows a plain SQL query over the table selects: every kind but META,
// PARAM, HEARTBEAT and TEXT, one LAYOUT row per generation, and a marking hook's row twice
// (the hook, then its mark).
static void check_teach_load(const char *dir, const Model *m) {
    int64_t lo, hi, want = 0;
    teach_default_range(m, &lo, &hi);
    Teach t;
    char err[512] = "";
    if (teach_load(&t, m, lo, hi, err, sizeof err)) {
        EXPECT(0, "%s: %s", dir, err);
        return;
    }
    for (int r = 0; r < m->world; r++) {
        sqlite3 *db;
        sqlite3_stmt *q = rank_query(
            dir, r,
            "SELECT (SELECT count(*) FROM events WHERE iter BETWEEN ?1 AND ?2 AND kind NOT IN "
            "(?3, ?4, ?5, ?6, ?7)) + (SELECT count(DISTINCT a) FROM events WHERE iter BETWEEN ?1 "
            "AND ?2 AND kind = ?7) + (SELECT count(*) FROM events WHERE iter BETWEEN ?1 AND ?2 "
            "AND kind = 8 AND flags & 2)",
            &db);
        if (!q) continue;
        sqlite3_bind_int64(q, 1, lo), sqlite3_bind_int64(q, 2, hi);
        sqlite3_bind_int(q, 3, PROBE_META), sqlite3_bind_int(q, 4, PROBE_PARAM);
        sqlite3_bind_int(q, 5, PROBE_HEARTBEAT), sqlite3_bind_int(q, 6, PROBE_TEXT);
        sqlite3_bind_int(q, 7, PROBE_LAYOUT);
        if (sqlite3_step(q) == SQLITE_ROW) want += sqlite3_column_int64(q, 0);
        query_done(q, db);
    }
    EXPECT(t.n == want, "%s, iterations %lld..%lld: teach_load read %d events, SQL selects %lld",
           dir, (long long)lo, (long long)hi, t.n, (long long)want);
    teach_free(&t);
}

// Every example trace (one per scenario): the model's hooks and the teaching mode's loader
// against plain SQL.
static void test_every_example(void) {
    DIR *d = opendir("traces/examples");
    EXPECT(d, "traces/examples");
    int n_examples = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char dir[512], err[512] = "";
        snprintf(dir, sizeof dir, "traces/examples/%s", de->d_name);
        Model m;
        if (model_load(&m, dir, err, sizeof err) < 0) {
            EXPECT(0, "%s: %s", dir, err);
            continue;
        }
        n_examples++;
        check_hooks(dir, &m);
        check_teach_load(dir, &m);
        model_free(&m);
    }
    if (d) closedir(d);
    EXPECT(n_examples >= 12, "%d example traces", n_examples);
}

static void test_synthetic(void) {
    char err[512] = "";
    SynthSpec s = synth_default();
    int64_t events = 0;
    EXPECT(synth_trace(path_in("plain"), &s, &events, err, sizeof err) == 0, "%s", err);
    Model m;
    EXPECT(model_load(&m, path_in("plain"), err, sizeof err) == 0, "%s", err);
    EXPECT(m.world == 2 && m.n_params == 16 && m.max_iter == 2, "world %d params %d iters ..%lld",
           m.world, m.n_params, (long long)m.max_iter);
    EXPECT(m.ranks[0].n_events + m.ranks[1].n_events == events, "%lld events loaded of %lld",
           (long long)(m.ranks[0].n_events + m.ranks[1].n_events), (long long)events);
    for (int r = 0; r < 2 && m.world == 2; r++) {
        const ModelRank *mr = &m.ranks[r];
        EXPECT(mr->n_colls == 9 && mr->n_layouts == 1 && mr->layouts[0].n_buckets == 2 &&
                   mr->layouts[0].numel[0] == 8 * 64,
               "rank %d: 9 collectives, one 2-bucket layout", r);
        EXPECT(!strcmp(m.param_names[13], "model.1.block.5.weight") && m.param_numel[13] == 64,
               "names and sizes");
        for (int i = 0; i < mr->n_iters; i++) {
            const ModelIter *it = &mr->iters[i];
            EXPECT(it->n_grad_ready == 16 && it->n_marked == 16 && it->finalized &&
                       it->bucket_ready[0] == 8 && it->bucket_ready[1] == 8 &&
                       it->bucket_seq[1] == it->bucket_seq[0] + 1 && it->n_boxes == 2,
                   "rank %d iteration %lld", r, (long long)it->iter);
        }
    }
    model_free(&m);

    // Parameters 12..15 (bucket 0) get no hook on rank 0 at iteration 1.
    s = synth_default();
    s.unused_rank = 0, s.unused_iter = 1, s.unused_first = 12, s.unused_count = 4;
    EXPECT(synth_trace(path_in("unused"), &s, NULL, err, sizeof err) == 0, "%s", err);
    EXPECT(model_load(&m, path_in("unused"), err, sizeof err) == 0, "%s", err);
    const ModelIter *it = model_iter(&m, 0, 1);
    EXPECT(it && it->n_grad_ready == 12 && !model_bit(it->grad_ready, 12) &&
               !model_bit(it->marked, 15) && model_bit(it->marked, 11) &&
               it->bucket_ready[0] == 4 && it->bucket_seq[0] == 0 && !it->finalized,
           "rank 0 iteration 1: 12 hooks, bucket 0 at 4 of 8, never launched");
    EXPECT(m.ranks[0].state == RANK_ERRORED && m.ranks[0].error_iter == 2,
           "rank 0 errored at its next forward");
    const ModelIter *o = model_iter(&m, 1, 1);
    EXPECT(m.ranks[1].state == RANK_DEAD && o && o->bucket_seq[0] > 0 &&
               m.ranks[1].pending_seq == o->bucket_seq[0] &&
               m.ranks[1].phase == PROBE_PHASE_COLLECTIVE,
           "rank 1 drained waiting in bucket 0's allreduce (pending %lld)",
           (long long)m.ranks[1].pending_seq);
    model_free(&m);

    // CUPTI records: iter is a correlation id, not an iteration.
    s = synth_default();
    s.gpu_kernels = 1;
    EXPECT(synth_trace(path_in("gpu"), &s, NULL, err, sizeof err) == 0, "%s", err);
    EXPECT(model_load(&m, path_in("gpu"), err, sizeof err) == 0, "%s", err);
    EXPECT(m.ranks[0].n_iters == 3 && m.max_iter == 2, "GPU records made %d iterations",
           m.ranks[0].n_iters);
    EXPECT(m.ranks[0].n_gpu == 6 && m.ranks[0].n_gpu_names == 1 &&
               m.ranks[0].gpu[0].coll_seq == m.ranks[0].iters[0].bucket_seq[0] &&
               m.ranks[0].gpu[0].kind == PROBE_GPU_KERNEL &&
               m.ranks[0].gpu[0].t_end_ns > m.ranks[0].gpu[0].t_start_ns,
           "6 kernels, one name, correlated to their bucket allreduce");
    // The export draws each kernel on its collective's track (10, 11, ...), nested under it,
    // when it ran inside the collective's span; else on its stream's track (100 + 7).
    char *json = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&json, &len);
    EXPECT(export_chrome(&m, f) == 0, "export");
    fclose(f);
    int nested = 0, on_stream = 0;
    for (const char *p = json; (p = strstr(p, "\"cat\":\"gpu\"")); p++) {
        const char *start = p;
        while (start > json && *start != '{') start--;
        const char *tid = strstr(start, "\"tid\":");
        int t = tid && tid < p + 200 ? atoi(tid + 6) : -1;
        nested += t >= 10 && t < 100, on_stream += t == 107;
    }
    int inside = 0, n_gpu = 0;
    for (int r = 0; r < m.world; r++)
        for (int i = 0; i < m.ranks[r].n_gpu; i++, n_gpu++) {
            const ModelGpu *g = &m.ranks[r].gpu[i];
            const ModelCollective *c = model_rank_coll(&m.ranks[r], g->coll_seq);
            inside += c && c->t_done_ns && g->t_start_ns >= c->t_launch_ns &&
                      g->t_end_ns <= c->t_done_ns;
        }
    printf("export: %d GPU spans nested under their collective, %d on the stream track (%d "
           "inside their collective's span)\n", nested, on_stream, inside);
    EXPECT(nested == inside && nested + on_stream == n_gpu && nested > 0,
           "kernels inside their collective nest under it: %d nested, %d on the stream, %d inside",
           nested, on_stream, inside);
    free(json);
    model_free(&m);
}

// A version 1 trace (each hook's mark a MARK_READY row of its own) loads into the same model,
// and replays as the same steps, as the version 2 trace of the same run (one row per marking
// hook): with every parameter used, and with find_unused_parameters marking some unused.
static void test_version1(void) {
    for (int variant = 0; variant < 2; variant++) {
        char err[512] = "", v1[600], v2[600];
        SynthSpec s = synth_default();
        if (variant) {
            s.find_unused = true;
            s.unused_rank = 0, s.unused_iter = 1, s.unused_first = 12, s.unused_count = 4;
        }
        snprintf(v2, sizeof v2, "%s", path_in(variant ? "v2_unused" : "v2"));
        snprintf(v1, sizeof v1, "%s", path_in(variant ? "v1_unused" : "v1"));
        EXPECT(synth_trace(v2, &s, NULL, err, sizeof err) == 0, "%s", err);
        s.split_marks = true;
        EXPECT(synth_trace(v1, &s, NULL, err, sizeof err) == 0, "%s", err);
        Model a, b;
        if (model_load(&a, v1, err, sizeof err) < 0 || model_load(&b, v2, err, sizeof err) < 0) {
            EXPECT(0, "%s", err);
            continue;
        }
        check_hooks(v1, &a);
        check_hooks(v2, &b);
        int bitmap = (a.n_params + 7) / 8;
        for (int r = 0; r < a.world && a.world == b.world; r++) {
            const ModelRank *ra = &a.ranks[r], *rb = &b.ranks[r];
            EXPECT(ra->n_iters == rb->n_iters, "variant %d rank %d: %d and %d iterations", variant,
                   r, ra->n_iters, rb->n_iters);
            for (int i = 0; i < ra->n_iters && i < rb->n_iters; i++) {
                const ModelIter *x = &ra->iters[i], *y = &rb->iters[i];
                EXPECT(x->n_grad_ready == y->n_grad_ready && x->n_marked == y->n_marked &&
                           x->n_marked_unused == y->n_marked_unused &&
                           !memcmp(x->marked, y->marked, (size_t)bitmap) &&
                           !memcmp(x->marked_unused, y->marked_unused, (size_t)bitmap) &&
                           !memcmp(x->bucket_ready, y->bucket_ready,
                                   sizeof(int) * (size_t)ra->layouts[x->layout].n_buckets) &&
                           x->finalized == y->finalized,
                       "variant %d rank %d iteration %lld: version 1 and 2 fold alike (marks %d "
                       "and %d, unused %d and %d)",
                       variant, r, (long long)x->iter, x->n_marked, y->n_marked, x->n_marked_unused,
                       y->n_marked_unused);
            }
        }
        Teach ta, tb;
        int64_t lo = 0, hi = a.max_iter;
        if (teach_load(&ta, &a, lo, hi, err, sizeof err) ||
            teach_load(&tb, &b, lo, hi, err, sizeof err)) {
            EXPECT(0, "teach_load: %s", err);
        } else {
            EXPECT(ta.n == tb.n, "variant %d: the replay has %d and %d steps", variant, ta.n, tb.n);
            for (int r = 0; r < a.world; r++) { // per rank, the same steps in the same order
                int i = 0, j = 0, same = 0, steps = 0;
                for (;; i++, j++, steps++) {
                    while (i < ta.n && ta.ev[i].rank != r)
                        i++;
                    while (j < tb.n && tb.ev[j].rank != r)
                        j++;
                    if (i >= ta.n || j >= tb.n) {
                        same += i >= ta.n && j >= tb.n;
                        break;
                    }
                    const TeachEvent *x = &ta.ev[i], *y = &tb.ev[j];
                    if (x->kind != y->kind || x->a != y->a || x->b != y->b || x->c != y->c ||
                        x->iter != y->iter || x->flags != y->flags)
                        break;
                }
                EXPECT(same, "variant %d rank %d: the replays differ at step %d (%s and %s)",
                       variant, r, steps, i < ta.n ? probe_kind_name(ta.ev[i].kind) : "end",
                       j < tb.n ? probe_kind_name(tb.ev[j].kind) : "end");
            }
            teach_free(&ta);
            teach_free(&tb);
        }
        model_free(&a);
        model_free(&b);
    }
}

static void test_bad_input(void) {
    char err[512] = "";
    Model m;
    SynthSpec s = synth_default();
    EXPECT(synth_trace(path_in("missing"), &s, NULL, err, sizeof err) == 0, "%s", err);
    unlink(path_in("missing/rank1.db"));
    EXPECT(model_load(&m, path_in("missing"), err, sizeof err) == 0, "one rank is enough: %s", err);
    EXPECT(m.world == 2 && m.ranks[0].present && !m.ranks[1].present &&
               strstr(m.ranks[1].load_error, "rank1.db") &&
               strstr(m.ranks[1].load_error, "No such file"),
           "rank 1 absent with a reason: '%s'", m.world == 2 ? m.ranks[1].load_error : "");
    model_free(&m);

    EXPECT(synth_trace(path_in("corrupt"), &s, NULL, err, sizeof err) == 0, "%s", err);
    FILE *f = fopen(path_in("corrupt/rank1.db"), "w");
    fputs("this is not a database, just text that happens to be here\n", f);
    fclose(f);
    EXPECT(model_load(&m, path_in("corrupt"), err, sizeof err) == 0, "%s", err);
    EXPECT(m.world == 2 && !m.ranks[1].present && strstr(m.ranks[1].load_error, "rank1.db"),
           "corrupt rank 1: '%s'", m.world == 2 ? m.ranks[1].load_error : "");
    model_free(&m);
    EXPECT(truncate(path_in("corrupt/rank0.db"), 3000) == 0, "truncate");
    EXPECT(model_load(&m, path_in("corrupt"), err, sizeof err) == -1 && strstr(err, "rank0.db") &&
               (strstr(err, "corrupt") || strstr(err, "not a readable")) && !strchr(err, '\n'),
           "nothing usable: one line, got '%s'", err);

    s.world = 1;
    s.user_version = 99;
    EXPECT(synth_trace(path_in("newer"), &s, NULL, err, sizeof err) == 0, "%s", err);
    EXPECT(model_load(&m, path_in("newer"), err, sizeof err) == -1, "a newer schema is refused");
    char want[600];
    snprintf(want, sizeof want,
             "trace %s/rank0.db has schema version 99, this ddpdbg reads up to %d",
             path_in("newer"), PROBE_SCHEMA_VERSION);
    EXPECT(!strcmp(err, want), "got '%s', expected '%s'", err, want);

    mkdir(path_in("empty"), 0755);
    EXPECT(model_load(&m, path_in("empty"), err, sizeof err) == -1 &&
               strstr(err, "holds no rank<R>.db files"),
           "empty: '%s'", err);
    EXPECT(model_load(&m, path_in("nowhere"), err, sizeof err) == -1 && strstr(err, "No such file"),
           "missing dir: '%s'", err);
    EXPECT(model_load(&m, path_in("newer/rank0.db"), err, sizeof err) == -1 &&
               strstr(err, "not a directory"),
           "a file: '%s'", err);
}

// Appends n_iters more iterations to rank r of dir through the probe's writer, as a live run.
static void append_iterations(const char *db_path, int64_t first_iter, int n_iters, uint64_t *seq) {
    char err[256];
    TraceDb *db = tracedb_open(db_path, err, sizeof err);
    EXPECT(db != NULL, "%s", err);
    if (!db) return;
    tracedb_begin(db);
    int64_t t = 2000000000000000000;
    for (int64_t it = first_iter; it < first_iter + n_iters; it++) {
        int kinds[] = {PROBE_FORWARD_BEGIN, PROBE_FORWARD_END, PROBE_BACKWARD_BEGIN};
        for (int k = 0; k < 3; k++) {
            ProbeRecord r = {.seq = ++*seq, .t_ns = t++, .iter = it, .kind = (uint16_t)kinds[k]};
            tracedb_insert(db, &r, NULL, 0);
        }
    }
    tracedb_commit(db);
    tracedb_close(db, true);
}

static void test_refresh_and_readonly(void) {
    char err[512] = "";
    SynthSpec s = synth_default();
    EXPECT(synth_trace(path_in("live"), &s, NULL, err, sizeof err) == 0, "%s", err);
    char *before, *after;
    size_t n_before, n_after;
    EXPECT(file_bytes(path_in("live/rank0.db"), &before, &n_before), "read rank0.db");
    Model m;
    EXPECT(model_load(&m, path_in("live"), err, sizeof err) == 0, "%s", err);
    int64_t events = m.ranks[0].n_events;
    uint64_t last = (uint64_t)m.ranks[0].last_seq;
    EXPECT(model_refresh(&m, err, sizeof err) == 0 && m.ranks[0].n_events == events,
           "a refresh with nothing new reads nothing");
    EXPECT(file_bytes(path_in("live/rank0.db"), &after, &n_after) && n_after == n_before &&
               !memcmp(before, after, n_before),
           "loading and refreshing left the trace untouched");
    struct stat sb;
    EXPECT(stat(path_in("live/rank0.db-wal"), &sb) < 0 &&
               stat(path_in("live/rank0.db-journal"), &sb) < 0,
           "no journal or WAL file created by the reader");
    free(before);
    free(after);
    model_free(&m);

    EXPECT(model_load(&m, path_in("live"), err, sizeof err) == 0, "%s", err);
    append_iterations(path_in("live/rank0.db"), 3, 2, &last);
    EXPECT(model_refresh(&m, err, sizeof err) == 0, "%s", err);
    EXPECT(m.ranks[0].n_events == events + 6 && m.ranks[0].n_iters == 5 && m.max_iter == 4 &&
               model_iter(&m, 0, 4)->t_backward_ns && !model_iter(&m, 0, 4)->t_backward_end_ns,
           "refresh read the 6 new events: %lld events, %d iterations",
           (long long)m.ranks[0].n_events, m.ranks[0].n_iters);
    EXPECT(m.ranks[0].iters[0].n_grad_ready == 16, "what was loaded stays");
    model_free(&m);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/test_tracemodel.XXXXXX");
    REQUIRE(mkdtemp(tmp), "mkdtemp %s: %s", tmp, strerror(errno));
    test_examples();
    test_every_example();
    test_synthetic();
    test_version1();
    test_bad_input();
    test_refresh_and_readonly();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return expect_report();
}
