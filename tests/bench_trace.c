/* bench_trace.c -- what the probe costs a real DDP training step. Two ranks (forked, Gloo over
 * loopback, 1 thread each, sharing the machine's 2 cores) run the trainer's step as run_batch
 * (trainer/train.c) runs it with tracing: trace_iteration, trace_phase at every phase boundary,
 * trace_batch, and trace_reducer_event as the reducer's observer, around forward + RT-DETR loss
 * (scaled by world) + backward + gradient clipping + AdamW + EMA. Two variants, the same code
 * in the same two processes:
 *   off   a TrainTrace whose probe is NULL: the trainer without trace=, every call a branch
 *   on    trace_open into a temporary directory (ring + SQLite writer thread, heartbeat every
 *         1000 ms), as trace=DIR does; the parameter table is recorded, and the writer has
 *         stored it, before the block's timed steps
 * Blocks of `timed` steps alternate in ABBA order (off on, on off, off on, ...): each rank
 * opens or closes its probe between blocks, then both meet at a barrier and run one untimed
 * step, so that every block starts warm. The overhead is computed per pair of adjacent blocks
 * (median step on / median step off - 1), so slow drifts of the machine's load cancel; its
 * median, standard error and range over the pairs say how far to trust it. A block lasts a few
 * seconds, several of the writer's commits (once a second): a shorter one would leave the
 * writer's work to the pause after it (the first commit of a block stores the parameter table
 * before its timed steps, the last one catches up after them) and the ON steps would not pay
 * for it. On this shared 2-core machine adjacent blocks still differ by up to 10 %, so the
 * comparison resolves about 1 %; what resolves less is measured directly: the writer thread's
 * CPU (its own clock) and an emit's cost (a scratch ring, here), which bound what the probe can
 * cost a step (BOUND: both ranks' writers, each delaying both ranks, plus the emits). For
 * rtdetr-tiny and rtdetr-l, 160 px, batch 1 per rank; about 6 minutes. Prints timings only, never
 * fails on them: exit 1 if a rank fails or the last ON block's trace misses events. */
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kernels/base.h"
#include "probe/ring.h" // ring_set_tail: a scratch ring for timing emits
#include "tests/ddp_harness.h"
#include "trainer/nn/loss.h"
#include "trainer/ops/ops.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/clip.h"
#include "trainer/optim/ema.h"
#include "trainer/trace.h"

#define WORLD 2
#define WARMUP 2     // untimed steps before the first block: they include the bucket rebuild
#define MAX_PAIRS 64 // ON/OFF pairs of blocks per model, at most
#define MAX_STEPS 48 // timed steps per block, at most
#define MAX_BLOCKS (2 * MAX_PAIRS)
#define MAX_BATCH 4   // images per rank
#define BOXES 3       // ground-truth boxes per image (every parameter gets a gradient)
#define MAX_NORM 10.0 // the trainer's gradient clipping
#define PG_TIMEOUT_MS 60000
#define STORE_WAIT_S 30 // how long a rank waits for its writer to catch up before giving up
#define BUSY_LOAD 3.0   // 1-minute load above which others' work swamps the step times
#define MAX_THREADS 64  // threads of a rank process, at most (Gloo's, OpenMP's, the writer)

