/* rootcause.c -- the short form of the diagnosis (rootcause.h): the root cause's title, the
 * parameters never reported per rank (grouped as the Parameters view groups them), why, the
 * bucket that never launched, the collective the other ranks wait in, the top fix and what
 * follows from it. Read from the findings and, for the per-rank facts, from the Model. */
#include "tui/diagnosis/rootcause.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"                 // xcalloc, MAX
#include "tui/diagnosis/diagnose_rules.h" // Str, ranks_text, coll_text, expected_bits

int rootcause_find(const Finding *f, int n) {
    for (int i = 0; i < n; i++)
        if (f[i].severity == SEVERITY_ERROR && f[i].cause < 0) return i;
    return -1;
}

static bool has_rank(const Finding *f, int rank) {
    for (int k = 0; k < f->n_ranks; k++)
        if (f->ranks[k] == rank) return true;
    return false;
}

// Appends the grouped names of params[0..n) as "      <pattern>  N tensors" lines.
static void add_groups(Str *out, const Model *m, const int *params, int n) {
    if (!m->param_names) return;
    const char **names = xcalloc((size_t)MAX(n, 1), sizeof(char *));
    for (int i = 0; i < n; i++)
        names[i] = params[i] < m->n_params ? m->param_names[params[i]] : "?";
    char **lines;
    int n_lines = group_param_names(names, n, &lines);
    for (int i = 0; i < n_lines; i++)
        str_addf(out, "      %s\n", lines[i]);
    group_lines_free(lines, n_lines);
    free(names);
}

// The parameters rank r expected and never marked ready at iteration iter, into params (room
// for m->n_params); returns how many.
static int missing_on(const Model *m, int r, int64_t iter, int *params) {
    const ModelIter *it = m->ranks[r].present ? model_iter(m, r, iter) : NULL;
    if (!it) return 0;
    uint8_t *want = expected_bits(m, &m->ranks[r], it);
    int n = 0;
    for (int p = 0; p < m->n_params; p++)
        if (model_bit(want, p) && !model_bit(it->marked, p)) params[n++] = p;
    free(want);
    return n;
}

// Per rank of the finding, the parameters it never reported; ranks with the same set share
// one heading.
static void add_unreported(Str *out, const Model *m, const Finding *f) {
    int np = MAX(m->n_params, 1);
    int *sets = xcalloc((size_t)f->n_ranks * (size_t)np, sizeof(int));
    int *counts = xcalloc((size_t)MAX(f->n_ranks, 1), sizeof(int));
    bool *done = xcalloc((size_t)MAX(f->n_ranks, 1), sizeof(bool));
    for (int k = 0; k < f->n_ranks; k++)
        counts[k] = missing_on(m, f->ranks[k], f->iter, sets + (size_t)k * np);
    for (int k = 0; k < f->n_ranks; k++) {
        if (done[k] || !counts[k]) continue;
        int *same = xcalloc((size_t)f->n_ranks, sizeof(int)), n_same = 0;
        for (int j = k; j < f->n_ranks; j++)
            if (!done[j] && counts[j] == counts[k] &&
                !memcmp(sets + (size_t)j * np, sets + (size_t)k * np,
                        sizeof(int) * (size_t)counts[k]))
                done[j] = true, same[n_same++] = f->ranks[j];
        char who[256];
        ranks_text(who, sizeof who, same, n_same);
        str_addf(out, "    never reported on %s at iteration %lld (%d %s):\n", who,
                 (long long)f->iter, counts[k], plural(counts[k], "tensor", "tensors"));
        add_groups(out, m, sets + (size_t)k * np, counts[k]);
        free(same);
    }
    free(sets);
    free(counts);
    free(done);
}

// "why: rank 0's batch at iteration 1 had 0 ground-truth boxes (rank 1's had 3)" when every
// rank of the finding had images and no box, the others boxes.
static void add_batch_cause(Str *out, const Model *m, const Finding *f) {
    for (int k = 0; k < f->n_ranks; k++) {
        const ModelIter *it = model_iter(m, f->ranks[k], f->iter);
        if (!it || !it->n_images || it->n_boxes) return;
    }
    char who[256];
    ranks_text(who, sizeof who, f->ranks, f->n_ranks);
    str_addf(out, "    why: %s's %s at iteration %lld had 0 ground-truth boxes", who,
             f->n_ranks == 1 ? "batch" : "batches", (long long)f->iter);
    int n_other = 0;
    for (int r = 0; r < m->world; r++) {
        const ModelIter *it = has_rank(f, r) ? NULL : model_iter(m, r, f->iter);
        if (!it || !it->n_images) continue;
        str_addf(out, "%srank %d's had %d", n_other++ ? ", " : " (", r, it->n_boxes);
    }
    str_addf(out, "%s\n", n_other ? ")" : "");
}

