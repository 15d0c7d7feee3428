/* bench_model.c -- one rtdetr-l training step (forward + backward) at 320 px, batch 2, on 1 and
 * 2 threads: median of 5 steps after one warm-up (arena reset between steps), and peak RSS.
 * Then where one more step's time goes: forward per module type, forward per op (sampled) and
 * backward per op (each node's backward wrapped in a timer). The step has 200 denoising
 * queries and a weighted-sum stand-in for the loss. Last, rtdetr-l's 640-px forward output
 * shapes. Prints timings only, never fails on them. PyTorch's figures come from the same run
 * only: bench_torch.c. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>

#include "kernels/base.h"
#include "trainer/nn/rtdetr.h"

#define STEPS 5
#define BATCH 2
#define SIZE 320
#define DN_GT 5      // max boxes per image of the stand-in denoising group
#define DN_GROUPS 20 // get_cdn_group: G = num_dn 100 / max_gt; Ndn = 2 * G * max_gt = 200

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double peak_rss_mb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_maxrss / 1024.0; // KiB on Linux
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// ---- backward time per op: each node's OpInfo is swapped for a timing wrapper ----
#define MAX_OPS 64
typedef struct OpStat {
    OpInfo wrap; // what the node points to while timed; first member (see below)
    const OpInfo *orig;
    double secs;
    int64_t calls;
} OpStat;
static OpStat ops[MAX_OPS];
static int n_ops;

static void timed_backward(Tape *t, Node *n) {
    OpStat *s = (OpStat *)n->info; // wrap is the first member
    n->info = s->orig;
    double t0 = now();
    s->orig->backward(t, n);
    s->secs += now() - t0;
    s->calls++;
    n->info = &s->wrap;
}

static void wrap_nodes(Tape *t) {
    for (int64_t i = 0; i < t->n_nodes; i++) {
        Node *n = t->nodes[i];
        int k = 0;
        while (k < n_ops && ops[k].orig != n->info)
            k++;
        if (k == n_ops) {
            CHECK(n_ops < MAX_OPS, "more than %d op kinds", MAX_OPS);
            ops[n_ops] = (OpStat){*n->info, n->info, 0, 0};
            ops[n_ops++].wrap.backward = timed_backward;
        }
        n->info = &ops[k].wrap;
    }
}

// ---- forward time per op, sampled: at each SIGPROF (asked for every 1 ms of CPU time, all
// threads; the kernel delivers it at its tick, often every 4 ms) the handler notes how many
// nodes the tape holds. An op records its node after computing, so the tick belongs to the op
// of the next node (work that records nothing counts for the next op that does). ----
#define MAX_TICKS 65536
static Tape *sampled_tape;
static int64_t ticks[MAX_TICKS];
static volatile sig_atomic_t n_ticks;

static void on_tick(int sig) {
    (void)sig;
    if (sampled_tape && n_ticks < MAX_TICKS) ticks[n_ticks++] = sampled_tape->n_nodes;
}

static void sampling(Tape *t) {
    struct itimerval it = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    if (t) {
        n_ticks = 0;
        struct sigaction sa = {.sa_handler = on_tick, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGPROF, &sa, NULL);
    }
    sampled_tape = t;
    setitimer(ITIMER_PROF, t ? &it : &off, NULL);
}

// Per op name: its share of the ticks times the forward's wall time, largest first.
static void print_forward_ops(const Tape *t, double fwd_total) {
    const char *name[MAX_OPS];
    int64_t count[MAX_OPS] = {0};
    int n = 0;
    for (int i = 0; i < n_ticks; i++) {
        const char *op = ticks[i] < t->n_nodes ? t->nodes[ticks[i]]->info->name : "(no node)";
        int k = 0;
        while (k < n && strcmp(name[k], op) != 0)
            k++;
        if (k == n && n == MAX_OPS) continue;
        if (k == n) name[n++] = op;
        count[k]++;
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (count[j] > count[i]) {
                int64_t c = count[i];
                count[i] = count[j];
                count[j] = c;
                const char *nm = name[i];
                name[i] = name[j];
                name[j] = nm;
            }
    printf("  forward by op (one step, %d CPU-time samples)\n", (int)n_ticks);
    for (int i = 0; i < n; i++)
        if (count[i] * 200 >= n_ticks) // >= 0.5%
            printf("    %-18s %7.3f s %5.1f%%\n", name[i], fwd_total * count[i] / n_ticks,
                   100.0 * count[i] / n_ticks);
}

// ---- forward time per module type: rtdetr_forward_observed, timed between layers ----
static double fwd_secs[MOD_RTDETRDECODER + 1];

typedef struct LayerClock {
    const Rtdetr *m;
    double last; // when the previous layer finished (or the forward started)
} LayerClock;

static void layer_done(void *user, int layer) {
    LayerClock *c = user;
    double t = now();
    fwd_secs[c->m->spec.layers[layer].kind] += t - c->last;
    c->last = t;
}

static void timed_forward(Rtdetr *m, Tape *t, Tensor *x, const RtdetrDnHook *dn,
                          RtdetrOutput *out) {
    LayerClock clock = {m, now()};
    rtdetr_forward_observed(m, t, x, dn, out, layer_done, &clock);
}

// ---- a get_cdn_group-shaped denoising input: G groups of max_gt positives + negatives ----
static bool dn_hook(void *user, Tape *t, Tensor *class_embed, int nc, int nq, RtdetrDn *out) {
    int64_t ndn = 2 * DN_GROUPS * DN_GT, hd = class_embed->shape[1], tgt = ndn + nq;
    int64_t *cls = tape_alloc(t, sizeof(int64_t) * (size_t)(BATCH * ndn));
    for (int64_t i = 0; i < BATCH * ndn; i++)
        cls[i] = (i * 7) % nc;
    out->embed = op_reshape(t, op_embedding(t, class_embed, cls, BATCH * ndn), 3,
                            (int64_t[]){BATCH, ndn, hd});
    out->bbox_logits = tensor_new(t->arena, 3, (int64_t[]){BATCH, ndn, 4});
    for (int64_t i = 0; i < out->bbox_logits->n; i++)
        out->bbox_logits->data[i] = (float)(i % 7) * 0.2f - 0.6f;
    uint8_t *mask = tape_alloc(t, (size_t)(tgt * tgt));
    int64_t group = 2 * DN_GT;
    for (int64_t r = 0; r < tgt; r++)
        for (int64_t c = 0; c < tgt; c++)
            mask[r * tgt + c] = c < ndn && (r >= ndn || r / group != c / group);
    out->attn_mask = mask;
    return true;
}

static Tensor *weighted_sum(Tape *t, Tensor *x) {
    Tensor *w = tensor_like(t->arena, x);
    for (int64_t i = 0; i < w->n; i++)
        w->data[i] = (float)((i * 2654435761u) % 2001) * 1e-5f - 0.01f;
    return op_sum(t, op_mul(t, x, w));
}

typedef struct StepTimes {
    double fwd, bwd;
} StepTimes;

static StepTimes step(Rtdetr *m, Tape *t, Tensor *x, bool profile) {
    tape_reset(t);
    for (int i = 0; i < m->reg.n_params; i++)
        m->reg.params[i]->grad_defined = false;
    Tensor *img = tensor_new(t->arena, 4, x->shape);
    memcpy(img->data, x->data, sizeof(float) * (size_t)x->n);
    RtdetrDnHook dn = {dn_hook, NULL};
    RtdetrOutput o;
    double t0 = now();
    if (profile) {
        sampling(t);
        timed_forward(m, t, img, &dn, &o);
        sampling(NULL);
    } else {
        rtdetr_forward(m, t, img, &dn, &o);
    }
    Tensor *loss = op_add(t, weighted_sum(t, o.dec_bboxes), weighted_sum(t, o.dec_scores));
    loss = op_add(t, loss, weighted_sum(t, o.enc_bboxes));
    loss = op_add(t, loss, weighted_sum(t, o.enc_scores));
    double t1 = now();
    if (profile) wrap_nodes(t);
    CHECK(tape_backward(t, loss, NULL) == 0, "backward failed");
    return (StepTimes){t1 - t0, now() - t1};
}

static void print_profile(const Tape *t, double fwd_total, double bwd_total) {
    printf("  forward by module type (one step)\n");
    for (int k = 0; k <= MOD_RTDETRDECODER; k++)
        if (fwd_secs[k] > 0)
            printf("    %-14s %7.3f s %5.1f%%\n", module_kind_name((ModuleKind)k), fwd_secs[k],
                   100 * fwd_secs[k] / fwd_total);
    print_forward_ops(t, fwd_total);
    // sort ops by time, largest first
    for (int i = 0; i < n_ops; i++)
        for (int j = i + 1; j < n_ops; j++)
            if (ops[j].secs > ops[i].secs) {
                OpStat tmp = ops[i];
                ops[i] = ops[j];
                ops[j] = tmp;
            }
    printf("  backward by op (one step; the rest is the engine)\n");
    for (int i = 0; i < n_ops; i++)
        if (ops[i].secs >= 0.0005)
            printf("    %-18s %6lld calls %7.3f s %5.1f%%\n", ops[i].wrap.name,
                   (long long)ops[i].calls, ops[i].secs, 100 * ops[i].secs / bwd_total);
}

int main(void) {
    char err[512];
    Rtdetr m;
    CHECK(rtdetr_init(&m, "rtdetr-l.yaml", 0, 0, err, sizeof err) == 0, "%s", err);
    const Backend *be = backend_need(DEV_CPU);
    Arena arena;
    arena_init(&arena, DEV_CPU, 0);
    Arena inputs;
    arena_init(&inputs, DEV_CPU, 0);
    Tensor *x = tensor_new(&inputs, 4, (int64_t[]){BATCH, 3, SIZE, SIZE});
    Rng r;
    rng_init(&r, 1);
    for (int64_t i = 0; i < x->n; i++)
        x->data[i] = rng_uniform(&r);

    printf("rtdetr-l training step: %dx%d, batch %d, %d denoising queries, median of %d after "
           "1 warm-up\n",
           SIZE, SIZE, BATCH, 2 * DN_GROUPS * DN_GT, STEPS);
    printf("(PyTorch side by side, full training steps: make bench BENCH=torch)\n\n");
    printf("threads  forward  backward   step    step arena  peak RSS\n");
    for (int threads = 1; threads <= 2; threads++) {
        be->set_threads(threads);
        Tape t;
        tape_init(&t, &arena, threads);
        step(&m, &t, x, false);
        double f[STEPS], b[STEPS], s[STEPS];
        for (int i = 0; i < STEPS; i++) {
            StepTimes st = step(&m, &t, x, false);
            f[i] = st.fwd;
            b[i] = st.bwd;
            s[i] = st.fwd + st.bwd;
        }
        qsort(f, STEPS, sizeof(double), by_double);
        qsort(b, STEPS, sizeof(double), by_double);
        qsort(s, STEPS, sizeof(double), by_double);
        printf("%7d  %6.2f s  %6.2f s  %6.2f s  %7.0f MB  %6.0f MB\n", threads, f[STEPS / 2],
               b[STEPS / 2], s[STEPS / 2], (double)arena.data.peak / 1048576.0, peak_rss_mb());
        fflush(stdout);

        memset(fwd_secs, 0, sizeof fwd_secs);
        n_ops = 0;
        StepTimes st = step(&m, &t, x, true);
        printf("  profiled step: forward %.2f s, backward %.2f s\n", st.fwd, st.bwd);
        print_profile(&t, st.fwd, st.bwd);
        printf("\n");
        tape_free(&t);
    }

    // 640 px forward (training mode, no grad), the size Ultralytics trains at.
    be->set_threads(2);
    Tape t;
    tape_init(&t, &arena, 2);
    t.grad_enabled = false;
    Tensor *x640 = tensor_new(&inputs, 4, (int64_t[]){1, 3, 640, 640});
    for (int64_t i = 0; i < x640->n; i++)
        x640->data[i] = rng_uniform(&r);
    RtdetrOutput o;
    double t0 = now();
    rtdetr_forward(&m, &t, x640, NULL, &o);
    char s1[64], s2[64], s3[64], s4[64];
    printf("rtdetr-l 640x640 forward, batch 1, 2 threads, no grad: %.2f s; dec_bboxes %s, "
           "dec_scores %s, enc_bboxes %s, enc_scores %s (expected 6x1x300x4, 6x1x300x80, "
           "1x300x4, 1x300x80)\n",
           now() - t0, tensor_shape_str(o.dec_bboxes, s1, 64),
           tensor_shape_str(o.dec_scores, s2, 64), tensor_shape_str(o.enc_bboxes, s3, 64),
           tensor_shape_str(o.enc_scores, s4, 64));
    tape_free(&t);
    arena_free(&arena);
    arena_free(&inputs);
    rtdetr_free(&m);
    return 0;
}