static double seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void) {
    return seconds(CLOCK_MONOTONIC);
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Median of v[0..n) (sorts v); 0 for n == 0.
static double median(double *v, int n) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, by_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- what the ranks write back (shared memory, mapped before the fork) ----------------------
typedef struct Block {
    bool on;
    double step[WORLD][MAX_STEPS]; // seconds: trace_iteration .. after the optimiser phase
    // Over the timed steps: process CPU time (every thread: the training thread, Gloo's, the
    // probe's writer), the training thread's CPU time alone, and wall time.
    double cpu[WORLD], main_cpu[WORLD], wall[WORLD];
    // Probe on only, per rank over the timed steps:
    uint64_t records[WORLD];  // ring records claimed (TEXT parts and heartbeats included)
    uint64_t stored[WORLD];   // records the writer stored into SQLite meanwhile
    uint64_t overruns[WORLD]; // events dropped (ring full): should be 0
    double catch_up[WORLD];   // after the last timed step, until the writer had stored all
    double writer_cpu[WORLD]; // the writer thread's CPU time (-1: its thread was not found)
} Block;

typedef struct Study {
    const char *model;
    int imgsz, batch, pairs, timed;
    int limit_s;   // for the whole run of both ranks
    char dir[256]; // the trace directory of the ON blocks (each replaces the last's files)
    int n_params;  // rank 0's registry, for the trace check
    int64_t first_iter_of_last_on, n_iters_of_last_on; // the iterations the last ON block ran
    Block blocks[MAX_BLOCKS];
} Study;

// ABBA: pair 0 runs off then on, pair 1 on then off, and so on.
static bool block_is_on(int block) {
    int pair = block / 2, within = block % 2;
    return pair % 2 == 0 ? within == 1 : within == 0;
}

// ---- one rank ----------------------------------------------------------------------------------
// Everything a rank trains with: what run_batch reaches through its Run.
typedef struct Rank {
    int rank;
    Rtdetr model;
    Arena step_arena, inputs;
    Tape tape;
    Optimizer opt;
    Ema ema;
    Ddp ddp;
    TrainTrace trace;
    Tensor *images;
    int cls[MAX_BATCH * BOXES], counts[MAX_BATCH];
    float boxes[MAX_BATCH * BOXES * 4];
    int64_t indices[MAX_BATCH]; // the images' "dataset indices", for trace_batch
    Targets tg;
    clockid_t writer_clock; // the probe's writer thread's CPU clock while the probe is on
    bool writer_found;
} Rank;

// ---- the writer thread's CPU time ---------------------------------------------------------------
// The probe keeps its writer's pthread_t to itself, so the writer is found as the thread that
// trace_open added to the process (/proc/self/task), and its CPU clock is made from its kernel
// thread id as glibc's pthread_getcpuclockid makes it (Linux: CPUCLOCK_SCHED of a thread).
static int list_threads(pid_t *tids, int max) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < max;)
        if (e->d_name[0] != '.') tids[n++] = (pid_t)atoi(e->d_name);
    closedir(d);
    return n;
}

static clockid_t thread_cpu_clock(pid_t tid) {
    return (clockid_t)((~(unsigned)tid << 3) | 6); // CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD_MASK
}

// The one thread in after[0..n_after) that is not in before[0..n_before): true with its clock.
static bool new_thread_clock(const pid_t *before, int n_before, const pid_t *after, int n_after,
                             clockid_t *clock) {
    int found = 0;
    for (int i = 0; i < n_after; i++) {
        bool old = false;
        for (int j = 0; j < n_before && !old; j++)
            old = after[i] == before[j];
        if (!old && found++ == 0) *clock = thread_cpu_clock(after[i]);
    }
    struct timespec ts;
    return found == 1 && clock_gettime(*clock, &ts) == 0;
}

