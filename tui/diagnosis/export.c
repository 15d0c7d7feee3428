/* export.c -- Chrome trace JSON (export.h). */
#include "tui/diagnosis/export.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/base.h" // xcalloc, xrealloc, MAX
#include "probe/probe.h"  // PROBE_GPU_*
#include "tui/diagnosis/report.h"   // json_string

typedef struct Out {
    FILE *f;
    int64_t t0; // ns of ts 0
    bool first; // no event written yet (commas)
} Out;

static void ts(Out *o, const char *key, int64_t ns) {
    int64_t d = ns - o->t0; // ns: microseconds with three decimals
    fprintf(o->f, "\"%s\":%s%lld.%03lld", key, d < 0 ? "-" : "", (long long)(llabs(d) / 1000),
            (long long)(llabs(d) % 1000));
}

static void begin(Out *o) {
    fputs(o->first ? "\n" : ",\n", o->f);
    o->first = false;
}

static void meta(Out *o, int pid, int tid, const char *what, const char *name) {
    begin(o);
    fprintf(o->f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"name\":", pid,
            tid, what);
    json_string(o->f, name);
    fputs("}}", o->f);
}

// A complete event; args is a JSON object body without braces ("" for none).
static void span(Out *o, int pid, int tid, const char *cat, const char *name, int64_t t,
                 int64_t t_end, const char *args) {
    begin(o);
    fprintf(o->f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"cat\":\"%s\",\"name\":", pid, tid, cat);
    json_string(o->f, name);
    fputc(',', o->f);
    ts(o, "ts", t);
    fprintf(o->f, ",\"dur\":%lld.%03lld,\"args\":{%s}}", (long long)(MAX(t_end - t, 0) / 1000),
            (long long)(MAX(t_end - t, 0) % 1000), args);
}

static void instant(Out *o, int pid, int tid, bool process, const char *name, int64_t t,
                    const char *text) {
    begin(o);
    fprintf(o->f, "{\"ph\":\"i\",\"s\":\"%s\",\"pid\":%d,\"tid\":%d,\"name\":", process ? "p" : "t",
            pid, tid);
    json_string(o->f, name);
    fputc(',', o->f);
    ts(o, "ts", t);
    fputs(",\"args\":{", o->f);
    if (text) {
        fputs("\"text\":", o->f);
        json_string(o->f, text);
    }
    fputs("}}", o->f);
}

static void rank_steps(Out *o, const ModelRank *r) {
    int pid = r->rank;
    int64_t end = MAX(r->last_event_ns, r->last_heartbeat_ns);
    for (int i = 0; i < r->n_iters; i++) {
        const ModelIter *it = &r->iters[i];
        char args[96];
        snprintf(args, sizeof args, "\"iteration\":%lld", (long long)it->iter);
        char open_args[128];
        snprintf(open_args, sizeof open_args, "%s,\"unfinished\":true", args);
        if (it->t_forward_ns) {
            int64_t t_end = it->t_forward_end_ns ? it->t_forward_end_ns
                            : it->t_backward_ns  ? it->t_backward_ns
                                                 : end;
            span(o, pid, 1, "step", "forward", it->t_forward_ns, t_end,
                 it->t_forward_end_ns ? args : open_args);
        }
        if (it->t_backward_ns) {
            int64_t t_end = it->t_backward_end_ns ? it->t_backward_end_ns : end;
            span(o, pid, 1, "step", "backward", it->t_backward_ns, t_end,
                 it->t_backward_end_ns ? args : open_args);
        }
        if (it->t_optim_ns) {
            int64_t t_end = i + 1 < r->n_iters && r->iters[i + 1].t_first_ns
                                ? r->iters[i + 1].t_first_ns
                                : MAX(it->t_last_ns, end);
            span(o, pid, 1, "step", "optimiser step", it->t_optim_ns, t_end, args);
        }
        const ModelLayout *l = it->layout >= 0 ? &r->layouts[it->layout] : NULL;
        for (int b = 0; l && b < l->n_buckets; b++)
            if (it->bucket_ready_ns[b]) {
                char name[48];
                snprintf(name, sizeof name, "bucket %d ready", b);
                instant(o, pid, 1, false, name, it->bucket_ready_ns[b], NULL);
            }
    }
}

