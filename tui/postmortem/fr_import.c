/* fr_import.c -- `ddpdbg import-fr` (fr_import.h): find the dumps, read them, pick the process
 * group, work out who waits for whom, write one trace per rank. */
#include "tui/postmortem/fr_import.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/base.h" // xcalloc, xrealloc, xstrdup, mkdir_p, MAX
#include "probe/probe.h"  // probe_db_write, ProbeRecord, PROBE_*
#include "tui/postmortem/flightrec.h"
#include "tui/postmortem/readall.h"

#define MAX_DUMP_BYTES ((size_t)1 << 30)
#define MAX_RANKS 65536

// One rank's dump and what the import makes of it.
typedef struct RankDump {
    int rank; // from the file name
    char path[4200];
    FrDump d;
    FrEntry **colls; // the chosen group's collectives, by seq (one per seq)
    int n_colls;
    int n_other_group, n_p2p;              // entries left out
    int64_t last_enqueued, last_completed; // -1: none
    const FrEntry *pending;                // the first collective not completed, or NULL
} RankDump;

typedef struct Import {
    const char *dir, *prefix, *pg;
    char stem[256]; // the dumps' file names without the rank
    char out[4096];
    RankDump *ranks; // ascending rank
    int n;
    int world;
    char group[64], group_desc[64]; // the group imported
} Import;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ddpdbg import-fr: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

// ---- finding the dumps ---------------------------------------------------------------------

// The length of name without its trailing digits (name itself when it has none).
static size_t stem_len(const char *name) {
    size_t n = strlen(name);
    while (n > 0 && name[n - 1] >= '0' && name[n - 1] <= '9')
        n--;
    return n;
}

static int cmp_rank(const void *a, const void *b) {
    return ((const RankDump *)a)->rank - ((const RankDump *)b)->rank;
}

// DIR's files named <prefix><rank>: with --prefix those, else those of the one stem there is.
static int find_dumps(Import *im) {
    DIR *d = opendir(im->dir);
    if (!d)
        return usage_error("%s: %s (expected the folder holding the dumps)", im->dir,
                           strerror(errno));
    char stem[256] = "";
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) && !rc;) {
        size_t n = stem_len(e->d_name);
        if (e->d_name[0] == '.' || n == strlen(e->d_name) || strlen(e->d_name) - n > 5) continue;
        if (im->prefix ? strlen(im->prefix) != n || strncmp(e->d_name, im->prefix, n) : false)
            continue;
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", im->dir, e->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (!im->prefix && stem[0] && (strlen(stem) != n || strncmp(stem, e->d_name, n)))
            rc = usage_error("%s holds files of two names, %s<rank> and %.*s<rank>: choose with "
                             "--prefix",
                             im->dir, stem, (int)n, e->d_name);
        snprintf(stem, sizeof stem, "%.*s", (int)n, e->d_name);
        int rank = atoi(e->d_name + n);
        if (rank >= MAX_RANKS) continue;
        im->ranks = xrealloc(im->ranks, sizeof(RankDump) * (size_t)(im->n + 1));
        RankDump *r = &im->ranks[im->n++];
        *r = (RankDump){.rank = rank, .last_enqueued = -1, .last_completed = -1};
        snprintf(r->path, sizeof r->path, "%s", path);
    }
    closedir(d);
    if (rc) return rc;
    snprintf(im->stem, sizeof im->stem, "%s", stem);
    if (!im->n)
        return usage_error(
            "%s holds no Flight Recorder dumps (files named <prefix><rank>, as "
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE makes them: nccl_trace_rank_0, ...)%s%s",
            im->dir, im->prefix ? " with prefix " : "", im->prefix ? im->prefix : "");
    qsort(im->ranks, (size_t)im->n, sizeof(RankDump), cmp_rank);
    for (int i = 1; i < im->n; i++)
        if (im->ranks[i].rank == im->ranks[i - 1].rank)
            return usage_error("%s and %s are both rank %d's dump", im->ranks[i - 1].path,
                               im->ranks[i].path, im->ranks[i].rank);
    return 0;
}

static int read_dumps(Import *im) {
    for (int i = 0; i < im->n; i++) {
        RankDump *r = &im->ranks[i];
        uint8_t *data;
        size_t len;
        char err[512];
        if (read_all(r->path, MAX_DUMP_BYTES, &data, &len, err, sizeof err) < 0)
            return usage_error("%s", err);
        int rc = fr_dump_read(data, len, &r->d, err, sizeof err);
        free(data);
        if (rc < 0) return usage_error("%s: %s", r->path, err);
    }
    return 0;
}