// Synthetic batch: uniform images (seeded by rank) and BOXES boxes per image.
static void inputs_init(Rank *k, int batch, int imgsz) {
    CHECK(batch <= MAX_BATCH, "batch %d: at most %d images per rank", batch, MAX_BATCH);
    arena_init(&k->inputs, DEV_CPU, 0);
    k->images = tensor_new(&k->inputs, 4, (int64_t[]){batch, 3, imgsz, imgsz});
    Rng r;
    rng_init(&r, 100 + (uint64_t)k->rank);
    for (int64_t i = 0; i < k->images->n; i++)
        k->images->data[i] = rng_uniform(&r);
    for (int j = 0; j < batch * BOXES; j++) {
        k->cls[j] = (int)rng_below(&r, (uint64_t)k->model.spec.nc);
        float *b = k->boxes + 4 * j;
        b[2] = rng_range(&r, 0.1f, 0.4f);
        b[3] = rng_range(&r, 0.1f, 0.4f);
        b[0] = rng_range(&r, b[2] / 2, 1 - b[2] / 2);
        b[1] = rng_range(&r, b[3] / 2, 1 - b[3] / 2);
    }
    for (int i = 0; i < batch; i++) {
        k->counts[i] = BOXES;
        k->indices[i] = (int64_t)(k->rank * batch + i);
    }
    k->tg = (Targets){.n_images = batch,
                      .n_boxes = batch * BOXES,
                      .cls = k->cls,
                      .bboxes = k->boxes,
                      .counts = k->counts};
}

// One training step in run_batch's order, with its trace calls; *took gets its seconds.
// Returns 0, or 1 with a line on stderr.
static int train_step(Rank *k, int64_t iter, int batch, double *took) {
    double t0 = now();
    TrainTrace *tr = &k->trace;
    trace_iteration(tr, iter);
    trace_phase(tr, 0, PROBE_PHASE_DATA);
    Tape *t = &k->tape;
    tape_reset(t);
    t->training = true;
    t->grad_enabled = true;
    trace_phase(tr, PROBE_FORWARD_BEGIN, PROBE_PHASE_FORWARD);
    if (ddp_pre_forward(&k->ddp)) {
        fprintf(stderr, "bench_trace: rank %d iteration %lld: %s\n", k->rank, (long long)iter,
                ddp_error(&k->ddp));
        return 1;
    }
    trace_batch(tr, batch, k->indices, k->counts);
    uint64_t seed = 1000 * (uint64_t)(k->rank + 1) + (uint64_t)iter;
    Tensor *loss = rtdetr_loss(&k->model, t, k->images, &k->tg, seed, NULL);
    ddp_post_forward(&k->ddp, &loss, 1);
    loss = op_scale(t, loss, (float)WORLD);
    trace_phase(tr, PROBE_FORWARD_END, PROBE_PHASE_FORWARD);
    trace_phase(tr, PROBE_BACKWARD_BEGIN, PROBE_PHASE_BACKWARD);
    if (tape_backward(t, loss, NULL)) {
        fprintf(stderr, "bench_trace: rank %d iteration %lld: backward: %s\n", k->rank,
                (long long)iter, ddp_error(&k->ddp));
        return 1;
    }
    trace_phase(tr, PROBE_BACKWARD_END, PROBE_PHASE_OPTIM);
    clip_grad_norm(k->model.reg.params, k->model.reg.n_params, MAX_NORM);
    optim_step(&k->opt);
    optim_zero_grad(&k->opt, true);
    ema_update(&k->ema, &k->model.reg);
    trace_phase(tr, PROBE_OPTIM_STEP, PROBE_PHASE_OPTIM);
    *took = now() - t0;
    return 0;
}

// Waits until the writer has stored every record claimed so far; false after STORE_WAIT_S.
static bool wait_stored(const Probe *p) {
    double give_up = now() + STORE_WAIT_S;
    for (ProbeStats s = probe_stats(p); s.stored < s.claimed; s = probe_stats(p)) {
        if (now() > give_up) return false;
        usleep(1000);
    }
    return true;
}