// Collectives on tracks 10, 11, ...: each goes to the first track free at its launch; track[i]
// (r->n_colls entries) receives collective i's track, where its GPU work nests (rank_gpu).
static void rank_collectives(Out *o, const ModelRank *r, int *track) {
    int pid = r->rank, n_tracks = 0;
    int64_t *track_end = NULL;
    int64_t end = MAX(r->last_event_ns, r->last_heartbeat_ns);
    for (int i = 0; i < r->n_colls; i++) {
        const ModelCollective *c = &r->colls[i];
        int64_t t_end = c->t_done_ns ? c->t_done_ns : MAX(end, c->t_launch_ns);
        int k = 0;
        while (k < n_tracks && track_end[k] > c->t_launch_ns)
            k++;
        if (k == n_tracks) {
            track_end = xrealloc(track_end, sizeof(int64_t) * (size_t)++n_tracks);
            char name[32];
            snprintf(name, sizeof name, k ? "collectives (%d)" : "collectives", k + 1);
            meta(o, pid, 10 + k, "thread_name", name);
        }
        track_end[k] = t_end;
        track[i] = 10 + k;
        char name[64], what[sizeof c->what], args[256];
        if (c->bucket >= 0)
            snprintf(name, sizeof name, "%s bucket %d", model_op_name(c->op), c->bucket);
        else
            snprintf(name, sizeof name, "%s %s", model_op_name(c->op), c->what);
        size_t n = 0; // what is a short identifier of the trainer's; keep it a plain JSON string
        for (const char *p = c->what; *p && n + 1 < sizeof what; p++)
            what[n++] = *p == '"' || *p == '\\' || (unsigned char)*p < 0x20 ? '_' : *p;
        what[n] = '\0';
        snprintf(args, sizeof args,
                 "\"seq\":%lld,\"bucket\":%d,\"numel\":%lld,\"iteration\":%lld,\"what\":\"%s\","
                 "\"completed\":%s,\"ok\":%s",
                 (long long)c->seq, c->bucket, (long long)c->numel, (long long)c->iter, what,
                 c->t_done_ns ? "true" : "false", c->ok ? "true" : "false");
        span(o, pid, 10 + k, "collective", name, c->t_launch_ns, t_end, args);
    }
    free(track_end);
}

// The track of the collective g ran for when g lies inside its span (so that it nests under
// it, as Chrome and Perfetto draw slices of one track), else -1.
static int collective_track(const ModelRank *r, const ModelGpu *g, const int *track) {
    const ModelCollective *c = g->coll_seq > 0 ? model_rank_coll(r, g->coll_seq) : NULL;
    if (!c || !g->t_end_ns || !c->t_done_ns) return -1;
    bool inside = g->t_start_ns >= c->t_launch_ns && g->t_end_ns <= c->t_done_ns;
    return inside ? track[c - r->colls] : -1;
}

// GPU records on one track per stream, those of a collective under it (collective_track).
static void rank_gpu(Out *o, const ModelRank *r, const int *track) {
    int pid = r->rank;
    int *streams = NULL, n_streams = 0;
    for (int i = 0; i < r->n_gpu; i++) {
        const ModelGpu *g = &r->gpu[i];
        if (!g->t_start_ns) continue;
        int tid = collective_track(r, g, track);
        bool seen = false;
        for (int k = 0; k < n_streams && !seen; k++)
            seen = streams[k] == g->stream;
        if (!seen) {
            streams = xrealloc(streams, sizeof(int) * (size_t)++n_streams);
            streams[n_streams - 1] = g->stream;
            char name[48];
            snprintf(name, sizeof name, "GPU stream %d", g->stream);
            meta(o, pid, 100 + g->stream, "thread_name", name);
        }
        char name[96], args[128];
        const char *what = g->kind == PROBE_GPU_KERNEL
                               ? (g->name >= 0 ? r->gpu_names[g->name] : "kernel")
                           : g->kind == PROBE_GPU_MEMCPY ? "memcpy"
                                                         : "memset";
        snprintf(name, sizeof name, "%.95s", what);
        snprintf(args, sizeof args,
                 "\"correlation\":%lld,\"device\":%d,\"bytes\":%lld,\"collective\":%lld",
                 (long long)g->correlation, g->device, (long long)g->bytes, (long long)g->coll_seq);
        span(o, pid, tid >= 0 ? tid : 100 + g->stream, "gpu", name, g->t_start_ns,
             g->t_end_ns ? g->t_end_ns : g->t_start_ns, args);
    }
    free(streams);
}

