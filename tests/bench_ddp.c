/* bench_ddp.c -- what 2-rank DDP over Gloo costs on one machine, and how much of its allreduce
 * hides behind backward. Full training steps (forward + RT-DETR loss + backward + AdamW), 1
 * thread per rank, in up to four setups run as separate forked blocks, alternated over rounds
 * so that machine noise hits each alike:
 *   1 process           world 1, no DDP
 *   2 processes         two independent single-process loops at once (no communication):
 *                       what sharing the cores costs by itself
 *   DDP 1/25 MiB        2 ranks, PyTorch's default bucket caps
 *   DDP 1/1 MiB         2 ranks, bucket_cap_mb=1 (first bucket 1 MiB, then 1 MiB)
 * for rtdetr-tiny (128 px, batch 2 per rank, 5 rounds of all four), then rtdetr-l (160 px,
 * batch 1 per rank, three rounds of the first three: its overlap moves by 10 points from one
 * 4-step block to the next). Every block starts fresh processes, runs
 * WARMUP steps (iteration 2 rebuilds the buckets) and then times its steps. The comm figures
 * come from reducer observer timestamps; their definitions are printed with them (and at
 * Clock), among them issue 14's overlap: the fraction of the allreduce busy time that lies
 * before backward's computation ends (per step, medians per rank and over both). About 100 s. Prints timings only, never fails on them (exit 1 only if a rank fails). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels/base.h"
#include "tests/bench_stats.h"
#include "tests/ddp_harness.h"
#include "trainer/nn/loss.h"
#include "trainer/optim/adamw.h"

#define WARMUP 2     // untimed steps per block: the first two include the bucket rebuild
#define MAX_STEPS 16 // timed steps per block, at most
#define MAX_ROUNDS 8 // rounds per model, at most
#define MAX_SAMPLES (2 * MAX_STEPS * MAX_ROUNDS) // (rank, step) samples of one setup
#define MAX_BUCKETS 256 // buckets of one layout, at most (rtdetr-l at 1 MiB caps has ~130)
#define BOXES 3         // ground-truth boxes per image (every image has some: no unused params)
#define PG_TIMEOUT_MS 60000
#define MIB (1024 * 1024)

static double seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- what the ranks write back (shared memory, mapped before the fork) ----------------------
// One timed step of one rank; times in seconds. comm, exposed and bucket_comm are 0 without DDP.
typedef struct RankStep {
    double step;        // tape_reset .. after the optimiser step (what a training loop pays)
    double pre_forward; // ddp_pre_forward (the buffer broadcast from rank 0)
    double backward;    // tape_backward, finalize included
    double comm;        // union of the buckets' [launch, done] intervals (allreduce busy time)
    double comm_before_end; // the part of comm before the last gradient-ready hook
    double exposed;     // backward end - the last gradient-ready hook
    double tail_wait;   // the part of exposed until the last bucket was done
    double bucket_comm[MAX_BUCKETS]; // done - launch per bucket
} RankStep;

typedef struct Block {
    bool ran;      // every rank finished
    bool rebuilt;  // a rebuilt layout was installed during the warm-up
    int n_buckets; // the layout the timed steps used (rank 0's view)
    int bucket_vars[MAX_BUCKETS];
    int64_t bucket_numel[MAX_BUCKETS];
    RankStep s[2][MAX_STEPS]; // [rank][timed step]
    double cpu[2], wall[2];   // per rank over its timed steps: process CPU time and wall time
} Block;

typedef struct BlockSpec {
    const char *model;
    int imgsz, batch, world, timed;
    int cooldown; // untimed steps after the timed ones (keeps pairs overlapping)
    bool ddp;
    int64_t first_cap, cap; // DDP bucket caps, bytes
    Block *out;
} BlockSpec;

// ---- observer timestamps ---------------------------------------------------------------------
// One rank's clock over one backward. A bucket launches just after the event before its
// COLLECTIVE event (its BUCKET_READY, or the previous bucket's launch in the same chain): the
// COLLECTIVE event itself comes after pg_allreduce_sum returns, which on shared cores can be
// late by a time slice (waking Gloo's worker thread may preempt this one). Its completion is
// observed at the first event at which pg_work_test says it is done (polled at every event:
// each hook, launch and wait), or when finalize's wait for it returns, whichever comes first:
// an upper bound, as tight as the spacing of the events.
typedef struct Clock {
    Ddp *ddp;
    bool armed;   // between backward start and end
    bool rebuilt; // a rebuilt layout was installed
    double prev;  // the previous event (backward start before the first)
    double last_hook;
    int n_launched;
    double launch[MAX_BUCKETS], done[MAX_BUCKETS];
    bool complete[MAX_BUCKETS];
} Clock;

static void clock_arm(Clock *c) {
    c->armed = true;
    c->prev = bench_now();
    c->last_hook = 0;
    c->n_launched = 0;
}

static void observe(void *user, const ReducerEvent *e) {
    Clock *c = user;
    if (e->kind == REDUCER_EV_LAYOUT && e->rebuilt) c->rebuilt = true;
    if (!c->armed) return;
    double t = bench_now();
    const Reducer *r = &c->ddp->reducer;
    for (int b = 0; b < c->n_launched; b++)
        if (!c->complete[b] && r->buckets[b].work && pg_work_test(r->buckets[b].work)) {
            c->done[b] = t;
            c->complete[b] = true;
        }
    bool of_bucket = e->bucket >= 0 && e->what && strcmp(e->what, "bucket") == 0;
    if (e->kind == REDUCER_EV_HOOK) {
        c->last_hook = t;
    } else if (e->kind == REDUCER_EV_COLLECTIVE && of_bucket) {
        CHECK(e->bucket == c->n_launched && e->bucket < MAX_BUCKETS,
              "bucket %d launched out of order (expected %d, at most %d)", e->bucket, c->n_launched,
              MAX_BUCKETS);
        c->launch[e->bucket] = c->prev;
        c->complete[e->bucket] = false;
        c->n_launched++;
    } else if (e->kind == REDUCER_EV_COLLECTIVE_DONE && of_bucket && !c->complete[e->bucket]) {
        c->done[e->bucket] = t;
        c->complete[e->bucket] = true;
    }
    c->prev = t;
}

// Total length of the union of the launched buckets' [launch, done] intervals, counting only
// what lies before `limit` (INFINITY: all of it). Gloo runs them in launch order, so the
// intervals come sorted by start.
static double comm_union(const Clock *c, double limit) {
    double total = 0, end = 0;
    for (int b = 0; b < c->n_launched; b++) {
        double lo = c->launch[b] > end ? c->launch[b] : end;
        double hi = c->done[b] < limit ? c->done[b] : limit;
        if (hi > lo) total += hi - lo;
        if (c->done[b] > end) end = c->done[b];
    }
    return total;
}

// ---- one rank ----------------------------------------------------------------------------------
// Synthetic batch: uniform images (seeded by rank) and BOXES boxes per image.
typedef struct Inputs {
    Arena arena;
    Tensor *images;
    int cls[64];
    float boxes[64 * 4];
    int counts[16];
    Targets tg;
} Inputs;

static void inputs_init(Inputs *in, int rank, int batch, int imgsz, int nc) {
    CHECK(batch <= 16 && batch * BOXES <= 64, "batch %d: at most 16 images of %d boxes", batch,
          BOXES);
    arena_init(&in->arena, DEV_CPU, 0);
    in->images = tensor_new(&in->arena, 4, (int64_t[]){batch, 3, imgsz, imgsz});
    Rng r;
    rng_init(&r, 100 + (uint64_t)rank);
    for (int64_t i = 0; i < in->images->n; i++)
        in->images->data[i] = rng_uniform(&r);
    for (int k = 0; k < batch * BOXES; k++) {
        in->cls[k] = (int)rng_below(&r, (uint64_t)nc);
        float *b = in->boxes + 4 * k;
        b[2] = rng_range(&r, 0.1f, 0.4f);
        b[3] = rng_range(&r, 0.1f, 0.4f);
        b[0] = rng_range(&r, b[2] / 2, 1 - b[2] / 2);
        b[1] = rng_range(&r, b[3] / 2, 1 - b[3] / 2);
    }
    for (int i = 0; i < batch; i++)
        in->counts[i] = BOXES;
    in->tg = (Targets){.n_images = batch,
                       .n_boxes = batch * BOXES,
                       .cls = in->cls,
                       .bboxes = in->boxes,
                       .counts = in->counts};
}

static int rank_body(RankCtx *ctx) {
    const BlockSpec *s = ctx->user;
    char err[512];
    backend_need(DEV_CPU)->set_threads(1);
    Rtdetr m;
    if (rtdetr_init(&m, s->model, 0, 0, err, sizeof err)) {
        fprintf(stderr, "bench_ddp: rank %d: %s\n", ctx->rank, err);
        return 1;
    }
    Arena step;
    arena_init(&step, DEV_CPU, 0);
    Tape t;
    tape_init(&t, &step, 1);
    Optimizer opt;
    optim_init(&opt, OPTIM_ADAMW, m.reg.params, m.reg.names, m.reg.n_params, 1e-4, 0.9, 5e-4);
    Inputs in;
    inputs_init(&in, ctx->rank, s->batch, s->imgsz, m.spec.nc);

    Ddp d;
    Clock clock = {.ddp = &d};
    if (s->ddp) {
        DdpConfig cfg;
        ddp_config_default(&cfg);
        cfg.reducer.first_bucket_bytes_cap = s->first_cap;
        cfg.reducer.bucket_bytes_cap = s->cap;
        if (ddp_init(&d, ctx->pg, &m.reg, &t, &cfg, observe, &clock)) {
            fprintf(stderr, "bench_ddp: rank %d: ddp_init: %s\n", ctx->rank, ddp_error(&d));
            return 1;
        }
    }
    // Both ranks of a pair start their loops together, DDP or not.
    if (ctx->world > 1 && pg_barrier(ctx->pg, err, sizeof err)) {
        fprintf(stderr, "bench_ddp: rank %d: barrier: %s\n", ctx->rank, err);
        return 1;
    }

    int n_steps = WARMUP + s->timed + s->cooldown;
    double cpu0 = 0, wall0 = 0;
    for (int it = 0; it < n_steps; it++) {
        if (it == WARMUP) {
            cpu0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
            wall0 = bench_now();
        }
        if (it == WARMUP + s->timed) {
            s->out->cpu[ctx->rank] = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
            s->out->wall[ctx->rank] = bench_now() - wall0;
        }
        double t0 = bench_now();
        tape_reset(&t);
        t.training = true;
        t.grad_enabled = true;
        if (s->ddp && ddp_pre_forward(&d)) {
            fprintf(stderr, "bench_ddp: rank %d step %d: %s\n", ctx->rank, it, ddp_error(&d));
            return 1;
        }
        double t1 = bench_now();
        uint64_t seed = 1000 * (uint64_t)(ctx->rank + 1) + (uint64_t)it;
        Tensor *loss = rtdetr_loss(&m, &t, in.images, &in.tg, seed, NULL);
        if (s->ddp) ddp_post_forward(&d, &loss, 1);
        clock_arm(&clock);
        double t2 = bench_now();
        if (tape_backward(&t, loss, NULL)) {
            fprintf(stderr, "bench_ddp: rank %d step %d: backward: %s\n", ctx->rank, it,
                    s->ddp ? ddp_error(&d) : "failed");
            return 1;
        }
        double t3 = bench_now();
        clock.armed = false;
        optim_step(&opt);
        optim_zero_grad(&opt, true);
        double t4 = bench_now();

        int k = it - WARMUP;
        if (k < 0 || k >= s->timed) continue;
        RankStep *rs = &s->out->s[ctx->rank][k];
        *rs = (RankStep){.step = t4 - t0, .pre_forward = t1 - t0, .backward = t3 - t2};
        if (!s->ddp) continue;
        CHECK(clock.n_launched == d.reducer.n_buckets, "rank %d: %d of %d buckets launched",
              ctx->rank, clock.n_launched, d.reducer.n_buckets);
        rs->comm = comm_union(&clock, INFINITY);
        rs->comm_before_end = comm_union(&clock, clock.last_hook);
        rs->exposed = t3 - clock.last_hook;
        double last_done = clock.last_hook;
        for (int b = 0; b < clock.n_launched; b++) {
            rs->bucket_comm[b] = clock.done[b] - clock.launch[b];
            if (clock.done[b] > last_done) last_done = clock.done[b];
        }
        rs->tail_wait = last_done - clock.last_hook;
        if (k == 0 && ctx->rank == 0) {
            Block *o = s->out;
            o->rebuilt = clock.rebuilt;
            o->n_buckets = d.reducer.n_buckets;
            for (int b = 0; b < o->n_buckets; b++) {
                o->bucket_vars[b] = d.reducer.buckets[b].n_vars;
                o->bucket_numel[b] = d.reducer.buckets[b].numel;
            }
        }
    }
    if (s->cooldown == 0) {
        s->out->cpu[ctx->rank] = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
        s->out->wall[ctx->rank] = bench_now() - wall0;
    }
    if (s->ddp) ddp_free(&d);
    optim_free(&opt);
    tape_free(&t);
    arena_free(&step);
    arena_free(&in.arena);
    rtdetr_free(&m);
    return 0;
}

// Runs one block on fresh processes; false (with a line on stderr) if a rank failed.
static bool run_block(BlockSpec *s, int limit_s) {
    CHECK(s->timed <= MAX_STEPS, "%d timed steps: at most %d", s->timed, MAX_STEPS);
    memset(s->out, 0, sizeof *s->out);
    int status[2] = {0, 0};
    if (harness_run(s->world, PG_TIMEOUT_MS, limit_s, rank_body, s, status)) {
        fprintf(stderr, "bench_ddp: %s block (world %d%s) failed: rank exits %d %d\n", s->model,
                s->world, s->ddp ? ", DDP" : "", status[0], status[1]);
        return false;
    }
    s->out->ran = true;
    return true;
}

// ---- summaries ---------------------------------------------------------------------------------
// The per-step figures the summaries take medians of (F_HIDDEN: 1 - exposed / comm;
// F_OVERLAP: comm_before_end / comm).
typedef enum {
    F_STEP,
    F_PRE_FORWARD,
    F_BACKWARD,
    F_COMM,
    F_EXPOSED,
    F_TAIL_WAIT,
    F_HIDDEN,
    F_OVERLAP
} Field;

static double field_of(const RankStep *r, Field f) {
    switch (f) {
    case F_STEP:
        return r->step;
    case F_PRE_FORWARD:
        return r->pre_forward;
    case F_BACKWARD:
        return r->backward;
    case F_COMM:
        return r->comm;
    case F_EXPOSED:
        return r->exposed;
    case F_TAIL_WAIT:
        return r->tail_wait;
    case F_HIDDEN:
        return r->comm > 0 ? 1 - r->exposed / r->comm : 0;
    case F_OVERLAP:
        return r->comm > 0 ? r->comm_before_end / r->comm : 0;
    }
    return 0;
}

// Median of field f over the samples of blocks[0..n) (rank: 0 or 1, or -1 for both).
static double block_median(Block *const *blocks, int n, int world, int timed, int rank, Field f,
                           int *n_samples) {
    double v[MAX_SAMPLES];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!blocks[i]->ran) continue;
        for (int r = 0; r < world; r++) {
            if (rank >= 0 && r != rank) continue;
            for (int k = 0; k < timed && m < MAX_SAMPLES; k++)
                v[m++] = field_of(&blocks[i]->s[r][k], f);
        }
    }
    if (n_samples) *n_samples = m;
    return bench_median(v, m);
}

static void print_comm(Block *const *blocks, int n, int timed, const char *name) {
    for (int r = 0; r < 2; r++) {
        int ns;
        double comm = block_median(blocks, n, 2, timed, r, F_COMM, &ns);
        printf("  %-13s rank %d: backward %7.1f ms, total comm %6.1f ms, exposed %6.1f ms "
               "(%5.1f ms of it waiting for the last bucket), hidden %5.1f%%, overlap %5.1f%%  "
               "(%d steps)\n",
               name, r, 1e3 * block_median(blocks, n, 2, timed, r, F_BACKWARD, NULL), 1e3 * comm,
               1e3 * block_median(blocks, n, 2, timed, r, F_EXPOSED, NULL),
               1e3 * block_median(blocks, n, 2, timed, r, F_TAIL_WAIT, NULL),
               100 * block_median(blocks, n, 2, timed, r, F_HIDDEN, NULL),
               100 * block_median(blocks, n, 2, timed, r, F_OVERLAP, NULL), ns);
    }
    int ns;
    double overlap = block_median(blocks, n, 2, timed, -1, F_OVERLAP, &ns);
    printf("  %-13s overlap %5.1f%% (median over both ranks' %d steps)\n", name, 100 * overlap, ns);
}

// The layout of the first block that ran, with each bucket's median comm time (both ranks).
static void print_layout(Block *const *blocks, int n, int timed, const char *name) {
    const Block *first = NULL;
    for (int i = 0; i < n && !first; i++)
        if (blocks[i]->ran) first = blocks[i];
    if (!first) return;
    printf("  %s: %d buckets after %s\n", name, first->n_buckets,
           first->rebuilt ? "the rebuild" : "warm-up (no rebuild seen!)");
    printf("    bucket  params     numel      MiB  comm (median, ms)\n");
    for (int b = 0; b < first->n_buckets; b++) {
        double v[MAX_SAMPLES];
        int m = 0;
        for (int i = 0; i < n; i++)
            for (int r = 0; blocks[i]->ran && r < 2; r++)
                for (int k = 0; k < timed && m < MAX_SAMPLES; k++)
                    v[m++] = blocks[i]->s[r][k].bucket_comm[b];
        printf("    %6d  %6d  %8lld  %7.2f  %7.1f\n", b, first->bucket_vars[b],
               (long long)first->bucket_numel[b], 4.0 * (double)first->bucket_numel[b] / MIB,
               1e3 * bench_median(v, m));
    }
}

// ---- the benchmark ------------------------------------------------------------------------------
enum { SINGLE, PAIR, DDP_DEFAULT, DDP_CAP1, N_SETUPS };
static const char *setup_name[N_SETUPS] = {"1 process", "2 processes", "DDP 1/25 MiB",
                                           "DDP 1/1 MiB"};

// One model's comparison: n_setups setups (a prefix of the enum) alternated over `rounds`.
typedef struct Study {
    const char *model;
    int imgsz, batch, rounds, timed, n_setups;
    int limit_s; // per block
    Block *blocks[N_SETUPS][MAX_ROUNDS];
} Study;

static bool study_run(Study *st) {
    CHECK(st->rounds <= MAX_ROUNDS, "%d rounds: at most %d", st->rounds, MAX_ROUNDS);
    bool ok = true;
    printf("round ");
    for (int k = 0; k < st->n_setups; k++)
        printf(" %14s", setup_name[k]);
    printf("  (median step, ms)\n");
    for (int round = 0; round < st->rounds; round++) {
        printf("%5d ", round + 1);
        for (int k = 0; k < st->n_setups; k++) {
            Block *out = st->blocks[k][round];
            BlockSpec s = {.model = st->model,
                           .imgsz = st->imgsz,
                           .batch = st->batch,
                           .world = k == SINGLE ? 1 : 2,
                           .timed = st->timed,
                           .cooldown = k == PAIR ? 2 : 0,
                           .ddp = k == DDP_DEFAULT || k == DDP_CAP1,
                           .first_cap = REDUCER_FIRST_BUCKET_BYTES,
                           .cap = k == DDP_CAP1 ? MIB : REDUCER_BUCKET_BYTES_CAP,
                           .out = out};
            ok = run_block(&s, st->limit_s) && ok;
            printf(" %14.1f", 1e3 * block_median(&out, 1, s.world, st->timed, -1, F_STEP, NULL));
            fflush(stdout);
        }
        printf("\n");
    }
    return ok;
}

static void study_print(const Study *st) {
    double step[N_SETUPS] = {0};
    int samples[N_SETUPS] = {0};
    for (int k = 0; k < st->n_setups; k++)
        step[k] = block_median(st->blocks[k], st->rounds, k == SINGLE ? 1 : 2, st->timed, -1,
                               F_STEP, &samples[k]);
    printf("step time, median over every rank's timed steps of every round; CPU = the ranks' "
           "process CPU time over their timed steps / wall time (100%% = a core to itself)\n");
    for (int k = 0; k < st->n_setups; k++) {
        double cpu = 0, wall = 0;
        for (int r = 0; r < st->rounds; r++)
            for (int rank = 0; rank < (k == SINGLE ? 1 : 2); rank++) {
                cpu += st->blocks[k][r]->cpu[rank];
                wall += st->blocks[k][r]->wall[rank];
            }
        printf("  %-14s %8.1f ms  (%2d samples)  CPU %3.0f%%\n", setup_name[k], 1e3 * step[k],
               samples[k], wall > 0 ? 100 * cpu / wall : 0.0);
    }
    printf("  2-rank DDP 1/25 MiB / 1 process:   %.2fx\n", step[DDP_DEFAULT] / step[SINGLE]);
    printf("  2 processes (no comm) / 1 process: %.2fx  (sharing the cores)\n",
           step[PAIR] / step[SINGLE]);
    printf("  2-rank DDP 1/25 MiB / 2 processes: %.2fx  (DDP itself)\n",
           step[DDP_DEFAULT] / step[PAIR]);
    if (st->n_setups > DDP_CAP1)
        printf("  2-rank DDP 1/1 MiB / 2 processes:  %.2fx\n", step[DDP_CAP1] / step[PAIR]);
    for (int k = DDP_DEFAULT; k < st->n_setups; k++)
        printf("  %s: ddp_pre_forward (the buffer broadcast) %.1f ms\n", setup_name[k],
               1e3 *
                   block_median(st->blocks[k], st->rounds, 2, st->timed, -1, F_PRE_FORWARD, NULL));
    printf("allreduce hidden behind backward, medians per rank\n");
    for (int k = DDP_DEFAULT; k < st->n_setups; k++)
        print_comm(st->blocks[k], st->rounds, st->timed, setup_name[k]);
    printf("bucket layouts (the rebuilt one the timed steps used), comm = done - launch\n");
    for (int k = DDP_DEFAULT; k < st->n_setups; k++)
        print_layout(st->blocks[k], st->rounds, st->timed, setup_name[k]);
    fflush(stdout);
}

// Other work on the machine moves every figure here: the load average says how much there was.
static void print_load(const char *when) {
    double l[3];
    if (getloadavg(l, 3) == 3)
        printf("load average %s: %.2f %.2f %.2f (1, 5, 15 min; 2 cores)\n", when, l[0], l[1], l[2]);
}

int main(void) {
    double t_start = bench_now();
    Study tiny = {.model = "rtdetr-tiny.yaml",
                  .imgsz = 128,
                  .batch = 2,
                  .rounds = 5,
                  .timed = 6,
                  .n_setups = N_SETUPS,
                  .limit_s = 120};
    Study large = {.model = "rtdetr-l.yaml",
                   .imgsz = 160,
                   .batch = 1,
                   .rounds = 3,
                   .timed = 6,
                   .n_setups = DDP_DEFAULT + 1,
                   .limit_s = 150};
    printf("What 2-rank DDP (Gloo, loopback) costs: full training steps (forward + RT-DETR loss "
           "+ backward with finalize + AdamW), 1 thread per rank.\n"
           "The two ranks share this machine's 2 cores, so a 2-rank step also pays for sharing "
           "them (and for anything else running here).\n"
           "'2 processes' runs two independent single-process loops at once, no communication: "
           "it separates sharing the cores from DDP's own cost.\n"
           "Setups alternate in rounds; each block is fresh processes, %d warm-up steps "
           "(iteration 2 rebuilds the buckets), then the timed ones.\n"
           "Comm, from reducer observer timestamps (CLOCK_MONOTONIC), per rank and step:\n"
           "  a bucket's comm = done - launch: launch = the event just before its COLLECTIVE event "
           "(the call into pg_allreduce_sum); done = the first "
           "reducer event (every hook, launch and wait) at which pg_work_test says it completed,\n"
           "    or finalize's wait for it returning, whichever is first -- an upper bound, which "
           "also covers waiting for the peer to launch that bucket;\n"
           "  total comm = the union of the buckets' [launch, done]; exposed = backward end - "
           "the last gradient-ready hook (the last backward kernel done;\n"
           "    includes finalize's copy into .grad, and a rank that finishes first waiting for "
           "the other); hidden = 1 - exposed / total comm;\n"
           "  overlap = the part of total comm (allreduce busy time) before backward's computation "
           "ends (the last gradient-ready hook) / total comm: the fraction of the allreduce\n"
           "    that runs while backward still computes (issue 14 asks >= 80%% at the default caps "
           "on rtdetr-l).\n",
           WARMUP);
    print_load("at the start");

    int n_blocks = tiny.rounds * tiny.n_setups + large.rounds * large.n_setups;
    Block *mem = mmap(NULL, sizeof(Block) * (size_t)n_blocks, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(mem != MAP_FAILED, "mmap of %d result blocks failed", n_blocks);
    Block *next = mem;
    Study *studies[2] = {&tiny, &large};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < studies[i]->n_setups; k++)
            for (int r = 0; r < studies[i]->rounds; r++)
                studies[i]->blocks[k][r] = next++;

    bool ok = true;
    for (int i = 0; i < 2; i++) {
        Study *st = studies[i];
        double t0 = bench_now();
        printf("\n%s, %d px, batch %d per rank: %d rounds x %d timed steps per block\n", st->model,
               st->imgsz, st->batch, st->rounds, st->timed);
        fflush(stdout);
        ok = study_run(st) && ok;
        study_print(st);
        printf("(%s: %.0f s)\n", st->model, bench_now() - t0);
    }
    print_load("at the end");
    printf("\nbench_ddp: %.0f s\n", bench_now() - t_start);
    munmap(mem, sizeof(Block) * (size_t)n_blocks);
    return ok ? 0 : 1;
}
