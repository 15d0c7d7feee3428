/* bench_families.c -- where a full rtdetr-l training step (320 px, batch 2, 2 threads) spends
 * its time and its memory. The step is the trainer's minus the batch load: forward with the
 * real denoising (cdn) and RT-DETR loss (matcher included), backward, clip 10, AdamW, EMA.
 * 1 warm-up step, the median of STEPS steps, then one profiled step split into issue 14's
 * op families, each beside its FLOPs and its distance to the limit:
 *   conv          conv2d                      2 * out * Cin/g * k * k
 *   GEMM          linear, matmul, bmm, the    2 * out * K; attention: its in-projections and
 *                 attention core (mha_core)   the two products
 *   deformable    msdeform_attn, grid_sample  10 flops per channel per sample (as flops.py)
 *   norms         layernorm, batchnorm2d      7 flops per element
 *   elementwise   every other op of the model (memory-bound: no FLOPs counted)
 *   loss/matcher  every op the loss records after the decoder, and the matcher (host code,
 *                 counted with the next op it records)
 *   optimizer     clip, AdamW, zero_grad, EMA (timed as one)
 * Backward FLOPs are 2 x forward for every family (tests/torch/flops.py counts the same way,
 * so its --profile table compares row by row). Forward time per op is sampled (SIGPROF every
 * ms of CPU time, spread over the forward's wall time); backward time per op is exact (each
 * node's backward is timed); "recompute" is the time backward spends rebuilding what the
 * forward dropped (tape_drop, timed per call); "engine" is backward time outside any node
 * and recompute. The 12 slowest backward nodes follow, each with its output (and weight)
 * shape and its own distance to the limit. The limit is the FLOPs at the rate the CPU
 * backend's gemm (OpenBLAS, one panel a thread) reaches here on a 1024^3 product (the best of
 * RATE_REPS, measured right before and right after the profiled step; the higher of the two):
 * "x limit" = time / (FLOPs / that rate).
 * Memory: parameters, their gradients, AdamW's two moments, EMA, the step arena's peak
 * (activations, their gradients, the loss's tensors; data and host halves), at the loss the op
 * outputs kept by family and by op and those dropped by family, and peak RSS, with what those
 * leave unexplained (libraries, scratch, allocator). Prints only, never fails. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>

#include "kernels/base.h"
#include "kernels/cpu/blas.h"
#include "tests/bench_stats.h"
#include "trainer/nn/cdn.h"
#include "trainer/nn/loss.h"
#include "trainer/nn/rtdetr.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/clip.h"
#include "trainer/optim/ema.h"
#include "trainer/rng.h"

#define STEPS 3
#define BATCH 2
#define SIZE 320
#define THREADS 2
// Timed sgemm products for the limit, best of (~10 ms each): 5 read 107 GFLOP/s in a run
// whose steps went at ~180 (one slow moment of the machine was the best of the five).
#define RATE_REPS 30

// ---- families ----
enum { F_CONV, F_GEMM, F_DEFORM, F_NORM, F_ELEM, F_LOSS, F_OPTIM, F_N };
static const char *const family_name[F_N] = {"conv", "GEMM", "deformable attn", "norms",
                                             "elementwise+rest", "loss/matcher", "optimizer"};

static int family_of_op(const char *op) {
    if (!strcmp(op, "conv2d")) return F_CONV;
    if (!strcmp(op, "linear") || !strcmp(op, "matmul") || !strcmp(op, "bmm") ||
        !strcmp(op, "mha_core"))
        return F_GEMM;
    if (!strcmp(op, "msdeform_attn") || !strcmp(op, "grid_sample")) return F_DEFORM;
    if (!strcmp(op, "layernorm") || !strcmp(op, "batchnorm2d")) return F_NORM;
    return F_ELEM;
}

// Forward FLOPs of one node (0 for the families that count none).
static double node_flops(const Node *n) {
    const char *op = n->info->name;
    const Tensor *y = n->out[0];
    if (!strcmp(op, "conv2d")) return 2.0 * (double)y->n * (double)(n->in[1]->n / n->in[1]->shape[0]);
    if (!strcmp(op, "linear")) return 2.0 * (double)y->n * (double)n->in[2]->shape[1];
    if (!strcmp(op, "matmul")) return 2.0 * (double)y->n * (double)n->in[0]->shape[1];
    if (!strcmp(op, "bmm")) return 2.0 * (double)y->n * (double)n->in[0]->shape[2];
    if (!strcmp(op, "mha_core")) { // query (B,Lq,E), key (B,Lk,E): in-projections + QK^T + AV
        double B = (double)n->in[0]->shape[0], Lq = (double)n->in[0]->shape[1];
        double Lk = (double)n->in[1]->shape[1], E = (double)n->in[0]->shape[2];
        return 2.0 * E * E * B * (Lq + 2.0 * Lk) + 2.0 * 2.0 * B * Lq * Lk * E;
    }
    if (!strcmp(op, "msdeform_attn")) // value (B,N,NH,D); weights (B,Lq,NH,L,P): one per sample
        return 10.0 * (double)n->in[2]->n * (double)n->in[0]->shape[3];
    if (!strcmp(op, "grid_sample")) return 10.0 * (double)y->n;
    if (!strcmp(op, "layernorm") || !strcmp(op, "batchnorm2d")) return 7.0 * (double)y->n;
    return 0.0;
}

// ---- backward time per node: each node's OpInfo is swapped for a timing wrapper ----
typedef struct TimedInfo {
    OpInfo wrap; // first member: n->info points here while timed
    const OpInfo *orig;
    int family;
    double secs; // backward time of this op in this family
} TimedInfo;
static double bwd_secs[F_N];
static TimedInfo infos[128];
static int n_infos;
// Every node's backward time in the profiled step, for the list of the slowest.
#define MAX_TIMED 16384
static struct {
    const Node *n;
    double secs;
} timed[MAX_TIMED];
static int n_timed;

// Bytes of the outputs held at the loss, by op name (the last step's).
static const char *kept_op[64];
static double kept_bytes[64];
static int n_kept;

static void note_kept(const char *op, double bytes) {
    int j = 0;
    while (j < n_kept && strcmp(kept_op[j], op)) j++;
    if (j == 64) return;
    if (j == n_kept) kept_op[n_kept] = op, kept_bytes[n_kept++] = 0;
    kept_bytes[j] += bytes;
}

// Recomputations of dropped outputs (tape_drop), timed apart from the backward.
static double recompute_secs;
static void timed_recompute(Tape *t, Node *n) {
    TimedInfo *ti = (TimedInfo *)n->info;
    n->info = ti->orig;
    double t0 = bench_now();
    ti->orig->recompute(t, n);
    recompute_secs += bench_now() - t0;
    n->info = &ti->wrap;
}

static void timed_backward(Tape *t, Node *n) {
    TimedInfo *ti = (TimedInfo *)n->info;
    n->info = ti->orig;
    double t0 = bench_now();
    ti->orig->backward(t, n);
    double dt = bench_now() - t0;
    bwd_secs[ti->family] += dt;
    ti->secs += dt;
    if (n_timed < MAX_TIMED) timed[n_timed].n = n, timed[n_timed++].secs = dt;
    n->info = &ti->wrap;
}

// ---- forward time per node, sampled: a SIGPROF tick notes how many nodes the tape holds;
// the op running is the one that records the next node ----
#define MAX_TICKS 65536
static Tape *sampled;
static int64_t ticks[MAX_TICKS];
static volatile sig_atomic_t n_ticks;

static void on_tick(int sig) {
    (void)sig;
    if (sampled && n_ticks < MAX_TICKS) ticks[n_ticks++] = sampled->n_nodes;
}

static void sampling(Tape *t) {
    struct itimerval on = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    if (t) {
        n_ticks = 0;
        struct sigaction sa = {.sa_handler = on_tick, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGPROF, &sa, NULL);
    }
    sampled = t;
    setitimer(ITIMER_PROF, t ? &on : &off, NULL);
}

typedef struct Bench {
    Rtdetr m;
    Tape t;
    Arena arena;
    Optimizer opt;
    Ema ema;
    float *images; // BATCH x 3 x SIZE x SIZE, host
    Targets tg;
    int64_t step;
} Bench;

typedef struct StepTimes {
    double fwd, loss, bwd, optim; // loss: 0 unless profiled (then fwd excludes it)
    int64_t n_fwd_nodes;          // nodes of the model's forward; the loss's follow
    size_t arena_at_loss;         // the step arena's data half once the loss is computed
    double out_bytes[F_N];        // then: bytes of the recorded outputs that own their data
                                  // and hold it at the loss
    double dropped_bytes[F_N];    // and of those dropped in the forward (tape_drop)
} StepTimes;

static StepTimes run_step(Bench *b, bool profile) {
    Tape *t = &b->t;
    tape_reset(t);
    t->training = true;
    t->grad_enabled = true;
    Tensor *img = tensor_4d(t->arena, BATCH, 3, SIZE, SIZE);
    tensor_write(img, b->images);
    StepTimes st = {0};
    const DecoderArgs *a = &b->m.head->a;
    CdnHook h = {.cfg = {.num_dn = a->nd,
                         .cls_noise_ratio = (float)a->label_noise_ratio,
                         .box_noise_scale = (float)a->box_noise_scale},
                 .tg = &b->tg,
                 .seed = 1000 + (uint64_t)b->step++};
    RtdetrDnHook hook = cdn_hook(&h);
    RtdetrOutput o;
    if (profile) sampling(t);
    double t0 = bench_now();
    rtdetr_forward(&b->m, t, img, &hook, &o);
    double t1 = bench_now();
    st.n_fwd_nodes = t->n_nodes;
    LossConfig cfg = loss_config_default(a->nc);
    Tensor *loss = loss_criterion(t, &cfg, &o, h.active ? &h.group : NULL, &b->tg, NULL, NULL);
    double t2 = bench_now();
    st.arena_at_loss = t->arena->data.used;
    n_kept = 0;
    for (int64_t i = 0; i < t->n_nodes; i++) {
        const Node *n = t->nodes[i];
        int fam = i >= st.n_fwd_nodes ? F_LOSS : family_of_op(n->info->name);
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k]->owns_data && !n->out[k]->dropped && fam != F_LOSS)
                note_kept(n->info->name, 4.0 * (double)n->out[k]->n);
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k]->owns_data)
                *(n->out[k]->dropped ? &st.dropped_bytes[fam] : &st.out_bytes[fam]) +=
                    4.0 * (double)n->out[k]->n;
    }
    if (profile) sampling(NULL);
    st.fwd = t1 - t0;
    st.loss = t2 - t1;
    if (profile) {
        n_infos = 0;
        for (int64_t i = 0; i < t->n_nodes; i++) {
            Node *n = t->nodes[i];
            int fam = i >= st.n_fwd_nodes ? F_LOSS : family_of_op(n->info->name);
            int k = 0;
            while (k < n_infos && (infos[k].orig != n->info || infos[k].family != fam)) k++;
            if (k == n_infos) {
                CHECK(n_infos < 128, "more than 128 op kinds");
                infos[n_infos] = (TimedInfo){*n->info, n->info, fam, 0};
                infos[n_infos].wrap.backward = timed_backward;
                if (n->info->recompute) infos[n_infos].wrap.recompute = timed_recompute;
                n_infos++;
            }
            n->info = &infos[k].wrap;
        }
    }
    double t3 = bench_now();
    CHECK(tape_backward(t, loss, NULL) == 0, "backward failed");
    double t4 = bench_now();
    clip_grad_norm(b->m.reg.params, b->m.reg.n_params, 10.0);
    optim_step(&b->opt);
    optim_zero_grad(&b->opt, true);
    ema_update(&b->ema, &b->m.reg);
    st.bwd = t4 - t3;
    st.optim = bench_now() - t4;
    return st;
}

static double gemm_rate(KernelCtx *kc, const Backend *be) {
    const int64_t n = 1024;
    float *a = xmalloc(sizeof(float) * (size_t)(n * n)), *b = xmalloc(sizeof(float) * (size_t)(n * n));
    float *c = xmalloc(sizeof(float) * (size_t)(n * n));
    for (int64_t i = 0; i < n * n; i++) a[i] = b[i] = (float)(i % 17) * 0.01f;
    double best = 1e30;
    for (int r = 0; r < 1 + RATE_REPS; r++) {
        double t0 = bench_now();
        be->gemm(kc, false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = bench_now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * (double)(n * n * n) / best;
}

static double mb(double bytes) { return bytes / 1048576.0; }

int main(void) {
    char err[512];
    static Bench b;
    CHECK(rtdetr_init(&b.m, "rtdetr-l", 0, 0, err, sizeof err) == 0, "%s", err);
    const Backend *be = backend_need(DEV_CPU);
    be->set_threads(THREADS);
    arena_init(&b.arena, DEV_CPU, 0);
    tape_init(&b.t, &b.arena, THREADS);
    b.t.release_activations = true; // as the training loop
    b.images = xmalloc(sizeof(float) * BATCH * 3 * SIZE * SIZE);
    Rng r;
    rng_init(&r, 1);
    for (int64_t i = 0; i < (int64_t)BATCH * 3 * SIZE * SIZE; i++) b.images[i] = rng_uniform(&r);
    // 3 boxes in image 0, 5 in image 1 (denoising: 2 x 20 groups x 5 = 200 queries)
    static int cls[8], counts[BATCH] = {3, 5};
    static float boxes[8 * 4];
    for (int i = 0; i < 8; i++) {
        cls[i] = (i * 7) % b.m.head->a.nc;
        float v[4] = {0.2f + 0.08f * (float)i, 0.7f - 0.06f * (float)i, 0.1f + 0.02f * (float)i,
                      0.15f + 0.01f * (float)i};
        memcpy(boxes + 4 * i, v, sizeof v);
    }
    b.tg = (Targets){.n_images = BATCH, .n_boxes = 8, .cls = cls, .bboxes = boxes, .counts = counts};
    optim_init(&b.opt, OPTIM_ADAMW, b.m.reg.params, b.m.reg.names, b.m.reg.n_params, 1.19e-4, 0.9,
               5e-4 * BATCH / 64.0);
    ema_init(&b.ema, &b.m.reg);

    FILE *lf = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (lf) {
        if (fgets(load, sizeof load, lf)) load[strcspn(load, "\n")] = 0;
        fclose(lf);
    }
    printf("rtdetr-l full step (forward, cdn, loss and matcher, backward, clip, AdamW, EMA; no "
           "batch load): %d px, batch %d, %d threads; load %s\n", SIZE, BATCH, THREADS, load);

    run_step(&b, false);
    double step[STEPS];
    for (int i = 0; i < STEPS; i++) {
        StepTimes st = run_step(&b, false);
        step[i] = st.fwd + st.loss + st.bwd + st.optim;
        printf("  step %d: %.3f s (forward+loss %.3f, backward %.3f, optimizer %.3f)\n", i, step[i],
               st.fwd + st.loss, st.bwd, st.optim);
        fflush(stdout);
    }
    qsort(step, STEPS, sizeof(double), bench_by_double);
    printf("median step %.3f s\n", step[STEPS / 2]);

    // The limit is measured right before and after the profiled step; the higher rate counts.
    double rate_before = gemm_rate(&b.t.kc, be);
    memset(bwd_secs, 0, sizeof bwd_secs);
    recompute_secs = 0;
    n_timed = 0;
    StepTimes st = run_step(&b, true);
    double rate_after = gemm_rate(&b.t.kc, be), rate = MAX(rate_before, rate_after);
    const char *core = blas_core();
    printf("\nlimit: sgemm 1024^3 at %.1f GFLOP/s (OpenBLAS core %s, 2 threads; best of %d "
           "products before the profiled step, %.1f after)\n", rate_before * 1e-9,
           core ? core : "(its own choice)", RATE_REPS, rate_after * 1e-9);
    double total = st.fwd + st.loss + st.bwd + st.optim;
    double fwd[F_N] = {0}, flops[F_N] = {0};
    int64_t fwd_ticks = 0;
    for (int i = 0; i < n_ticks; i++) fwd_ticks += ticks[i] < st.n_fwd_nodes;
    for (int i = 0; i < n_ticks; i++)
        if (ticks[i] < st.n_fwd_nodes)
            fwd[family_of_op(b.t.nodes[ticks[i]]->info->name)] += st.fwd / (double)fwd_ticks;
    fwd[F_LOSS] = st.loss;
    for (int64_t i = 0; i < st.n_fwd_nodes; i++) {
        Node *n = b.t.nodes[i];
        flops[family_of_op(n->info->name)] += 3.0 * node_flops(n); // forward + 2 x backward
    }
    double bwd_ops = 0, all_flops = 0;
    for (int f = 0; f < F_N; f++) bwd_ops += bwd_secs[f], all_flops += flops[f];
    printf("\nprofiled step %.3f s (forward %.3f, loss %.3f, backward %.3f, optimizer %.3f; %d "
           "forward samples)\n", total, st.fwd, st.loss, st.bwd, st.optim, (int)fwd_ticks);
    printf("  %-17s %8s %8s %8s %6s %8s %8s %8s\n", "family", "forward", "backward", "total", "share",
           "GFLOP", "GFLOP/s", "x limit");
    for (int f = 0; f < F_N; f++) {
        double secs = f == F_OPTIM ? st.optim : fwd[f] + bwd_secs[f];
        printf("  %-17s %7.3fs %7.3fs %7.3fs %5.1f%%", family_name[f], f == F_OPTIM ? 0.0 : fwd[f],
               bwd_secs[f], secs, 100.0 * secs / total);
        if (flops[f] > 0)
            printf(" %8.1f %8.1f %8.1f\n", flops[f] * 1e-9, flops[f] / secs * 1e-9,
                   secs / (flops[f] / rate));
        else
            printf(" %8s %8s %8s\n", "-", "-", "-");
    }
    printf("  %-17s %8s %7.3fs %7.3fs %5.1f%%  (of the dropped activations)\n", "recompute", "",
           recompute_secs, recompute_secs, 100.0 * recompute_secs / total);
    double engine = st.bwd - bwd_ops - recompute_secs;
    printf("  %-17s %8s %7.3fs %7.3fs %5.1f%%\n", "autograd engine", "", engine, engine,
           100.0 * engine / total);
    // the elementwise family's largest backward ops (a name can appear in several families)
    printf("  elementwise+rest, backward by op:");
    for (int shown = 0; shown < 8; shown++) {
        int best = -1;
        for (int k = 0; k < n_infos; k++)
            if (infos[k].family == F_ELEM && infos[k].secs > 0 &&
                (best < 0 || infos[k].secs > infos[best].secs))
                best = k;
        if (best < 0) break;
        printf(" %s %.3fs", infos[best].wrap.name, infos[best].secs);
        infos[best].secs = -infos[best].secs; // shown
    }
    printf("\n");
    // the slowest single backward nodes, each against the limit for its FLOPs (2 x forward)
    printf("  slowest backward nodes (op, output shape[,w weight shape], time, x limit):\n");
    for (int shown = 0; shown < 12; shown++) {
        int best = -1;
        for (int k = 0; k < n_timed; k++)
            if (timed[k].secs > 0 && (best < 0 || timed[k].secs > timed[best].secs)) best = k;
        if (best < 0) break;
        const Node *n = timed[best].n;
        char shape[96] = "";
        for (int d = 0; d < n->out[0]->ndim; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? "x" : "",
                     (long long)n->out[0]->shape[d]);
        bool conv = !strcmp(n->info->name, "conv2d"), linear = !strcmp(n->info->name, "linear");
        if (conv || linear) { // the weight: conv2d's input 1, linear's input 2
            const Tensor *w = n->in[conv ? 1 : 2];
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), ",w");
            for (int d = 0; d < w->ndim; d++)
                snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld",
                         d ? "x" : "", (long long)w->shape[d]);
        }
        double f = 2.0 * node_flops(n);
        printf("    %-14s %-30s %.4fs", n->info->name, shape, timed[best].secs);
        if (f > 0) printf(" %5.1f", timed[best].secs / (f / rate));
        printf("\n");
        timed[best].secs = -timed[best].secs; // shown
    }
    printf("  all: %.1f GFLOP, %.1f GFLOP/s; at the sgemm rate the step would take %.3f s (%.1fx "
           "of it)\n", all_flops * 1e-9, all_flops / total * 1e-9, all_flops / rate,
           total / (all_flops / rate));

    int64_t P = 0;
    for (int i = 0; i < b.m.reg.n_params; i++) P += b.m.reg.params[i]->n;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss * 1024.0;
    double params_arena = (double)(b.m.params.data.reserved + b.m.params.host.reserved);
    double adam = 8.0 * (double)b.opt.numel;
    double ema = 4.0 * (double)(b.ema.n_param_floats + b.ema.n_buffer_floats);
    double step_data = (double)b.arena.data.peak, step_host = (double)b.arena.host.peak;
    printf("\nmemory (MB): %lld parameters\n", (long long)P);
    printf("  parameters %.0f + their gradients %.0f (model arena %.0f, BatchNorm buffers "
           "included)\n", mb(4.0 * (double)P), mb(4.0 * (double)P), mb(params_arena));
    printf("  AdamW moments %.0f, EMA %.0f\n", mb(adam), mb(ema));
    printf("  step arena at its peak: data %.0f (activations, their gradients, loss tensors), "
           "host %.0f (headers, nodes); reserved %.0f\n", mb(step_data), mb(step_host),
           mb((double)(b.arena.data.reserved + b.arena.host.reserved)));
    double outs = 0;
    for (int f = 0; f < F_N; f++) outs += st.out_bytes[f];
    printf("    at the loss (what backward reads): %.0f, of it op outputs %.0f:", mb((double)st.arena_at_loss),
           mb(outs));
    for (int f = 0; f < F_N; f++)
        if (st.out_bytes[f] > 0) printf(" %s %.0f", family_name[f], mb(st.out_bytes[f]));
    printf("; the rest %.0f (saved contexts: attention weights, masks, indices; blocks "
           "dropped and not yet reused)\n", mb((double)st.arena_at_loss - outs));
    // the largest kept outputs by op (what a further drop could target)
    printf("      kept by op:");
    for (int shown = 0; shown < 10; shown++) {
        int best = -1;
        for (int j = 0; j < n_kept; j++)
            if (kept_bytes[j] > 0 && (best < 0 || kept_bytes[j] > kept_bytes[best])) best = j;
        if (best < 0) break;
        printf(" %s %.0f", kept_op[best], mb(kept_bytes[best]));
        kept_bytes[best] = -1;
    }
    printf("\n");
    double dropped = 0;
    for (int f = 0; f < F_N; f++) dropped += st.dropped_bytes[f];
    printf("    dropped in the forward, recomputed in backward (tape_drop): %.0f:", mb(dropped));
    for (int f = 0; f < F_N; f++)
        if (st.dropped_bytes[f] > 0) printf(" %s %.0f", family_name[f], mb(st.dropped_bytes[f]));
    printf("\n");
    printf("    added by backward: %.0f (gradients and temporaries no released buffer could take)\n",
           mb(step_data - (double)st.arena_at_loss));
    printf("  DDP buckets: none (one process)\n");
    printf("  peak RSS %.0f; not in the above %.0f (libraries, im2col scratch, the allocator)\n",
           mb(rss), mb(rss - params_arena - adam - ema - step_data - step_host));

    ema_free(&b.ema);
    optim_free(&b.opt);
    tape_free(&b.t);
    arena_free(&b.arena);
    rtdetr_free(&b.m);
    free(b.images);
    return 0;
}