// Opens the probe as the trainer does, records the parameter table and waits until the writer
// has stored it (the timed steps see the steady state, not the start-up burst).
static int probe_on(Rank *k, const Study *st) {
    char imgsz[32], batch[32];
    snprintf(imgsz, sizeof imgsz, "imgsz=%d", st->imgsz);
    snprintf(batch, sizeof batch, "batch=%d", st->batch);
    char *argv[] = {"train", (char *)st->model, imgsz, batch, "bench_trace"};
    pid_t before[MAX_THREADS], after[MAX_THREADS];
    int n_before = list_threads(before, MAX_THREADS);
    trace_open(&k->trace, st->dir, k->rank, WORLD, false, 5, argv);
    int n_after = list_threads(after, MAX_THREADS);
    k->writer_found = new_thread_clock(before, n_before, after, n_after, &k->writer_clock);
    if (!k->trace.probe) {
        fprintf(stderr, "bench_trace: rank %d: the probe did not open in %s\n", k->rank, st->dir);
        return 1;
    }
    trace_params(&k->trace, &k->model.reg);
    if (!wait_stored(k->trace.probe)) {
        fprintf(stderr,
                "bench_trace: rank %d: the writer did not store the parameter table "
                "within %d s\n",
                k->rank, STORE_WAIT_S);
        return 1;
    }
    return 0;
}

static int run_blocks(Rank *k, Study *st, ProcessGroup *pg) {
    char err[512];
    int64_t iter = 0;
    double took;
    for (int w = 0; w < WARMUP; w++)
        if (train_step(k, iter++, st->batch, &took)) return 1;
    for (int j = 0; j < 2 * st->pairs; j++) {
        Block *b = &st->blocks[j];
        b->on = block_is_on(j);
        if (b->on && probe_on(k, st)) return 1;
        if (pg_barrier(pg, err, sizeof err)) {
            fprintf(stderr, "bench_trace: rank %d: barrier: %s\n", k->rank, err);
            return 1;
        }
        // One untimed step first: every block then starts warm, whatever came before it (an ON
        // block follows the wait for the writer, an OFF block sometimes another OFF block).
        // Without it ON blocks alone started cold: rtdetr-tiny +1.5 % (200 pairs), with it +0.6 %.
        if (b->on && k->rank == 0) st->first_iter_of_last_on = iter;
        if (train_step(k, iter++, st->batch, &took)) return 1;
        ProbeStats s0 = probe_stats(k->trace.probe);
        double cpu0 = seconds(CLOCK_PROCESS_CPUTIME_ID), wall0 = now();
        double main0 = seconds(CLOCK_THREAD_CPUTIME_ID);
        double writer0 = b->on && k->writer_found ? seconds(k->writer_clock) : 0;
        for (int s = 0; s < st->timed; s++)
            if (train_step(k, iter++, st->batch, &b->step[k->rank][s])) return 1;
        b->cpu[k->rank] = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
        b->main_cpu[k->rank] = seconds(CLOCK_THREAD_CPUTIME_ID) - main0;
        b->wall[k->rank] = now() - wall0;
        if (!b->on) continue;
        if (k->rank == 0) st->n_iters_of_last_on = st->timed + 1; // the warm-up step is traced
        b->writer_cpu[k->rank] = k->writer_found ? seconds(k->writer_clock) - writer0 : -1;
        ProbeStats s1 = probe_stats(k->trace.probe);
        b->records[k->rank] = s1.claimed - s0.claimed;
        b->stored[k->rank] = s1.stored - s0.stored;
        b->overruns[k->rank] = s1.overruns - s0.overruns;
        double t0 = now();
        if (!wait_stored(k->trace.probe)) {
            fprintf(stderr, "bench_trace: rank %d: the writer fell %llu records behind\n", k->rank,
                    (unsigned long long)(s1.claimed - s1.stored));
            return 1;
        }
        b->catch_up[k->rank] = now() - t0;
        trace_close(&k->trace); // back to the off path: probe NULL, the observer stays
    }
    return 0;
}

