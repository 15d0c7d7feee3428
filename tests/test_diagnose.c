/* test_diagnose.c -- tui/diagnosis/diagnose.c: each example trace (traces/examples/) and each synthetic
 * failure (tests/trace_synth.h) gives the right finding first, naming the ranks, iteration,
 * bucket, collective and parameters, with the cause from the recorded context and its fixes;
 * consequences point at their cause; a healthy trace gives nothing. And the grouping of
 * parameter names on rtdetr-l's 43 box-head tensors gives exactly the three lines of the
 * field report. */
#include "tui/diagnosis/diagnose.h"

#include <sqlite3.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tui/diagnosis/rootcause.h"

#include "tests/expect.h"
#include "tests/trace_synth.h"

static char tmp[256];

// Loads dir and diagnoses it; NULL (with a failed check) when it does not load.
static Finding *run(const char *dir, Model *m, int *n) {
    char err[512];
    *n = 0;
    if (model_load(m, dir, err, sizeof err) < 0) {
        EXPECT(0, "%s: %s", dir, err);
        return NULL;
    }
    Finding *f;
    *n = diagnose(m, &f);
    return f;
}

static Finding *run_synth(const char *name, const SynthSpec *s, Model *m, int *n) {
    char dir[512], err[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    if (synth_trace(dir, s, NULL, err, sizeof err) < 0) {
        EXPECT(0, "%s: %s", name, err);
        *n = 0;
        return NULL;
    }
    return run(dir, m, n);
}

static bool has(const char *text, const char *part) {
    return text && strstr(text, part);
}

static int find_kind(const Finding *f, int n, FindingKind kind) {
    for (int i = 0; i < n; i++)
        if (f[i].kind == kind) return i;
    return -1;
}

static void done(Model *m, Finding *f, int n) {
    findings_free(f, n);
    model_free(m);
}

static void test_examples(void) {
    Model m;
    int n;
    Finding *f = run("traces/examples/healthy", &m, &n);
    EXPECT(f == NULL && n == 0, "healthy: %d findings, first '%s'", n, n ? f[0].title : "");
    done(&m, f, n);

    f = run("traces/examples/field_report", &m, &n);
    EXPECT(n >= 2 && f[0].kind == FINDING_UNUSED_SOME_RANKS, "field report: first finding %s",
           n ? finding_kind_name(f[0].kind) : "none");
    if (n >= 2 && f[0].kind == FINDING_UNUSED_SOME_RANKS) {
        EXPECT(f[0].severity == SEVERITY_ERROR && f[0].n_ranks == 1 && f[0].ranks[0] == 0 &&
                   f[0].iter == 1 && f[0].bucket == 0 && f[0].n_params == 25,
               "rank 0, iteration 1, bucket 0, 25 parameters: got %d ranks, iter %lld, bucket %d, "
               "%d params",
               f[0].n_ranks, (long long)f[0].iter, f[0].bucket, f[0].n_params);
        EXPECT(!strcmp(f[0].title, "rank 0 never marked 25 parameters ready at iteration 1; rank 1 "
                                   "did (unused on some ranks)"),
               "title '%s'", f[0].title);
        EXPECT(has(f[0].explanation, "rank 0's batch at iteration 1 had 0 ground-truth boxes, so "
                                     "the box losses were constants"),
               "the cause from the batch: %s", f[0].explanation);
        EXPECT(has(f[0].explanation, "bucket 0") &&
                   has(f[0].explanation, "never launched its allreduce"),
               "the bucket");
        EXPECT(has(f[0].fixes, "find_unused_parameters=True") &&
                   has(f[0].fixes, "0 * pred_bboxes.sum()") &&
                   has(f[0].fixes, "allreduce a has-boxes flag") &&
                   has(f[0].fixes, "static_graph=True is not a fix here") &&
                   has(f[0].fixes, "Cost:"),
               "fixes with costs: %s", f[0].fixes);
        int e = find_kind(f, n, FINDING_ERROR);
        EXPECT(e > 0 && f[e].cause == 0 && f[e].ranks[0] == 0 && f[e].iter == 2 &&
                   has(f[e].explanation, "Expected to have finished reduction"),
               "rank 0's error follows from finding 1");
    }
    done(&m, f, n);

    f = run("traces/examples/skip_backward", &m, &n);
    EXPECT(n >= 3 && f[0].kind == FINDING_SKIPPED_BACKWARD && f[0].ranks[0] == 1 && f[0].iter == 1,
           "hang: first finding %s", n ? f[0].title : "none");
    int mm = find_kind(f, n, FINDING_COLLECTIVE_MISMATCH), h = find_kind(f, n, FINDING_HANG);
    EXPECT(mm > 0 && f[mm].seq == f[0].seq && f[mm].seq > 0 && f[mm].cause == 0,
           "the first divergence is the skipped bucket allreduce");
    EXPECT(h > 0 && f[h].cause == 0 && has(f[h].explanation, "hang: rank"),
           "the watchdog's record, following from 1");
    EXPECT(n && has(f[0].fixes, "allreduce a has-valid-data flag (MIN)"), "skip together");
    done(&m, f, n);

    f = run("traces/examples/find_unused", &m, &n);
    EXPECT(n == 1 && f[0].kind == FINDING_UNUSED_HANDLED && f[0].severity == SEVERITY_INFO &&
               f[0].n_params == 25 && f[0].iter == 1 &&
               findings_max_severity(f, n) == SEVERITY_INFO,
           "find_unused: one note, got %d (%s)", n, n ? f[0].title : "");
    EXPECT(n && has(f[0].explanation, "0 ground-truth boxes") &&
               has(f[0].explanation, "would have hung"),
           "why it mattered");
    done(&m, f, n);

    // bucket_cap: rank 1's caps differ and the settings check is off (PyTorch's behaviour): a
    // real trace of different layouts, the root cause of the divergence at the first bucket
    f = run("traces/examples/bucket_cap", &m, &n);
    EXPECT(n >= 2 && f[0].kind == FINDING_LAYOUT_MISMATCH && f[0].bucket == 0 && f[0].iter == 0,
           "bucket_cap: first finding %s", n ? f[0].title : "none");
    EXPECT(n && has(f[0].explanation, "rank 0 has 2 buckets and rank 1 has 5"),
           "the two layouts: %s", n ? f[0].explanation : "");
    for (int i = 1; i < n; i++)
        if (f[i].kind == FINDING_COLLECTIVE_MISMATCH)
            EXPECT(f[i].cause == 0, "the divergence follows from the layouts");
    done(&m, f, n);

    // shape: DDP's construction check, named as the model mismatch with both shapes
    f = run("traces/examples/shape", &m, &n);
    EXPECT(n >= 2 && f[0].kind == FINDING_MODEL_MISMATCH && f[0].n_params == 1 &&
               f[0].params[0] == 282,
           "shape: first finding %s", n ? f[0].title : "none");
    EXPECT(n && !strcmp(f[0].title, "the ranks built different models: params[282] "
                                    "(model.27.denoising_class_embed.weight) has sizes [4, 64] on "
                                    "rank 1, [3, 64] on rank 0"),
           "title '%s'", n ? f[0].title : "");
    int err = -1;
    for (int i = 0; i < n && err < 0; i++)
        if (f[i].kind == FINDING_ERROR && has(f[i].explanation, "appears not to match")) err = i;
    EXPECT(err > 0 && f[err].cause == 0, "rank 1's error follows from the model mismatch");
    done(&m, f, n);
}

static void test_synthetic(void) {
    Model m;
    int n;
    SynthSpec s = synth_default();
    Finding *f = run_synth("healthy", &s, &m, &n);
    EXPECT(n == 0, "healthy synthetic: %d findings (%s)", n, n ? f[0].title : "");
    done(&m, f, n);

    s = synth_default();
    s.unused_rank = 0, s.unused_iter = 1, s.unused_first = 12, s.unused_count = 4, s.empty_rank = 0;
    f = run_synth("unused_some", &s, &m, &n);
    EXPECT(n && f[0].kind == FINDING_UNUSED_SOME_RANKS && f[0].n_params == 4 &&
               f[0].params[0] == 12 && f[0].bucket == 0 && f[0].seq > 0,
           "unused on rank 0: %s", n ? f[0].title : "none");
    EXPECT(n && has(f[0].explanation, "0 ground-truth boxes") &&
               has(f[0].explanation, "waited in it for rank 0"),
           "%s", n ? f[0].explanation : "");
    done(&m, f, n);

    s = synth_default();
    s.unused_rank = 0, s.unused_iter = 1, s.unused_first = 12, s.unused_count = 4; // boxes present
    f = run_synth("unused_nobox", &s, &m, &n);
    EXPECT(n && f[0].kind == FINDING_UNUSED_SOME_RANKS &&
               has(f[0].explanation, "Nothing recorded on rank 0 explains why") &&
               !has(f[0].fixes, "has-boxes flag"),
           "no box story without the batch's evidence");
    done(&m, f, n);

    s = synth_default();
    s.unused_rank = -2, s.unused_iter = 1, s.unused_first = 12, s.unused_count = 4;
    f = run_synth("unused_all", &s, &m, &n);
    EXPECT(n && f[0].kind == FINDING_UNUSED_ALL_RANKS && f[0].n_ranks == 2 && f[0].n_params == 4 &&
               has(f[0].explanation, "nobody waits"),
           "unused on all ranks: %s", n ? f[0].title : "none");
    EXPECT(find_kind(f, n, FINDING_HANG) < 0 && find_kind(f, n, FINDING_DEAD_RANK) < 0,
           "no hang, nobody dead");
    done(&m, f, n);

    s = synth_default();
    s.find_unused = true;
    f = run_synth("find_unused_idle", &s, &m, &n);
    EXPECT(n == 1 && f[0].kind == FINDING_FIND_UNUSED_IDLE &&
               findings_max_severity(f, n) == SEVERITY_INFO,
           "find_unused with nothing unused: %s", n ? f[0].title : "none");
    done(&m, f, n);

    s = synth_default();
    s.skip_rank = 1, s.skip_iter = 1;
    f = run_synth("skip", &s, &m, &n);
    EXPECT(n && f[0].kind == FINDING_SKIPPED_BACKWARD && f[0].ranks[0] == 1 && f[0].iter == 1 &&
               has(f[0].explanation, "one step behind"),
           "skipped backward: %s", n ? f[0].title : "none");
    done(&m, f, n);

    s = synth_default();
    s.n_iters = 4, s.short_rank = 1, s.short_by = 1;
    f = run_synth("uneven", &s, &m, &n);
    EXPECT(n && f[0].kind == FINDING_UNEVEN_BATCHES && f[0].ranks[0] == 1 &&
               !strcmp(f[0].title, "rank 1 ran 3 batches, rank 0 ran 4: uneven inputs"),
           "uneven: %s", n ? f[0].title : "none");
    EXPECT(n && has(f[0].fixes, "ddp.join()"), "join");
    done(&m, f, n);

    s = synth_default();
    s.dead_rank = 1, s.dead_iter = 1;
    f = run_synth("dead", &s, &m, &n);
    EXPECT(n && f[0].kind == FINDING_DEAD_RANK && f[0].ranks[0] == 1 && f[0].iter == 1 &&
               f[0].seq > 0 && has(f[0].explanation, "rank 0 was left waiting"),
           "dead: %s", n ? f[0].title : "none");
    EXPECT(find_kind(f, n, FINDING_DEAD_RANK) == 0 && n == 1, "only rank 1 is blamed (%d findings)",
           n);
    done(&m, f, n);

    s = synth_default();
    s.layout_rank = 1;
    f = run_synth("layout", &s, &m, &n);
    int l = find_kind(f, n, FINDING_LAYOUT_MISMATCH);
    EXPECT(l == 0 && f[0].bucket == 0 && has(f[0].explanation, "bucket_cap_mb=1"), "layouts: %s",
           n ? f[0].title : "none");
    EXPECT(find_kind(f, n, FINDING_COLLECTIVE_MISMATCH) > 0, "and the collectives differ");
    done(&m, f, n);

    s = synth_default();
    s.n_iters = 4, s.slow_rank = 1, s.slow_ns = 400000000;
    f = run_synth("slow", &s, &m, &n);
    EXPECT(n == 1 && f[0].kind == FINDING_STRAGGLER && f[0].ranks[0] == 1 &&
               f[0].severity == SEVERITY_WARNING,
           "straggler: %s", n ? f[0].title : "none");
    done(&m, f, n);

    s = synth_default();
    s.n_iters = 4, s.slow_rank = 1, s.slow_ns = 20000000; // 20 ms: not worth a finding
    f = run_synth("slightly_slow", &s, &m, &n);
    EXPECT(n == 0, "a 20 ms lag is no straggler: %s", n ? f[0].title : "");
    done(&m, f, n);

    s = synth_default();
    s.overruns = 7;
    f = run_synth("overruns", &s, &m, &n);
    EXPECT(n == 1 && f[0].kind == FINDING_TRACE_INCOMPLETE && has(f[0].title, "dropped 7 events"),
           "overruns: %s", n ? f[0].title : "none");
    done(&m, f, n);

    s = synth_default();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/missing", tmp);
    char err[256];
    EXPECT(synth_trace(dir, &s, NULL, err, sizeof err) == 0, "%s", err);
    snprintf(dir, sizeof dir, "%s/missing/rank1.db", tmp);
    unlink(dir);
    snprintf(dir, sizeof dir, "%s/missing", tmp);
    f = run(dir, &m, &n);
    EXPECT(n == 1 && f[0].kind == FINDING_TRACE_INCOMPLETE && f[0].ranks[0] == 1 &&
               f[0].severity == SEVERITY_WARNING,
           "a missing rank file: %s", n ? f[0].title : "none");
    done(&m, f, n);
}

static void test_grouping(void) {
    FILE *fp = fopen("tests/golden/params/rtdetr-l.params.txt", "r");
    if (!fp) {
        EXPECT(0, "tests/golden/params/rtdetr-l.params.txt: run from the repository root");
        return;
    }
    char line[512], name[400], *names[64];
    int n = 0, idx;
    while (fgets(line, sizeof line, fp) && n < 64)
        if (sscanf(line, "%d %399s", &idx, name) == 2 &&
            (idx == 510 || (idx >= 521 && idx <= 526) || idx >= 539))
            names[n++] = strdup(name);
    fclose(fp);
    EXPECT(n == 43, "rtdetr-l's field-report set is 43 tensors, read %d", n);
    char **lines;
    int k = group_param_names((const char *const *)names, n, &lines);
    const char *want[] = {"model.28.dec_bbox_head.{0..5}.layers.{0..2}.{weight,bias}  36 tensors",
                          "model.28.enc_bbox_head.layers.{0..2}.{weight,bias}  6 tensors",
                          "model.28.denoising_class_embed.weight  1 tensor"};
    EXPECT(k == 3, "3 lines, got %d", k);
    for (int i = 0; i < 3 && i < k; i++)
        EXPECT(!strcmp(lines[i], want[i]), "line %d: '%s', expected '%s'", i, lines[i], want[i]);
    group_lines_free(lines, k);
    for (int i = 0; i < n; i++)
        free(names[i]);

    const char *mixed[] = {"a.0.w", "a.1.w", "a.1.b", "a.2.w", "a.3.w", "b.x.q",
                           "b.y.q", "c.5.w", "c.7.w", "c.8.w", "c.9.w"};
    const char *want_mixed[] = {"c.{5,7..9}.w  4 tensors", "a.{0,2,3}.w  3 tensors",
                                "a.1.{w,b}  2 tensors", "b.x.q  1 tensor", "b.y.q  1 tensor"};
    k = group_param_names(mixed, 11, &lines);
    EXPECT(k == 5, "5 lines, got %d", k);
    for (int i = 0; i < 5 && i < k; i++)
        EXPECT(!strcmp(lines[i], want_mixed[i]), "line %d: '%s', expected '%s'", i, lines[i],
               want_mixed[i]);
    group_lines_free(lines, k);
    EXPECT(group_param_names(mixed, 0, &lines) == 0 && lines == NULL, "no names, no lines");
}

// Appends an ERROR record to rank r's database of dir, after its last event.
static void add_error(const char *dir, int r, int64_t iter, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/rank%d.db", dir, r);
    sqlite3 *db;
    EXPECT(sqlite3_open(path, &db) == SQLITE_OK, "open %s", path);
    char *sql = sqlite3_mprintf(
        "INSERT INTO events(seq, t_ns, iter, kind, a, b, c, d, flags, text) SELECT max(seq) + 1, "
        "max(t_ns) + 1000, %lld, 16, 0, 0, 0, 0, 0, %Q FROM events",
        (long long)iter, text);
    EXPECT(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "insert: %s", sqlite3_errmsg(db));
    sqlite3_free(sql);
    sqlite3_close(db);
}

// A peer's "Connection closed by peer" after the rank with the real error exited: it follows
// from that error, which follows from the root cause; the root cause comes first and the short
// form names it, whatever the ranks' order.
static void test_peer_closed(void) {
    SynthSpec s = synth_default();
    s.unused_rank = 1, s.unused_iter = 1, s.unused_first = 12, s.unused_count = 4, s.empty_rank = 1;
    char dir[512], err[512];
    snprintf(dir, sizeof dir, "%s/peer_closed", tmp);
    EXPECT(synth_trace(dir, &s, NULL, err, sizeof err) == 0, "%s", err);
    add_error(dir, 0, 1,
              "rank 0 collective #9 failed: [../gloo/transport/tcp/pair.cc:598] Connection "
              "closed by peer [127.0.0.1]:29500");
    Model m;
    int n;
    Finding *f = run(dir, &m, &n);
    int closed = -1, reducer = -1;
    for (int i = 0; i < n; i++) {
        if (f[i].kind == FINDING_ERROR && has(f[i].explanation, "Connection closed by peer"))
            closed = i;
        if (f[i].kind == FINDING_ERROR && has(f[i].explanation, "Expected to have finished"))
            reducer = i;
    }
    EXPECT(n >= 3 && f[0].kind == FINDING_UNUSED_SOME_RANKS && rootcause_find(f, n) == 0,
           "the root cause first: %s", n ? f[0].title : "none");
    EXPECT(reducer > 0 && f[reducer].cause == 0, "rank 1's error follows from the root cause");
    EXPECT(closed > reducer && f[closed].cause == reducer,
           "rank 0's 'Connection closed by peer' follows from rank 1's error: [%d] cause %d",
           closed, closed >= 0 ? f[closed].cause : -9);
    EXPECT(closed >= 0 && has(f[closed].explanation, "This follows from rank 1's error") &&
               has(f[closed].explanation, "consequence, not a cause"),
           "and says so: %s", closed >= 0 ? f[closed].explanation : "");
    for (int i = 0; i < n; i++)
        EXPECT(f[i].cause < i, "[%d] follows from a finding listed before it (%d)", i, f[i].cause);
    char *text = rootcause_text(&m, f, n);
    EXPECT(text && has(text, "root cause [1]: rank 1 never marked 4 parameters ready") &&
               has(text, "never reported on rank 1 at iteration 1 (4 tensors):") &&
               has(text, "why: rank 1's batch at iteration 1 had 0 ground-truth boxes") &&
               has(text, "fix: find_unused_parameters=True") &&
               has(text, "follows from it: [2] rank 1 raised"),
           "short form: %s", text ? text : "(none)");
    free(text);
    done(&m, f, n);

    s = synth_default(); // healthy: no root cause, no short form
    snprintf(dir, sizeof dir, "%s/peer_healthy", tmp);
    EXPECT(synth_trace(dir, &s, NULL, err, sizeof err) == 0, "%s", err);
    f = run(dir, &m, &n);
    EXPECT(rootcause_find(f, n) < 0 && !rootcause_text(&m, f, n), "healthy: no root cause");
    done(&m, f, n);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/test_diagnose.XXXXXX");
    REQUIRE(mkdtemp(tmp), "mkdtemp %s: %s", tmp, strerror(errno));
    test_examples();
    test_synthetic();
    test_peer_closed();
    test_grouping();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return expect_report();
}