// "bucket 0 never launched on rank 0: 91 of its 116 parameters were ready"
static void add_bucket(Str *out, const Model *m, const Finding *f) {
    if (f->bucket < 0 || f->iter < 0) return;
    for (int k = 0; k < f->n_ranks; k++) {
        const ModelRank *mr = &m->ranks[f->ranks[k]];
        const ModelIter *it = mr->present ? model_rank_iter(mr, f->iter) : NULL;
        const ModelLayout *l = it ? model_rank_layout(mr, it) : NULL;
        if (!l || f->bucket >= l->n_buckets || it->bucket_seq[f->bucket]) continue;
        int size = l->start[f->bucket + 1] - l->start[f->bucket];
        str_addf(out, "    bucket %d never launched on rank %d: %d of its %d parameters were ready\n",
                 f->bucket, mr->rank, it->bucket_ready[f->bucket], size);
    }
}

// The other ranks' open collective: the finding's, else each one's first pending.
static void add_waits(Str *out, const Model *m, const Finding *f) {
    char who[256];
    ranks_text(who, sizeof who, f->ranks, f->n_ranks);
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present || has_rank(f, r)) continue;
        // a collective that failed (its peer went away) is where the rank waited, too
        const ModelCollective *c = f->seq ? model_rank_coll(mr, f->seq) : NULL;
        if (!c || (c->t_done_ns && c->ok))
            c = mr->pending_seq ? model_rank_coll(mr, mr->pending_seq) : NULL;
        if (!c || (c->t_done_ns && c->ok)) continue;
        char a[128];
        coll_text(a, sizeof a, c);
        bool issued_by_them = true; // did the finding's ranks issue it?
        for (int k = 0; k < f->n_ranks; k++) {
            const ModelRank *o = &m->ranks[f->ranks[k]];
            issued_by_them &= o->present && model_rank_coll(o, c->seq) != NULL;
        }
        bool waiting = mr->state == RANK_WAITING || mr->state == RANK_RUNNING;
        str_addf(out, "    rank %d %s in collective #%lld (%s)", r, waiting ? "waits" : "waited",
                 (long long)c->seq, a);
        if (!issued_by_them && f->n_ranks) str_addf(out, ", which %s never issued", who);
        str_addf(out, "%s\n", waiting                      ? ""
                              : c->t_done_ns              ? ", until it failed"
                              : mr->state == RANK_ERRORED ? ", until it raised"
                                                          : ", until it was stopped");
    }
}

char *rootcause_text(const Model *m, const Finding *f, int n) {
    int root = rootcause_find(f, n);
    if (root < 0) return NULL;
    const Finding *g = &f[root];
    Str out = {0};
    str_addf(&out, "root cause [%d]: %s\n", root + 1, g->title);
    bool unused = g->kind == FINDING_UNUSED_SOME_RANKS || g->kind == FINDING_UNUSED_ALL_RANKS;
    if (unused && g->iter >= 0 && m->param_names) {
        add_unreported(&out, m, g);
        add_batch_cause(&out, m, g);
    } else if (g->n_params && m->param_names) {
        str_addf(&out, "    parameters (%d):\n", g->n_params);
        add_groups(&out, m, g->params, g->n_params);
    }
    add_bucket(&out, m, g);
    add_waits(&out, m, g);
    if (g->fixes && *g->fixes) {
        size_t len = strcspn(g->fixes, "\n");
        str_addf(&out, "    fix: %.*s\n", (int)len, g->fixes);
    }
    for (int i = 0; i < n; i++)
        if (f[i].cause == root) str_addf(&out, "    follows from it: [%d] %s\n", i + 1, f[i].title);
    return str_take(&out);
}

void rootcause_print(FILE *out, const char *text, int width) {
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        int indent = (int)strspn(p, " ");
        if ((int)len <= width) { // fits: as it is (the groups' two spaces before the count)
            fprintf(out, "%.*s\n", (int)len, p);
            p += len + (p[len] == '\n');
            continue;
        }
        int col = 0;
        const char *q = p + indent, *end = p + len;
        while (q < end) { // words, wrapped: continuations 2 more than the line's indent
            size_t w = strcspn(q, " \n");
            if (q + w > end) w = (size_t)(end - q);
            if (col == 0)
                col = fprintf(out, "%*s", indent, "");
            else if (col + 1 + (int)w > width && col > indent + 2)
                col = fprintf(out, "\n%*s", indent + 2, "") - 1;
            else
                col += fprintf(out, " ");
            col += fprintf(out, "%.*s", (int)w, q);
            q += w;
            while (q < end && *q == ' ')
                q++;
        }
        fputc('\n', out);
        p = end + (*end == '\n');
    }
}

int report_print_root_cause(const char *dir, FILE *out) {
    Model m;
    char err[512];
    if (model_load(&m, dir, err, sizeof err) < 0) {
        fprintf(out, "ddpdbg: no diagnosis: %s\n", err);
        return -1;
    }
    Finding *f;
    int n = diagnose(&m, &f);
    char *text = rootcause_text(&m, f, n);
    if (text) {
        fprintf(out, "ddpdbg: the diagnosis of %s (all of it: ddpdbg report %s):\n", dir, dir);
        rootcause_print(out, text, 100);
    }
    int printed = text != NULL;
    free(text);
    findings_free(f, n);
    model_free(&m);
    return printed;
}