static int rank_body(RankCtx *ctx) {
    Study *st = ctx->user;
    char err[512];
    backend_need(DEV_CPU)->set_threads(1);
    Rank *k = xcalloc(1, sizeof *k);
    k->rank = ctx->rank;
    if (rtdetr_init(&k->model, st->model, 0, 0, err, sizeof err)) {
        fprintf(stderr, "bench_trace: rank %d: %s\n", ctx->rank, err);
        return 1;
    }
    if (ctx->rank == 0) st->n_params = k->model.reg.n_params;
    arena_init(&k->step_arena, DEV_CPU, 0);
    tape_init(&k->tape, &k->step_arena, 1);
    optim_init(&k->opt, OPTIM_ADAMW, k->model.reg.params, k->model.reg.names, k->model.reg.n_params,
               1e-4, 0.9, 5e-4);
    ema_init(&k->ema, &k->model.reg);
    inputs_init(k, st->batch, st->imgsz);
    trace_open(&k->trace, NULL, ctx->rank, WORLD, false, 0, NULL); // off until the first ON block
    trace_params(&k->trace, &k->model.reg);
    DdpConfig cfg;
    ddp_config_default(&cfg);
    if (ddp_init(&k->ddp, ctx->pg, &k->model.reg, &k->tape, &cfg, trace_reducer_event, &k->trace)) {
        fprintf(stderr, "bench_trace: rank %d: ddp_init: %s\n", ctx->rank, ddp_error(&k->ddp));
        return 1;
    }
    int rc = run_blocks(k, st, ctx->pg);
    trace_close(&k->trace);
    ddp_free(&k->ddp);
    ema_free(&k->ema);
    optim_free(&k->opt);
    tape_free(&k->tape);
    arena_free(&k->step_arena);
    arena_free(&k->inputs);
    rtdetr_free(&k->model);
    free(k);
    return rc;
}

// ---- summaries ---------------------------------------------------------------------------------
// Median step of block j over both ranks' timed steps, seconds.
static double block_median(const Study *st, int j) {
    double v[WORLD * MAX_STEPS];
    int n = 0;
    for (int r = 0; r < WORLD; r++)
        for (int s = 0; s < st->timed; s++)
            v[n++] = st->blocks[j].step[r][s];
    return median(v, n);
}

// Median step over every block of one variant, seconds; *n_samples gets the sample count.
static double variant_median(const Study *st, bool on, int *n_samples) {
    double v[MAX_BLOCKS * WORLD * MAX_STEPS];
    int n = 0;
    for (int j = 0; j < 2 * st->pairs; j++)
        for (int r = 0; st->blocks[j].on == on && r < WORLD; r++)
            for (int s = 0; s < st->timed; s++)
                v[n++] = st->blocks[j].step[r][s];
    *n_samples = n;
    return median(v, n);
}

// Mean CPU time per step of one variant over ranks and blocks, seconds: the whole process's
// (main_thread false) or the training thread's alone (true).
static double variant_cpu(const Study *st, bool on, bool main_thread) {
    double cpu = 0;
    int steps = 0;
    for (int j = 0; j < 2 * st->pairs; j++)
        for (int r = 0; st->blocks[j].on == on && r < WORLD; r++) {
            cpu += main_thread ? st->blocks[j].main_cpu[r] : st->blocks[j].cpu[r];
            steps += st->timed;
        }
    return steps ? cpu / steps : 0;
}