// ---- the group, the collectives, the world ---------------------------------------------------

static bool in_group(const Import *im, const FrEntry *e) {
    return !strcmp(e->pg_name, im->group) || (!e->pg_name[0] && !strcmp(im->group, "0"));
}

static int cmp_entry(const void *a, const void *b) {
    const FrEntry *x = *(FrEntry *const *)a, *y = *(FrEntry *const *)b;
    if (x->collective_seq_id != y->collective_seq_id)
        return x->collective_seq_id < y->collective_seq_id ? -1 : 1;
    return (x->record_id > y->record_id) - (x->record_id < y->record_id);
}

static int choose_group(Import *im) {
    const char *want = im->pg ? im->pg : "default_pg";
    for (int i = 0; i < im->n && !im->group[0]; i++) {
        const FrGroup *g = fr_group(&im->ranks[i].d, want);
        if (g) {
            snprintf(im->group, sizeof im->group, "%s", g->name);
            snprintf(im->group_desc, sizeof im->group_desc, "%s", g->desc);
        }
        for (int k = 0; k < im->ranks[i].d.n_entries && !im->group[0]; k++) {
            const FrEntry *e = &im->ranks[i].d.entries[k];
            if (!strcmp(e->pg_name, want) || !strcmp(e->pg_desc, want) || (!im->pg && !e->is_p2p)) {
                snprintf(im->group, sizeof im->group, "%s", e->pg_name[0] ? e->pg_name : "0");
                snprintf(im->group_desc, sizeof im->group_desc, "%s", e->pg_desc);
            }
        }
    }
    if (!im->group[0] && im->pg)
        return usage_error("no dump in %s has a process group named %s", im->dir, im->pg);
    if (!im->group[0]) snprintf(im->group, sizeof im->group, "0"); // no collectives at all
    return 0;
}

// Each rank's collectives of the group, by seq (entries of one coalesced launch, which share a
// seq, become one: their elements summed), and where each rank stands.
static void collect(Import *im) {
    int world = 0;
    for (int i = 0; i < im->n; i++) {
        RankDump *r = &im->ranks[i];
        r->colls = xcalloc((size_t)r->d.n_entries + 1, sizeof(FrEntry *));
        for (int k = 0; k < r->d.n_entries; k++) {
            FrEntry *e = &r->d.entries[k];
            if (!in_group(im, e))
                r->n_other_group++;
            else if (e->is_p2p)
                r->n_p2p++;
            else
                r->colls[r->n_colls++] = e;
        }
        qsort(r->colls, (size_t)r->n_colls, sizeof(FrEntry *), cmp_entry);
        int kept = 0;
        for (int k = 0; k < r->n_colls; k++) {
            FrEntry *e = r->colls[k];
            if (kept && r->colls[kept - 1]->collective_seq_id == e->collective_seq_id) {
                FrEntry *into = r->colls[kept - 1];
                into->numel_in = e->numel_in > INT64_MAX - into->numel_in
                                     ? INT64_MAX
                                     : into->numel_in + e->numel_in;
                if (strcmp(e->state, "completed"))
                    snprintf(into->state, sizeof into->state, "%s", e->state);
                continue;
            }
            r->colls[kept++] = e;
        }
        r->n_colls = kept;
        for (int k = 0; k < r->n_colls; k++) {
            const FrEntry *e = r->colls[k];
            r->last_enqueued = MAX(r->last_enqueued, e->collective_seq_id);
            if (!strcmp(e->state, "completed"))
                r->last_completed = MAX(r->last_completed, e->collective_seq_id);
            else if (!r->pending)
                r->pending = e;
        }
        const FrGroup *g = fr_group(&r->d, im->group);
        if (g) { // pg_status counts what the ring may have dropped
            r->last_enqueued = MAX(r->last_enqueued, g->last_enqueued);
            r->last_completed = MAX(r->last_completed, g->last_completed);
            for (int k = 0; k < g->n_ranks; k++)
                world = MAX(world, g->ranks[k] + 1);
        }
        world = MAX(world, r->rank + 1);
    }
    im->world = MIN(world, MAX_RANKS);
}

// ---- who waits for whom --------------------------------------------------------------------

