/* test_optim.c -- the optimizer side of training against PyTorch and Ultralytics:
 * - Ultralytics' parameter groups over the four models' listings (tests/golden/params/),
 *   including rtdetr-l's 226 bias / 206 decay / 143 norm that Ultralytics logs;
 * - optimizer=auto, the LambdaLR schedule, the warmup and accumulation against values computed
 *   by the Python expressions Ultralytics evaluates (printed with repr, so exact);
 * - AdamW, SGD (nesterov), clip_grad_norm_ and ModelEMA against torch 1.13 float32 runs
 *   (tests/golden/optim.bin, made by tests/golden/make_optim.py).
 * Tolerances: AdamW, SGD and EMA must match bit for bit (atol 0, rtol 0); clip_grad_norm_'s
 * total norm and clipped grads rtol 1e-6 (torch reduces in float32 in its own order).
 * - The host loops on 2 and 3 threads (trainer/optim/host_loop.h) against 1 thread: clip norms,
 *   weights, AdamW/SGD state and EMA bit for bit. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/base.h"
#include "tests/expect.h"
#include "tests/golden.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/clip.h"
#include "trainer/optim/ema.h"
#include "trainer/optim/schedule.h"

#define N_TOY 3 // the toy parameters of optim.bin: p0 (37), p1 (5,7), p2 (16)
static const int64_t toy_numel[N_TOY] = {37, 35, 16};

// ---- groups over the model listings ----
static void check_listing(const char *model, int want_bias, int want_decay, int want_norm) {
    char path[256];
    snprintf(path, sizeof path, "tests/golden/params/%s.params.txt", model);
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL, "cannot read %s (run from the repository root)", path);
    if (!f) return;
    int count[OPTIM_N_GROUPS] = {0};
    char line[512], name[400], shape[64];
    int idx;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%d %399s %63s", &idx, name, shape) != 3) continue; // the "total" line
        OptimGroupId g = optim_group_of(name);
        count[g]++;
        // independent of names: only a norm's weight is 1-D, and a norm's weight is 1-D
        bool one_d = strchr(shape, 'x') == NULL;
        if (g == OPTIM_GROUP_NORM) EXPECT(one_d, "%s: norm weight %s %s is not 1-D", model, name, shape);
        if (g == OPTIM_GROUP_DECAY) EXPECT(!one_d, "%s: decayed %s %s is 1-D", model, name, shape);
    }
    fclose(f);
    EXPECT(count[OPTIM_GROUP_BIAS] == want_bias, "%s: %d biases, want %d", model,
           count[OPTIM_GROUP_BIAS], want_bias);
    EXPECT(count[OPTIM_GROUP_DECAY] == want_decay, "%s: %d decay, want %d", model,
           count[OPTIM_GROUP_DECAY], want_decay);
    EXPECT(count[OPTIM_GROUP_NORM] == want_norm, "%s: %d norm, want %d", model,
           count[OPTIM_GROUP_NORM], want_norm);
}

static void test_groups(void) {
    check_listing("rtdetr-l", 226, 206, 143);
    check_listing("rtdetr-x", 276, 256, 193);
    check_listing("rtdetr-resnet50", 199, 179, 116);
    check_listing("rtdetr-resnet101", 250, 230, 167);
    struct {
        const char *name;
        OptimGroupId want;
    } cases[] = {
        {"model.28.input_proj.0.1.weight", OPTIM_GROUP_NORM},  // BatchNorm2d in a Sequential
        {"model.28.input_proj.0.0.weight", OPTIM_GROUP_DECAY}, // its Conv2d
        {"model.28.enc_output.1.weight", OPTIM_GROUP_NORM},    // LayerNorm
        {"model.28.enc_output.0.weight", OPTIM_GROUP_DECAY},   // Linear
        {"model.28.enc_output.1.bias", OPTIM_GROUP_BIAS},
        {"model.28.decoder.layers.0.self_attn.in_proj_weight", OPTIM_GROUP_DECAY},
        {"model.28.decoder.layers.0.self_attn.in_proj_bias", OPTIM_GROUP_BIAS},
        {"model.28.decoder.layers.5.norm3.weight", OPTIM_GROUP_NORM},
        {"model.10.norm1.weight", OPTIM_GROUP_NORM},
        {"model.28.denoising_class_embed.weight", OPTIM_GROUP_DECAY},
        {"model.0.stem1.bn.weight", OPTIM_GROUP_NORM},
        {"model.3.normal.weight", OPTIM_GROUP_DECAY},   // "norm" plus letters is no norm
        {"model.3.bnx.weight", OPTIM_GROUP_DECAY},
        {"model.3.input_proj.1.weight", OPTIM_GROUP_DECAY}, // no Sequential index before the 1
        {"weight", OPTIM_GROUP_DECAY},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        EXPECT(optim_group_of(cases[i].name) == cases[i].want, "%s: group %d, want %d",
               cases[i].name, optim_group_of(cases[i].name), cases[i].want);
}

// ---- auto choice and schedule (expected values: Python's repr of Ultralytics' expressions) ----
static void test_auto_and_schedule(void) {
    OptimChoice c = optim_auto_choice(10000, 80);
    EXPECT(c.kind == OPTIM_ADAMW && c.lr == 0.000119 && c.momentum == 0.9, "auto(10000, 80): %d %.17g",
           c.kind, c.lr);
    EXPECT(optim_auto_choice(10000, 3).lr == 0.001429, "nc 3: %.17g", optim_auto_choice(10000, 3).lr);
    EXPECT(optim_auto_choice(10000, 1).lr == 0.002, "nc 1");
    c = optim_auto_choice(10001, 80);
    EXPECT(c.kind == OPTIM_SGD && c.lr == 0.01 && c.momentum == 0.9, "auto(10001): SGD 0.01 0.9");
    EXPECT(optim_auto_iterations(118287, 16, 64, 100) == 184900, "COCO iterations %lld",
           (long long)optim_auto_iterations(118287, 16, 64, 100));
    EXPECT(optim_auto_iterations(128, 16, 64, 10) == 20, "tiny iterations");
    OptimKind k;
    EXPECT(optim_parse_kind("AdamW", &k) == 0 && k == OPTIM_ADAMW, "AdamW");
    EXPECT(optim_parse_kind("SGD", &k) == 0 && k == OPTIM_SGD, "SGD");
    EXPECT(optim_parse_kind("adamw", &k) == -1, "names are case-sensitive, as Ultralytics'");

    EXPECT(schedule_lf(0, 100, 0.01) == 1.0, "lf(0)");
    EXPECT(schedule_lf(1, 100, 0.01) == 0.9901, "lf(1) %.17g", schedule_lf(1, 100, 0.01));
    EXPECT(schedule_lf(50, 100, 0.01) == 0.505, "lf(50)");
    EXPECT(schedule_lf(100, 100, 0.01) == 0.01 && schedule_lf(120, 100, 0.01) == 0.01, "lf past the end");

    EXPECT(schedule_warmup_iters(3.0, 10) == 100, "nw at least 100");
    EXPECT(schedule_warmup_iters(3.0, 1000) == 3000, "nw 3000");
    EXPECT(schedule_warmup_iters(2.5, 41) == 102, "round(102.5) is 102 (half to even)");
    EXPECT(schedule_warmup_iters(0.0, 1000) == -1, "no warmup");
    EXPECT(schedule_base_accumulate(64, 16) == 4 && schedule_base_accumulate(64, 24) == 3, "accumulate");
    EXPECT(schedule_base_accumulate(64, 128) == 1 && schedule_base_accumulate(20, 8) == 2, "round(0.5), round(2.5)");
    int want_acc[][2] = {{0, 1}, {17, 2}, {50, 2}, {51, 3}, {83, 3}, {100, 4}};
    for (int i = 0; i < 6; i++)
        EXPECT(schedule_warmup_accumulate(want_acc[i][0], 100, 64, 16) == want_acc[i][1],
               "accumulate at ni %d: %d, want %d", want_acc[i][0],
               schedule_warmup_accumulate(want_acc[i][0], 100, 64, 16), want_acc[i][1]);
    EXPECT(schedule_weight_decay(5e-4, 16, 4, 64) == 0.0005, "decay at batch 16");
    EXPECT(schedule_weight_decay(5e-4, 24, 3, 64) == 0.0005625000000000001, "decay at batch 24");
    EXPECT(schedule_interp(37, 0, 300, 0.1, 0.000119) == 0.08768134333333334, "interp");
    EXPECT(schedule_interp(-1, 0, 300, 0.1, 0.2) == 0.1 && schedule_interp(301, 0, 300, 0.1, 0.2) == 0.2,
           "interp clamps");

    // the warmup and LambdaLR on real optimizers
    float w = 0, b = 0, n = 0;
    Tensor tw = {.data = &w, .n = 1, .dev = DEV_CPU}, tb = tw, tn = tw;
    tb.data = &b;
    tn.data = &n;
    Tensor *params[] = {&tw, &tb, &tn};
    const char *names[] = {"m.conv.weight", "m.conv.bias", "m.bn.weight"};
    ScheduleConfig cfg = {.epochs = 100, .lrf = 0.01, .warmup_epochs = 3, .warmup_bias_lr = 0.1,
                          .warmup_momentum = 0.8, .momentum = 0.937, .nbs = 64, .batch = 16};
    Optimizer sgd, adamw;
    optim_init(&sgd, OPTIM_SGD, params, names, 3, 0.01, 0.9, 5e-4);
    optim_init(&adamw, OPTIM_ADAMW, params, names, 3, 0.01, 0.9, 5e-4);
    EXPECT(optim_group_size(&sgd, OPTIM_GROUP_BIAS) == 1 && optim_group_size(&sgd, OPTIM_GROUP_NORM) == 1,
           "one param per group");
    EXPECT(sgd.groups[OPTIM_GROUP_DECAY].weight_decay == 5e-4 && sgd.groups[OPTIM_GROUP_BIAS].weight_decay == 0 &&
           sgd.groups[OPTIM_GROUP_NORM].weight_decay == 0, "decay only in the decay group");
    int64_t last_epoch = -5;
    schedule_lambda_init(&cfg, &sgd, &last_epoch);
    EXPECT(last_epoch == 0 && sgd.groups[0].lr == 0.01, "LambdaLR construction");
    int acc = 0;
    EXPECT(schedule_warmup(&cfg, &sgd, 50, 100, 0, &acc), "ni 50 is in warmup");
    EXPECT(acc == 2, "accumulate %d", acc);
    EXPECT(sgd.groups[OPTIM_GROUP_BIAS].lr == 0.055, "bias lr %.17g", sgd.groups[OPTIM_GROUP_BIAS].lr);
    EXPECT(sgd.groups[OPTIM_GROUP_DECAY].lr == 0.005 && sgd.groups[OPTIM_GROUP_NORM].lr == 0.005, "lr 0.005");
    EXPECT(sgd.groups[OPTIM_GROUP_DECAY].momentum == 0.8685, "SGD momentum %.17g", sgd.groups[1].momentum);
    acc = 7;
    EXPECT(!schedule_warmup(&cfg, &sgd, 101, 100, 1, &acc) && acc == 7 && sgd.groups[0].lr == 0.055,
           "past warmup nothing changes");
    schedule_warmup(&cfg, &adamw, 50, 100, 0, &acc);
    EXPECT(adamw.groups[OPTIM_GROUP_DECAY].momentum == 0.9, "AdamW betas are not warmed up");
    schedule_lambda_step(&cfg, &sgd, &last_epoch);
    EXPECT(last_epoch == 1 && sgd.groups[1].lr == 0.009901, "LambdaLR step: %.17g", sgd.groups[1].lr);
    optim_free(&sgd);
    optim_free(&adamw);
}

// ---- optimizers against torch ----
typedef struct Toy {
    Arena arena;
    Tensor *p[N_TOY];
} Toy;

static void toy_init(Toy *t, const Golden *g, const char *prefix) {
    arena_init(&t->arena, DEV_CPU, 1 << 16);
    for (int i = 0; i < N_TOY; i++) t->p[i] = golden_leaf(&t->arena, golden_get(g, "%s/p%d/init", prefix, i));
}

// Loads step s's grads (grad_defined false where the file has none).
static void toy_grads(Toy *t, const Golden *g, const char *prefix, int s) {
    for (int i = 0; i < N_TOY; i++) {
        const GoldenArray *ga = golden_find(g, "%s/g%d/%d", prefix, s, i);
        t->p[i]->grad_defined = ga != NULL;
        if (ga) memcpy(t->p[i]->grad, ga->data, sizeof(float) * (size_t)ga->n);
    }
}

static const char *toy_names[N_TOY] = {"p0.weight", "p1.weight", "p2.bias"}; // p2: no decay

// Runs the file's steps of `prefix` and compares every parameter after every step, exactly.
static void run_toy(const Golden *g, const char *prefix, OptimKind kind, Optimizer *o, Toy *t) {
    const GoldenArray *lr = golden_get(g, "%s/lr", prefix);
    const GoldenArray *mom = kind == OPTIM_SGD ? golden_get(g, "%s/momentum", prefix) : NULL;
    double wd = golden_get(g, "%s/wd", prefix)->data[0];
    toy_init(t, g, prefix);
    optim_init(o, kind, t->p, toy_names, N_TOY, lr->data[0], mom ? mom->data[0] : 0.9, wd);
    for (int s = 0; s < lr->n; s++) {
        for (int gi = 0; gi < OPTIM_N_GROUPS; gi++) {
            o->groups[gi].lr = lr->data[s];
            if (mom) o->groups[gi].momentum = mom->data[s];
        }
        toy_grads(t, g, prefix, s);
        optim_step(o);
        for (int i = 0; i < N_TOY; i++) {
            char what[64];
            snprintf(what, sizeof what, "%s p%d after step %d", prefix, i, s);
            EXPECT(golden_compare(what, t->p[i]->data, t->p[i]->n,
                                  golden_get(g, "%s/p%d/after%d", prefix, i, s), 0, 0) == 0,
                   "%s differs from torch", what);
        }
    }
}

static void test_adamw(const Golden *g) {
    Optimizer o;
    Toy t;
    run_toy(g, "adamw", OPTIM_ADAMW, &o, &t);
    for (int i = 0; i < N_TOY; i++) {
        char what[64];
        snprintf(what, sizeof what, "adamw exp_avg %d", i);
        EXPECT(golden_compare(what, o.exp_avg + o.offset[i], t.p[i]->n, golden_get(g, "adamw/exp_avg/%d", i), 0, 0) == 0,
               "%s", what);
        snprintf(what, sizeof what, "adamw exp_avg_sq %d", i);
        EXPECT(golden_compare(what, o.exp_avg_sq + o.offset[i], t.p[i]->n, golden_get(g, "adamw/exp_avg_sq/%d", i), 0,
                              0) == 0, "%s", what);
        double want_step = golden_get(g, "adamw/step/%d", i)->data[0];
        EXPECT(o.step[i] == (int64_t)want_step, "p%d: %lld steps, torch %g", i, (long long)o.step[i], want_step);
    }
    EXPECT(o.step[1] == 4 && o.step[2] == 5, "grad None skips the step count");
    // zero_grad: 1.13 keeps zeros (defined), 2.x sets None
    t.p[0]->grad_defined = true;
    optim_zero_grad(&o, false);
    EXPECT(t.p[0]->grad_defined && t.p[0]->grad[3] == 0.0f, "zero_grad(set_to_none=False)");
    optim_zero_grad(&o, true);
    EXPECT(!t.p[0]->grad_defined, "zero_grad(set_to_none=True)");
    optim_free(&o);
    arena_free(&t.arena);
}

static void test_sgd(const Golden *g) {
    Optimizer o;
    Toy t;
    run_toy(g, "sgd", OPTIM_SGD, &o, &t);
    for (int i = 0; i < N_TOY; i++) {
        char what[64];
        snprintf(what, sizeof what, "sgd momentum_buffer %d", i);
        EXPECT(golden_compare(what, o.momentum_buffer + o.offset[i], t.p[i]->n,
                              golden_get(g, "sgd/momentum_buffer/%d", i), 0, 0) == 0, "%s", what);
    }
    optim_free(&o);
    arena_free(&t.arena);
}

static void test_clip(const Golden *g) {
    const char *cases[] = {"big", "small"};
    for (int c = 0; c < 2; c++) {
        Arena a;
        arena_init(&a, DEV_CPU, 1 << 16);
        Tensor *p[N_TOY];
        for (int i = 0; i < N_TOY; i++) {
            const GoldenArray *ga = golden_find(g, "clip/%s/g%d", cases[c], i);
            p[i] = tensor_leaf(&a, 1, (int64_t[]){toy_numel[i]});
            p[i]->grad_defined = ga != NULL;
            if (ga) memcpy(p[i]->grad, ga->data, sizeof(float) * (size_t)ga->n);
            else for (int64_t j = 0; j < p[i]->n; j++) p[i]->grad[j] = 1e6f; // must be ignored
        }
        float total = clip_grad_norm(p, N_TOY, 10.0);
        EXPECT_NEAR(total, golden_get(g, "clip/%s/total", cases[c])->data[0], 0, 1e-6);
        for (int i = 0; i < N_TOY; i += 2) {
            char what[64];
            snprintf(what, sizeof what, "clip %s g%d", cases[c], i);
            EXPECT(golden_compare(what, p[i]->grad, p[i]->n, golden_get(g, "clip/%s/clipped%d", cases[c], i), 0,
                                  1e-6) == 0, "%s", what);
        }
        EXPECT(p[1]->grad[0] == 1e6f && !p[1]->grad_defined, "a None grad is left alone");
        arena_free(&a);
    }
    EXPECT(clip_grad_norm((Tensor *[]){NULL}, 0, 10.0) == 0.0f, "no parameters: norm 0");
}

static void test_ema(const Golden *g) {
    const char *cases[] = {"fresh", "late"}, *keys[] = {"w0", "w1", "rm"};
    for (int c = 0; c < 2; c++) {
        Arena arena, host;
        Rng rng;
        Registry r;
        arena_init(&arena, DEV_CPU, 1 << 16);
        arena_init(&host, DEV_CPU, 1 << 16);
        rng_init(&rng, 1);
        registry_init(&r, &arena, &host, &rng);
        Tensor *t[3];
        for (int k = 0; k < 3; k++) {
            const GoldenArray *ga = golden_get(g, "ema/%s/init/%s", cases[c], keys[k]);
            t[k] = k < 2 ? registry_param(&r, keys[k], 1, &ga->n) : registry_buffer(&r, keys[k], 1, &ga->n);
            memcpy(t[k]->data, ga->data, sizeof(float) * (size_t)ga->n);
        }
        int64_t counter = 17;
        registry_counter(&r, "num_batches_tracked", &counter);
        Ema e;
        ema_init(&e, &r);
        EXPECT(e.counters[1] == 17, "the counter is copied at creation");
        e.updates = (int64_t)golden_get(g, "ema/%s/updates", cases[c])->data[0];
        for (int u = 0; u < 4; u++) {
            for (int k = 0; k < 3; k++) {
                const GoldenArray *ga = golden_get(g, "ema/%s/model%d/%s", cases[c], u, keys[k]);
                memcpy(t[k]->data, ga->data, sizeof(float) * (size_t)ga->n);
            }
            counter += 10;
            ema_update(&e, &r);
        }
        float *got[3] = {e.params + e.param_offset[0], e.params + e.param_offset[1], e.buffers + e.buffer_offset[0]};
        for (int k = 0; k < 3; k++) {
            char what[64];
            snprintf(what, sizeof what, "ema %s %s", cases[c], keys[k]);
            const GoldenArray *want = golden_get(g, "ema/%s/after/%s", cases[c], keys[k]);
            EXPECT(golden_compare(what, got[k], want->n, want, 0, 0) == 0, "%s", what);
        }
        EXPECT(e.counters[1] == 17, "integer buffers are not averaged (Ultralytics skips them)");
        // ema_swap: the model takes the EMA's values and the EMA the model's; twice restores
        float ema_w = got[0][5], ema_rm = got[2][0], model_w = t[0]->data[5], model_rm = t[2]->data[0];
        int64_t model_counter = counter;
        ema_swap(&e, &r);
        EXPECT(counter == 17 && t[2]->data[0] == ema_rm && t[0]->data[5] == ema_w,
               "ema_swap: the model holds the EMA weights");
        EXPECT(e.counters[1] == model_counter && got[2][0] == model_rm && got[0][5] == model_w,
               "ema_swap: the EMA holds the model's");
        ema_swap(&e, &r);
        EXPECT(counter == model_counter && t[0]->data[5] == model_w && got[0][5] == ema_w &&
                   e.counters[1] == 17,
               "a second ema_swap restores both");
        ema_free(&e);
        registry_free(&r);
        arena_free(&arena);
        arena_free(&host);
    }
    Ema e = {.decay = 0.9999, .tau = 2000};
    EXPECT(ema_decay_at(&e, 0) == 0.0, "d(0) = 0");
    EXPECT_NEAR(ema_decay_at(&e, 2000), 0.9999 * (1 - exp(-1.0)), 0, 1e-15);
}

// ---- threads: the same bits on any number of threads ----
// Parameters across host_loop.h's parallel threshold, with lengths that split mid-vector, one
// grad None, and a float buffer plus a counter for the EMA.
#define N_THREADED 6
static const int64_t threaded_numel[N_THREADED] = {100003, 17, 40000, 65537, 5, 3};

// The bytes a run leaves behind: weights, optimizer state, EMA, and the clip norms.
typedef struct ThreadedRun {
    float *weights, *state, *ema, norms[3];
    int64_t n_weights, n_state, n_ema;
} ThreadedRun;

// Three steps of clip 10, `kind`, zero_grad, EMA on `threads` threads; grads from a fixed seed
// (big enough that clipping scales them).
static ThreadedRun run_threaded(OptimKind kind, int threads) {
    backend_need(DEV_CPU)->set_threads(threads);
    Arena arena, host;
    Rng rng;
    Registry r;
    arena_init(&arena, DEV_CPU, 1 << 22);
    arena_init(&host, DEV_CPU, 1 << 16);
    rng_init(&rng, 7);
    registry_init(&r, &arena, &host, &rng);
    const char *names[N_THREADED] = {"a.weight", "a.bias", "b.bn.weight", "c.weight", "d.weight", "e.bias"};
    for (int i = 0; i < N_THREADED; i++) {
        Tensor *p = registry_param(&r, names[i], 1, &threaded_numel[i]);
        for (int64_t j = 0; j < p->n; j++) p->data[j] = rng_normal(&rng);
    }
    Tensor *running = registry_buffer(&r, "b.bn.running_var", 1, (int64_t[]){50001});
    int64_t counter = 0;
    registry_counter(&r, "b.bn.num_batches_tracked", &counter);
    Optimizer o;
    optim_init(&o, kind, r.params, r.names, r.n_params, 0.01, 0.9, 5e-4);
    Ema e;
    ema_init(&e, &r);
    ThreadedRun run = {0};
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < N_THREADED; i++) {
            Tensor *p = r.params[i];
            p->grad_defined = i != 4; // d.weight: grad None
            for (int64_t j = 0; j < p->n; j++) p->grad[j] = 3.0f * rng_normal(&rng);
        }
        for (int64_t j = 0; j < running->n; j++) running->data[j] = rng_uniform(&rng);
        run.norms[s] = clip_grad_norm(r.params, r.n_params, 10.0);
        optim_step(&o);
        optim_zero_grad(&o, true);
        ema_update(&e, &r);
    }
    run.n_weights = o.numel;
    run.weights = xmalloc(sizeof(float) * (size_t)o.numel);
    for (int i = 0; i < N_THREADED; i++)
        memcpy(run.weights + o.offset[i], r.params[i]->data, sizeof(float) * (size_t)r.params[i]->n);
    run.n_state = kind == OPTIM_ADAMW ? 2 * o.numel : o.numel;
    run.state = xmalloc(sizeof(float) * (size_t)run.n_state);
    if (kind == OPTIM_ADAMW) {
        memcpy(run.state, o.exp_avg, sizeof(float) * (size_t)o.numel);
        memcpy(run.state + o.numel, o.exp_avg_sq, sizeof(float) * (size_t)o.numel);
    } else {
        memcpy(run.state, o.momentum_buffer, sizeof(float) * (size_t)o.numel);
    }
    run.n_ema = e.n_param_floats + e.n_buffer_floats;
    run.ema = xmalloc(sizeof(float) * (size_t)run.n_ema);
    memcpy(run.ema, e.params, sizeof(float) * (size_t)e.n_param_floats);
    memcpy(run.ema + e.n_param_floats, e.buffers, sizeof(float) * (size_t)e.n_buffer_floats);
    ema_free(&e);
    optim_free(&o);
    registry_free(&r);
    arena_free(&arena);
    arena_free(&host);
    return run;
}

static void threaded_run_free(ThreadedRun *run) {
    free(run->weights);
    free(run->state);
    free(run->ema);
}

static void test_threads(void) {
    for (int k = 0; k < 2; k++) {
        OptimKind kind = k == 0 ? OPTIM_ADAMW : OPTIM_SGD;
        ThreadedRun one = run_threaded(kind, 1);
        EXPECT(one.norms[0] > 10.0f && one.norms[2] > 10.0f, "%s: the grads are clipped (norm %g)",
               optim_kind_name(kind), one.norms[0]);
        for (int threads = 2; threads <= 3; threads++) {
            ThreadedRun many = run_threaded(kind, threads);
            const char *name = optim_kind_name(kind);
            EXPECT(memcmp(one.norms, many.norms, sizeof one.norms) == 0,
                   "%s: clip norms on %d threads differ from 1 thread's", name, threads);
            EXPECT(memcmp(one.weights, many.weights, sizeof(float) * (size_t)one.n_weights) == 0,
                   "%s: weights on %d threads differ from 1 thread's", name, threads);
            EXPECT(memcmp(one.state, many.state, sizeof(float) * (size_t)one.n_state) == 0,
                   "%s: optimizer state on %d threads differs from 1 thread's", name, threads);
            EXPECT(memcmp(one.ema, many.ema, sizeof(float) * (size_t)one.n_ema) == 0,
                   "%s: EMA on %d threads differs from 1 thread's", name, threads);
            threaded_run_free(&many);
        }
        threaded_run_free(&one);
    }
    backend_need(DEV_CPU)->set_threads(1);
}

int main(void) {
    test_groups();
    test_auto_and_schedule();
    Golden g;
    if (golden_load(&g, "tests/golden/optim.bin") != 0) {
        EXPECT(false, "tests/golden/optim.bin unreadable");
        return expect_report();
    }
    test_adamw(&g);
    test_sgd(&g);
    test_clip(&g);
    test_ema(&g);
    golden_free(&g);
    test_threads();
    return expect_report();
}