// The q-quantile of sorted v[0..n), nearest rank.
static double quantile(const double *v, int n, double q) {
    int i = (int)(q * (n - 1) + 0.5);
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

// ns per emit on this machine now: 2^20 records into a scratch ring whose tail is moved on as
// if a writer had stored them (as an emit into a ring the writer keeps up with: no wait, a
// fresh cache line per record). The timed pass is the second: the first maps the ring's pages.
static double emit_ns(const char *dir) {
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/emit.ring", dir);
    const uint32_t n = 1u << 20;
    ProbeRing *ring = probe_ring_create(path, n, 0, err, sizeof err);
    CHECK(ring, "%s", err);
    double t0 = 0;
    for (int pass = 0; pass < 2; pass++) {
        ring_set_tail(ring, probe_ring_state(ring).head - 1);
        t0 = now();
        for (uint32_t i = 0; i < n; i++)
            probe_ring_emit(ring, PROBE_GRAD_READY, PROBE_FLAG_MARKED, 1, (int32_t)i, (int32_t)i, 1,
                            0, NULL, 0);
    }
    double ns = 1e9 * (now() - t0) / n;
    probe_ring_close(ring);
    unlink(path);
    return ns;
}

static void study_print(const Study *st, double ns_per_emit) {
    // Per pair of adjacent blocks: median step of each (both ranks), training thread CPU.
    printf("  pair  order    off step   on step  overhead   training thread CPU/step off, on "
           "(ms)\n");
    double pair_overhead[MAX_PAIRS];
    for (int p = 0; p < st->pairs; p++) {
        int on = block_is_on(2 * p) ? 2 * p : 2 * p + 1, off = 4 * p + 1 - on;
        const Block *b_on = &st->blocks[on], *b_off = &st->blocks[off];
        pair_overhead[p] = block_median(st, on) / block_median(st, off) - 1;
        printf("  %4d  %-7s  %8.1f  %8.1f  %+7.2f%%   %7.1f %7.1f\n", p + 1,
               on > off ? "off on" : "on off", 1e3 * block_median(st, off),
               1e3 * block_median(st, on), 100 * pair_overhead[p],
               1e3 * 0.5 * (b_off->main_cpu[0] + b_off->main_cpu[1]) / st->timed,
               1e3 * 0.5 * (b_on->main_cpu[0] + b_on->main_cpu[1]) / st->timed);
    }
    int n_off, n_on, n = st->pairs;
    double off = variant_median(st, false, &n_off), on = variant_median(st, true, &n_on);
    double med = median(pair_overhead, n); // sorts pair_overhead
    double q1 = quantile(pair_overhead, n, 0.25), q3 = quantile(pair_overhead, n, 0.75);
    // Standard error of a median: 1.25 sigma / sqrt(n), sigma estimated as IQR / 1.35.
    double se = 1.25 * (q3 - q1) / 1.35 / sqrt((double)n);
    printf("  OVERHEAD %s: median over %d pairs %+.2f%% +- %.2f%% (1 s.e.; middle half %+.2f%% "
           ".. %+.2f%%, range %+.2f%% .. %+.2f%%); goal <= 0.5%%\n",
           st->model, n, 100 * med, 100 * se, 100 * q1, 100 * q3, 100 * pair_overhead[0],
           100 * pair_overhead[n - 1]);
    printf("  median step over all blocks: off %.1f ms (%d samples), on %.1f ms (%d samples): "
           "%+.2f%%\n",
           1e3 * off, n_off, 1e3 * on, n_on, 100 * (on / off - 1));
    double proc_off = variant_cpu(st, false, false), proc_on = variant_cpu(st, true, false);
    double main_off = variant_cpu(st, false, true), main_on = variant_cpu(st, true, true);
    printf("  CPU per step and rank, off -> on: training thread %.1f -> %.1f ms (%+.2f ms: the "
           "emits, and what sharing the core costs it); other threads (Gloo, the writer) %.1f -> "
           "%.1f ms (%+.2f ms)\n",
           1e3 * main_off, 1e3 * main_on, 1e3 * (main_on - main_off), 1e3 * (proc_off - main_off),
           1e3 * (proc_on - main_on), 1e3 * ((proc_on - main_on) - (proc_off - main_off)));
    uint64_t records = 0, stored = 0, overruns = 0;
    double wall = 0, catch_up = 0;      // wall: summed over ranks, as stored is
    double writer = 0, writer_wall = 0; // the writer's CPU, and the wall time it was measured over
    int writer_steps = 0, writer_missing = 0;
    for (int j = 0; j < 2 * st->pairs; j++)
        for (int r = 0; st->blocks[j].on && r < WORLD; r++) {
            const Block *b = &st->blocks[j];
            records += b->records[r];
            stored += b->stored[r];
            overruns += b->overruns[r];
            wall += b->wall[r];
            if (b->catch_up[r] > catch_up) catch_up = b->catch_up[r];
            if (b->writer_cpu[r] < 0) {
                writer_missing++;
            } else {
                writer += b->writer_cpu[r];
                writer_wall += b->wall[r];
                writer_steps += st->timed;
            }
        }
    int rank_steps = st->pairs * WORLD * st->timed; // timed steps of all ON blocks, both ranks
    printf("  probe: %.0f ring records per rank per step (TEXT parts and heartbeats included); "
           "its writer stored %.0f rows/s per rank while the steps ran, %llu overruns, and had "
           "stored everything %.0f ms after a block's last step at most\n",
           (double)records / rank_steps, wall > 0 ? (double)stored / wall : 0,
           (unsigned long long)overruns, 1e3 * catch_up);
    if (writer_steps) {
        // With the 2 ranks' training threads on the 2 cores, what the writer runs comes out of
        // them: its share of a core is about what the steps lose (less whatever it fits into
        // the ranks' waits for each other).
        printf("  WRITER %s: %.2f ms CPU per rank per step = %.2f%% of a core (%.1f ms per s); "
               "on cores the ranks keep busy, about what the steps lose to it%s\n",
               st->model, 1e3 * writer / writer_steps, 100 * writer / writer_wall,
               1e3 * writer / writer_wall,
               writer_missing ? " (its thread was not found in some blocks)" : "");
        // At worst each rank's writer delays its rank by what it runs, the two at different
        // moments, and each delay reaches the other rank through the next allreduce: a step
        // loses both writers' CPU, plus the rank's own emits.
        double per_step = writer / writer_steps, emits = (double)records / rank_steps;
        double bound = WORLD * per_step + emits * ns_per_emit * 1e-9;
        printf("  BOUND %s: %d writers x %.2f ms + %.0f emits x %.0f ns = %.2f ms per step, %.2f%% "
               "of the off step (%.1f ms): the most the probe can cost a step if its writers run "
               "only on cores the ranks need\n",
               st->model, WORLD, 1e3 * per_step, emits, ns_per_emit, 1e3 * bound, 100 * bound / off,
               1e3 * off);
    } else {
        printf("  writer thread CPU: its thread was not found (/proc/self/task)\n");
    }
}

// The last ON block's trace of rank r holds, for each of its iterations, one GRAD_READY per
// parameter: the probe really recorded what the steps did. Prints one line; false if not.
static bool check_trace(const Study *st, int r) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/rank%d.db", st->dir, r);
    if (probe_db_check(path, err, sizeof err)) {
        printf("  trace check: %s\n", err);
        return false;
    }
    sqlite3 *db;
    sqlite3_stmt *q;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT COUNT(*), COUNT(DISTINCT iter), MIN(iter),"
                           " (SELECT COUNT(*) FROM events) FROM events WHERE kind = ?",
                           -1, &q, NULL) != SQLITE_OK) {
        printf("  trace check: %s: %s\n", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return false;
    }
    sqlite3_bind_int(q, 1, PROBE_GRAD_READY);
    bool ok = sqlite3_step(q) == SQLITE_ROW;
    int64_t hooks = ok ? sqlite3_column_int64(q, 0) : 0,
            iters = ok ? sqlite3_column_int64(q, 1) : 0;
    int64_t first = ok ? sqlite3_column_int64(q, 2) : 0, rows = ok ? sqlite3_column_int64(q, 3) : 0;
    sqlite3_finalize(q);
    sqlite3_close(db);
    ok = ok && iters == st->n_iters_of_last_on && first == st->first_iter_of_last_on &&
         hooks == iters * st->n_params;
    printf("  trace check, %s: %lld rows, %lld GRAD_READY over %lld iterations from %lld "
           "(expected %d per iteration, %lld iterations from %lld): %s\n",
           path, (long long)rows, (long long)hooks, (long long)iters, (long long)first,
           st->n_params, (long long)st->n_iters_of_last_on, (long long)st->first_iter_of_last_on,
           ok ? "ok" : "MISMATCH");
    return ok;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

// Other work on the machine moves every figure here: the load average says how much there was.
// Returns the 1-minute load (0 if unknown).
static double print_load(const char *when) {
    double l[3];
    if (getloadavg(l, 3) != 3) return 0;
    printf("load average %s: %.2f %.2f %.2f (1, 5, 15 min; 2 cores)\n", when, l[0], l[1], l[2]);
    return l[0];
}

int main(void) {
    double t_start = now();
    char root[] = "/tmp/bench_trace.XXXXXX";
    if (!mkdtemp(root)) {
        fprintf(stderr, "bench_trace: mkdtemp %s failed\n", root);
        return 1;
    }
    const Study specs[] = {
        {.model = "rtdetr-tiny.yaml",
         .imgsz = 160,
         .batch = 1,
         .pairs = 30,
         .timed = 40, // ~3 s
         .limit_s = 900},
        {.model = "rtdetr-l.yaml",
         .imgsz = 160,
         .batch = 1,
         .pairs = 10,
         .timed = 3, // ~4.5 s
         .limit_s = 900},
    };
    int n_studies = (int)(sizeof specs / sizeof specs[0]);
    Study *studies = mmap(NULL, sizeof(Study) * (size_t)n_studies, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(studies != MAP_FAILED, "mmap of %d studies failed", n_studies);
    printf("The probe's cost on 2-rank DDP training steps (Gloo over loopback, 1 thread per rank, "
           "the 2 ranks sharing the machine's 2 cores): run_batch's step with its trace calls,\n"
           "probe off (TrainTrace.probe NULL) vs on (trace_open: ring + SQLite writer thread, "
           "heartbeat 1000 ms), in the same two processes, blocks in ABBA order.\n");
    print_load("at the start");
    double ns_per_emit = emit_ns(root);
    printf("an emit into the ring: %.0f ns\n", ns_per_emit);
    bool ok = true;
    for (int i = 0; i < n_studies; i++) {
        Study *st = &studies[i];
        *st = specs[i];
        CHECK(st->pairs <= MAX_PAIRS && st->timed <= MAX_STEPS,
              "%d pairs of %d steps: at most %d of %d", st->pairs, st->timed, MAX_PAIRS, MAX_STEPS);
        snprintf(st->dir, sizeof st->dir, "%s/%d", root, i);
        printf("\n%s, %d px, batch %d per rank: %d warm-up steps, then %d pairs of blocks x %d "
               "timed steps\n",
               st->model, st->imgsz, st->batch, WARMUP, st->pairs, st->timed);
        fflush(stdout);
        double t0 = now();
        int status[WORLD] = {0};
        if (harness_run(WORLD, PG_TIMEOUT_MS, st->limit_s, rank_body, st, status)) {
            fprintf(stderr, "bench_trace: %s failed: rank exits %d %d\n", st->model, status[0],
                    status[1]);
            ok = false;
            continue;
        }
        study_print(st, ns_per_emit);
        for (int r = 0; r < WORLD; r++)
            ok = check_trace(st, r) && ok;
        printf("(%s: %.0f s)\n", st->model, now() - t0);
        // The 2 ranks alone make a load of about 2: more means others shared the cores.
        if (print_load("now") > BUSY_LOAD)
            printf("note: the machine was busy with other work: the step-time comparison above "
                   "is mostly its noise (the WRITER figure is not)\n");
        fflush(stdout);
    }
    print_load("at the end");
    printf("\nbench_trace: %.0f s\n", now() - t_start);
    munmap(studies, sizeof(Study) * (size_t)n_studies);
    nftw(root, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return ok ? 0 : 1;
}