static int op_code(const char *op) {
    static const struct {
        const char *name;
        int op;
    } ops[] = {{"all_reduce", PROBE_OP_ALLREDUCE},
               {"allreduce", PROBE_OP_ALLREDUCE},
               {"all_reduce_coalesced", PROBE_OP_ALLREDUCE},
               {"allreduce_coalesced", PROBE_OP_ALLREDUCE},
               {"broadcast", PROBE_OP_BROADCAST},
               {"_broadcast_oop", PROBE_OP_BROADCAST},
               {"all_gather", PROBE_OP_ALLGATHER},
               {"allgather", PROBE_OP_ALLGATHER},
               {"_allgather_base", PROBE_OP_ALLGATHER},
               {"all_gather_into_tensor_coalesced", PROBE_OP_ALLGATHER},
               {"allgather_into_tensor_coalesced", PROBE_OP_ALLGATHER},
               {"barrier", PROBE_OP_BARRIER}};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
        if (!strcmp(op, ops[k].name)) return ops[k].op;
    return 0;
}

// The trace's word for what a collective carried (ModelCollective.what: up to 23 bytes):
// "Float [300]" for the ops ddpdbg knows, the op's own name for the others.
static void what_text(const FrEntry *e, char out[24]) {
    char full[128];
    if (op_code(e->op))
        snprintf(full, sizeof full, "%s %s", e->dtype[0] ? e->dtype : "?", e->shape);
    else
        snprintf(full, sizeof full, "%s", e->op);
    snprintf(out, 24, "%.23s", full);
}

// "allreduce of Float [300], 300 elements", as the report says a collective.
static void coll_words(const FrEntry *e, char *out, size_t len) {
    static const char *names[] = {NULL, "allreduce", "broadcast", "allgather", "barrier"};
    int op = op_code(e->op);
    char what[24];
    what_text(e, what);
    if (op)
        snprintf(out, len, "%s of %s, %lld %s", names[op], what, (long long)e->numel_in,
                 e->numel_in == 1 ? "element" : "elements");
    else
        snprintf(out, len, "%s, %lld elements", e->op, (long long)e->numel_in);
}

static const RankDump *dump_of(const Import *im, int rank) {
    for (int i = 0; i < im->n; i++)
        if (im->ranks[i].rank == rank) return &im->ranks[i];
    return NULL;
}

// The HANG record's text (NULL when no rank waits): the rank that waits in the oldest
// collective (into *stuck_rank), then a line per rank, then who waits for whom (as watchdog.c
// words its own).
static char *hang_summary(const Import *im, int *stuck_rank) {
    const RankDump *stuck = NULL;
    for (int i = 0; i < im->n; i++) {
        const RankDump *r = &im->ranks[i];
        if (r->pending &&
            (!stuck || r->pending->collective_seq_id < stuck->pending->collective_seq_id))
            stuck = r;
    }
    if (!stuck) return NULL;
    *stuck_rank = stuck->rank;
    int64_t s = stuck->pending->collective_seq_id;
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    char words[160], absent[512] = "";
    size_t at = 0;
    int n_absent = 0;
    for (int rank = 0; rank < im->world; rank++) {
        const RankDump *r = dump_of(im, rank);
        if (r && r->last_enqueued >= s) continue;
        at += (size_t)snprintf(absent + at, at < sizeof absent ? sizeof absent - at : 0, "%s%d",
                               n_absent ? ", " : "", rank);
        n_absent++;
    }
    coll_words(stuck->pending, words, sizeof words);
    fprintf(f, "Flight Recorder: rank %d waits in collective #%lld (%s), ", stuck->rank,
            (long long)s, words);
    const RankDump *other = NULL; // a rank whose #s is another collective
    for (int i = 0; i < im->n && !other; i++) {
        const FrEntry *e = im->ranks[i].pending;
        if (e && e->collective_seq_id == s &&
            (strcmp(e->op, stuck->pending->op) || e->numel_in != stuck->pending->numel_in))
            other = &im->ranks[i];
    }
    if (n_absent) {
        fprintf(f, "which %s %s never joined\n", n_absent == 1 ? "rank" : "ranks", absent);
    } else if (other) {
        coll_words(other->pending, words, sizeof words);
        fprintf(f, "while rank %d's #%lld is another collective (%s)\n", other->rank, (long long)s,
                words);
    } else {
        fprintf(f, "which every rank joined and none completed\n");
    }
    for (int rank = 0; rank < im->world; rank++) {
        const RankDump *r = dump_of(im, rank);
        if (!r) {
            fprintf(f, "  rank %d: no dump (%s/%s%d is missing)\n", rank, im->dir, im->stem, rank);
            continue;
        }
        fprintf(f, "  rank %d: ", rank);
        if (r->pending) {
            coll_words(r->pending, words, sizeof words);
            fprintf(f, "waiting in collective #%lld (%s)%s%s; ",
                    (long long)r->pending->collective_seq_id, words,
                    r->pending->site[0] ? ", called from " : "", r->pending->site);
        }
        fprintf(f, "enqueued up to #%lld, completed up to #%lld", (long long)r->last_enqueued,
                (long long)r->last_completed);
        if (r->pending && r->pending->retired)
            fprintf(f, "; its watchdog timed #%lld out after %lld ms",
                    (long long)r->pending->collective_seq_id, (long long)r->pending->timeout_ms);
        fprintf(f, "%s\n", r->pending ? "" : ": in no collective");
    }
    for (int i = 0; i < im->n; i++) {
        const RankDump *w = &im->ranks[i];
        if (!w->pending) continue;
        int64_t ws = w->pending->collective_seq_id;
        for (int rank = 0; rank < im->world; rank++) {
            const RankDump *o = dump_of(im, rank);
            if (o == w || (o && o->last_enqueued >= ws)) continue;
            if (o)
                fprintf(f,
                        "  rank %d waits for rank %d: rank %d waits in #%lld, rank %d has launched "
                        "only up to #%lld\n",
                        w->rank, rank, w->rank, (long long)ws, rank, (long long)o->last_enqueued);
            else
                fprintf(
                    f,
                    "  rank %d waits for rank %d: rank %d waits in #%lld, rank %d left no dump\n",
                    w->rank, rank, w->rank, (long long)ws, rank);
        }
    }
    fclose(f);
    return text;
}

