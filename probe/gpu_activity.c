/* gpu_activity.c -- GPU records into the trace: ties by stream order, the per-step bound
 * (gpu_activity.h). */
#include "probe/gpu_activity.h"

#include "kernels/base.h" // xcalloc, xrealloc, LOG_WARN

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum {
    STEPS_KEPT = 64, // steps whose counts are kept: records arrive at most a few steps late
    NAME_BYTES = 256,
};

// A stream that carries collectives: the sequence numbers queued on it whose NCCL kernel has
// not been recorded yet, oldest at head.
typedef struct CollStream {
    uint32_t stream;
    uint64_t *seqs;
    int head, n, cap;
} CollStream;

typedef struct StepCount {
    int64_t iter, t_ns;
    int written;
} StepCount;

struct GpuActivity {
    Probe *probe;
    int rows_per_step;
    pthread_mutex_t mu; // guards everything below
    CollStream *streams;
    int n_streams;
    StepCount steps[STEPS_KEPT]; // a ring: the newest at (n_steps - 1) % STEPS_KEPT
    int64_t n_steps;
    int before_steps; // records written before the first step
    GpuActivityStats stats;
};

GpuActivity *gpu_activity_new(Probe *p, int rows_per_step) {
    GpuActivity *g = xcalloc(1, sizeof *g);
    g->probe = p;
    g->rows_per_step = rows_per_step;
    pthread_mutex_init(&g->mu, NULL);
    return g;
}

void gpu_activity_free(GpuActivity *g) {
    if (!g) return;
    for (int i = 0; i < g->n_streams; i++) free(g->streams[i].seqs);
    free(g->streams);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int gpu_activity_rows_per_step_from_env(void) {
    const char *v = getenv("DDPDBG_GPU_ROWS_PER_STEP");
    if (!v || !*v) return GPU_ROWS_PER_STEP_DEFAULT;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > 1 << 30) {
        LOG_WARN("probe: DDPDBG_GPU_ROWS_PER_STEP=%s: expected a count >= 0; using %d", v,
                 GPU_ROWS_PER_STEP_DEFAULT);
        return GPU_ROWS_PER_STEP_DEFAULT;
    }
    return (int)n;
}

bool gpu_activity_is_nccl_kernel(const char *name) {
    return name && !strncmp(name, "nccl", 4);
}

static CollStream *coll_stream(GpuActivity *g, uint32_t stream, bool add) {
    for (int i = 0; i < g->n_streams; i++)
        if (g->streams[i].stream == stream) return &g->streams[i];
    if (!add) return NULL;
    g->streams = xrealloc(g->streams, sizeof *g->streams * (size_t)(g->n_streams + 1));
    CollStream *s = &g->streams[g->n_streams++];
    *s = (CollStream){.stream = stream};
    return s;
}

void gpu_activity_collective(GpuActivity *g, uint32_t stream, uint64_t seq) {
    pthread_mutex_lock(&g->mu);
    CollStream *s = coll_stream(g, stream, true);
    if (s->head > 0 && s->head == s->n) s->head = s->n = 0; // drained: start over
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->seqs = xrealloc(s->seqs, sizeof *s->seqs * (size_t)s->cap);
    }
    s->seqs[s->n++] = seq;
    pthread_mutex_unlock(&g->mu);
}

void gpu_activity_step(GpuActivity *g, int64_t iter, int64_t t_ns) {
    pthread_mutex_lock(&g->mu);
    g->steps[g->n_steps % STEPS_KEPT] = (StepCount){.iter = iter, .t_ns = t_ns};
    g->n_steps++;
    pthread_mutex_unlock(&g->mu);
}

// The count a record starting at t_ns is charged to: its step's (the newest step at or before
// t_ns; the oldest kept when it is older than all of them; the newest for no time), or the
// count of records before the first step.
static int *step_count(GpuActivity *g, int64_t t_ns) {
    if (g->n_steps == 0) return &g->before_steps;
    int64_t kept = g->n_steps < STEPS_KEPT ? g->n_steps : STEPS_KEPT;
    StepCount *oldest = NULL;
    for (int64_t k = g->n_steps - 1; k >= g->n_steps - kept; k--) {
        StepCount *s = &g->steps[k % STEPS_KEPT];
        if (!t_ns || s->t_ns <= t_ns) return &s->written;
        oldest = s;
    }
    if (g->n_steps <= STEPS_KEPT) return &g->before_steps; // before the first step
    return &oldest->written;
}

static void write_row(GpuActivity *g, const GpuRecord *r) {
    char text[24];
    switch (r->kind) {
    case GPU_RECORD_KERNEL: {
        const char *name = r->name ? r->name : "?";
        size_t len = strlen(name);
        probe_emit_text(g->probe, PROBE_GPU_KERNEL, 0, r->correlation, r->device,
                        (int32_t)r->stream, r->start_ns, r->end_ns, name,
                        len < NAME_BYTES ? len : NAME_BYTES);
        break;
    }
    case GPU_RECORD_MEMCPY:
    case GPU_RECORD_MEMSET: {
        int n = snprintf(text, sizeof text, "%llu", (unsigned long long)r->bytes);
        bool copy = r->kind == GPU_RECORD_MEMCPY;
        probe_emit_text(g->probe, copy ? PROBE_GPU_MEMCPY : PROBE_GPU_MEMSET, 0, r->correlation,
                        copy ? r->copy_kind : r->device, (int32_t)r->stream, r->start_ns,
                        r->end_ns, text, (size_t)n);
        break;
    }
    }
    g->stats.rows++;
}

void gpu_activity_record(GpuActivity *g, const GpuRecord *r) {
    pthread_mutex_lock(&g->mu);
    CollStream *s = coll_stream(g, r->stream, false);
    if (s) { // a collective's stream: always written
        if (r->kind == GPU_RECORD_KERNEL && gpu_activity_is_nccl_kernel(r->name)) {
            if (s->head < s->n) {
                uint64_t seq = s->seqs[s->head++];
                probe_emit(g->probe, PROBE_GPU_CORRELATION, r->correlation,
                           (int32_t)r->correlation, 1, (int64_t)seq, 0, NULL);
                g->stats.tied++;
            } else {
                g->stats.nccl_untied++;
            }
        }
        write_row(g, r);
    } else if (r->kind == GPU_RECORD_KERNEL && gpu_activity_is_nccl_kernel(r->name)) {
        // NCCL work on a stream no collective of ours was queued on: NCCL's own stream, if it
        // moved the launch there. With one stream of collectives, its order still holds.
        CollStream *only = g->n_streams == 1 ? &g->streams[0] : NULL;
        if (only && only->head < only->n) {
            uint64_t seq = only->seqs[only->head++];
            probe_emit(g->probe, PROBE_GPU_CORRELATION, r->correlation, (int32_t)r->correlation,
                       1, (int64_t)seq, 0, NULL);
            g->stats.tied++;
        } else {
            g->stats.nccl_untied++;
        }
        write_row(g, r);
    } else {
        int *written = step_count(g, r->start_ns);
        if (g->rows_per_step == 0 || *written < g->rows_per_step) {
            (*written)++;
            write_row(g, r);
        } else {
            g->stats.filtered++;
        }
    }
    pthread_mutex_unlock(&g->mu);
}

GpuActivityStats gpu_activity_stats(GpuActivity *g) {
    pthread_mutex_lock(&g->mu);
    GpuActivityStats s = g->stats;
    pthread_mutex_unlock(&g->mu);
    return s;
}