int export_chrome(const Model *m, FILE *out) {
    Out o = {.f = out, .t0 = m->t0_ns, .first = true};
    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"ddpdbg export\",\"trace\":",
          out);
    json_string(out, m->dir);
    fprintf(out, ",\"t0_ns\":%lld,\"clock\":\"CLOCK_REALTIME\"},\"traceEvents\":[",
            (long long)m->t0_ns);
    for (int r = 0; r < m->world; r++) {
        const ModelRank *mr = &m->ranks[r];
        if (!mr->present) continue;
        char name[96];
        snprintf(name, sizeof name, "rank %d%s%s", r, mr->host[0] ? " on " : "", mr->host);
        meta(&o, r, 0, "process_name", name);
        begin(&o);
        fprintf(out,
                "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\",\"args\":{"
                "\"sort_index\":%d}}",
                r, r);
        meta(&o, r, 1, "thread_name", "steps");
        rank_steps(&o, mr);
        int *track = xcalloc((size_t)mr->n_colls + 1, sizeof *track);
        rank_collectives(&o, mr, track);
        rank_gpu(&o, mr, track);
        free(track);
        if (mr->error) {
            int64_t t = mr->last_event_ns;
            instant(&o, r, 1, true, "error", t, mr->error);
        }
        if (mr->hang)
            instant(&o, r, 1, true, "hang", MAX(mr->last_heartbeat_ns, mr->last_event_ns),
                    mr->hang);
        // a rank that died without an error: where its record ends, and how it ended
        if (mr->state == RANK_DEAD && !mr->error) {
            char how[160];
            snprintf(how, sizeof how, "stopped without an error%s%s", mr->exit[0] ? ": " : "",
                     mr->exit);
            instant(&o, r, 1, true, "dead", mr->last_event_ns, how);
        }
    }
    fputs("\n]}\n", out);
    return ferror(out) ? -1 : 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ddpdbg export DIR --chrome FILE\n"
               "writes the trace directory DIR as Chrome trace JSON to FILE ('-': stdout), for\n"
               "ui.perfetto.dev or chrome://tracing: one process per rank, one clock\n");
}

int export_command(int argc, char **argv) {
    const char *dir = NULL, *file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--chrome")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ddpdbg export: --chrome needs a file name\n");
                return 2;
            }
            file = argv[++i];
        } else if (!strncmp(argv[i], "--chrome=", 9)) {
            file = argv[i] + 9;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "ddpdbg export: unknown option '%s' (expected --chrome FILE)\n",
                    argv[i]);
            return 2;
        } else if (dir) {
            fprintf(stderr, "ddpdbg export: one trace directory expected, got '%s' and '%s'\n", dir,
                    argv[i]);
            return 2;
        } else
            dir = argv[i];
    }
    if (!dir || !file || !*file) {
        fprintf(stderr, "ddpdbg export: expected a trace directory and --chrome FILE (usage: "
                        "ddpdbg export DIR --chrome FILE)\n");
        return 2;
    }
    Model m;
    char err[512];
    if (model_load(&m, dir, err, sizeof err) < 0) {
        fprintf(stderr, "ddpdbg export: %s\n", err);
        return 2;
    }
    bool to_stdout = !strcmp(file, "-");
    FILE *out = to_stdout ? stdout : fopen(file, "w");
    if (!out) {
        fprintf(stderr, "ddpdbg export: cannot write %s: %s\n", file, strerror(errno));
        model_free(&m);
        return 2;
    }
    int rc = export_chrome(&m, out);
    if (!to_stdout && fclose(out) != 0) rc = -1;
    if (rc < 0) fprintf(stderr, "ddpdbg export: writing %s failed: %s\n", file, strerror(errno));
    model_free(&m);
    return rc < 0 ? 2 : 0;
}