// ---- writing the traces --------------------------------------------------------------------

typedef struct Records {
    ProbeRecord *recs;
    char **texts;
    size_t n, cap;
} Records;

static void add(Records *rs, int64_t t, ProbeKind kind, uint16_t flags, int32_t a, int32_t b,
                int64_t c, int64_t d, const char *text) {
    if (rs->n == rs->cap) {
        rs->cap = rs->cap ? 2 * rs->cap : 64;
        rs->recs = xrealloc(rs->recs, sizeof(ProbeRecord) * rs->cap);
        rs->texts = xrealloc(rs->texts, sizeof(char *) * rs->cap);
    }
    rs->recs[rs->n] = (ProbeRecord){.seq = rs->n + 1,
                                    .t_ns = t,
                                    .iter = -1,
                                    .kind = (uint16_t)kind,
                                    .flags = flags,
                                    .a = a,
                                    .b = b,
                                    .c = c,
                                    .d = d};
    rs->texts[rs->n++] = text ? xstrdup(text) : NULL;
}

static void meta(Records *rs, int64_t t, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void meta(Records *rs, int64_t t, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *value = xvasprintf(fmt, ap);
    va_end(ap);
    char *text;
    if (asprintf(&text, "%s=%s", key, value) < 0) DIE(1, "out of memory");
    add(rs, t, PROBE_META, 0, 0, 0, 0, 0, text);
    free(text);
    free(value);
}

static int write_rank(const Import *im, const RankDump *r, const char *hang, int stuck_rank) {
    Records rs = {0};
    int64_t t0 = r->n_colls ? r->colls[0]->time_created_ns : 0;
    meta(&rs, t0, "rank", "%d", r->rank);
    meta(&rs, t0, "world", "%d", im->world);
    meta(&rs, t0, "source", "flight_recorder");
    meta(&rs, t0, "args", "flight_recorder=%s version=%s process_group=%s:%s", r->path,
         r->d.version, im->group, im->group_desc);
    int64_t t_last = t0;
    for (int k = 0; k < r->n_colls; k++) {
        const FrEntry *e = r->colls[k];
        char what[24];
        what_text(e, what);
        add(&rs, e->time_created_ns, PROBE_COLL_LAUNCH, 0, op_code(e->op), -1, e->collective_seq_id,
            e->numel_in, what);
        t_last = MAX(t_last, e->time_created_ns);
        if (strcmp(e->state, "completed")) continue;
        int64_t t = e->time_completed_ns  ? e->time_completed_ns
                    : e->duration_ms >= 0 ? e->time_created_ns + (int64_t)(e->duration_ms * 1e6)
                                          : e->time_created_ns;
        add(&rs, t, PROBE_COLL_DONE, PROBE_FLAG_OK, op_code(e->op), -1, e->collective_seq_id,
            e->numel_in, what);
        t_last = MAX(t_last, t);
    }
    if (hang) add(&rs, t_last, PROBE_HANG, 0, stuck_rank, 0, 0, 0, hang);
    char path[4200], err[512];
    snprintf(path, sizeof path, "%s/rank%d.db", im->out, r->rank);
    int rc = probe_db_write(path, rs.recs, (const char *const *)rs.texts, rs.n, err, sizeof err);
    for (size_t i = 0; i < rs.n; i++)
        free(rs.texts[i]);
    free(rs.recs);
    free(rs.texts);
    if (rc < 0) return usage_error("%s", err);
    return 0;
}

// ---- the command ---------------------------------------------------------------------------

static void usage(FILE *f) {
    fprintf(f, "usage: ddpdbg import-fr DIR [--out OUT] [--prefix P] [--pg NAME]\n"
               "reads PyTorch's NCCL Flight Recorder dumps in DIR (one per rank, named\n"
               "TORCH_NCCL_DEBUG_INFO_TEMP_FILE's prefix and the rank: nccl_trace_rank_0, ...)\n"
               "into ddpdbg traces in OUT (default DIR/ddpdbg-trace), one process group's\n"
               "collectives (the default group, or --pg NAME or description), for\n"
               "`ddpdbg report OUT`, `tui OUT` and `export OUT`. Nothing in a dump is executed.\n"
               "exit status: 0 imported, 2 bad usage or an unreadable dump\n");
}

static void free_import(Import *im) {
    for (int i = 0; i < im->n; i++) {
        fr_dump_free(&im->ranks[i].d);
        free(im->ranks[i].colls);
    }
    free(im->ranks);
}

static int run(Import *im) {
    int rc;
    if ((rc = find_dumps(im)) || (rc = read_dumps(im)) || (rc = choose_group(im))) return rc;
    collect(im);
    char failed[4096];
    int e = mkdir_p(im->out, failed, sizeof failed);
    if (e) return usage_error("--out %s: cannot create %s: %s", im->out, failed, strerror(e));
    int stuck_rank = -1;
    char *hang = hang_summary(im, &stuck_rank);
    for (int i = 0; i < im->n && !rc; i++)
        rc = write_rank(im, &im->ranks[i], hang, stuck_rank);
    for (int rank = 0; rank < im->world && !rc; rank++) { // a rank without a dump has no trace
        char path[4200];
        snprintf(path, sizeof path, "%s/rank%d.db", im->out, rank);
        if (!dump_of(im, rank)) unlink(path);
    }
    if (!rc) {
        printf("import-fr: %d of %d ranks' dumps (version %s), process group %s (%s) -> %s\n",
               im->n, im->world, im->ranks[0].d.version, im->group,
               im->group_desc[0] ? im->group_desc : "no description", im->out);
        for (int i = 0; i < im->n; i++) {
            const RankDump *r = &im->ranks[i];
            printf("  rank %d: %d %s, #%lld..#%lld", r->rank, r->n_colls,
                   r->n_colls == 1 ? "collective" : "collectives",
                   r->n_colls ? (long long)r->colls[0]->collective_seq_id : 0LL,
                   r->n_colls ? (long long)r->colls[r->n_colls - 1]->collective_seq_id : 0LL);
            if (r->n_other_group)
                printf("; %d %s of other process groups left out (--pg)", r->n_other_group,
                       r->n_other_group == 1 ? "entry" : "entries");
            if (r->n_p2p)
                printf("; %d point-to-point %s left out", r->n_p2p,
                       r->n_p2p == 1 ? "entry" : "entries");
            printf("\n");
        }
        if (hang) printf("%s", hang);
        printf("next: ddpdbg report %s\n", im->out);
    }
    free(hang);
    return rc;
}

int import_fr_command(int argc, char **argv) {
    Import im = {0};
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char **opt = !strcmp(argv[i], "--out")      ? &out
                           : !strcmp(argv[i], "--prefix") ? &im.prefix
                           : !strcmp(argv[i], "--pg")     ? &im.pg
                                                          : NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (opt) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value (see ddpdbg import-fr --help)", argv[i]);
            *opt = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return usage_error("unknown option '%s' (expected --out, --prefix or --pg; see "
                               "ddpdbg import-fr --help)",
                               argv[i]);
        } else if (im.dir) {
            return usage_error("one folder of dumps expected, got '%s' and '%s'", im.dir, argv[i]);
        } else {
            im.dir = argv[i];
        }
    }
    if (!im.dir)
        return usage_error(
            "expected the folder holding the dumps (usage: ddpdbg import-fr DIR [--out OUT])");
    snprintf(im.out, sizeof im.out, "%s", out ? out : "");
    if (!out) snprintf(im.out, sizeof im.out, "%s/ddpdbg-trace", im.dir);
    int rc = run(&im);
    free_import(&im);
    return rc;
}
