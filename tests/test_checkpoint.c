/* test_checkpoint.c -- checkpoints resume bit for bit, and bad files are refused.
 * A small synthetic training run (a registry of four parameters, a BatchNorm-like buffer and
 * counter, gradients from a deterministic function plus noise from a saved generator, one
 * parameter without a gradient on some batches; warmup, accumulation, clipping, the optimizer,
 * EMA and the per-epoch LambdaLR step all in the loop) is run N batches straight, and again
 * with a save after batch k and a load into a freshly built run: every parameter, optimizer
 * moment, EMA value, buffer, counter and generator state must be identical (memcmp).
 * Then: truncated, foreign, other-version, corrupt, trailing-bytes and other-model files give
 * one-line errors naming the file and leave the run untouched; rtdetr-tiny round-trips. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/checkpoint.h"
#include "trainer/nn/rtdetr.h"
#include "trainer/optim/clip.h"
#include "trainer/optim/schedule.h"

#define N_BATCHES 24
#define BATCHES_PER_EPOCH 5
#define WARMUP_ITERS 12

typedef struct Run {
    Arena arena, host;
    Rng init_rng, noise;
    Registry reg;
    Tensor *running_mean;
    int64_t batches_tracked;
    Optimizer opt;
    Ema ema;
    ScheduleConfig cfg;
    Checkpoint ck;
} Run;

// first_rows: the first weight's rows, so that another model can be made for the mismatch test.
static void run_init(Run *r, OptimKind kind, uint64_t seed, int first_rows) {
    memset(r, 0, sizeof *r);
    arena_init(&r->arena, DEV_CPU, 1 << 16);
    arena_init(&r->host, DEV_CPU, 1 << 16);
    rng_init(&r->init_rng, seed);
    rng_init(&r->noise, seed + 100);
    registry_init(&r->reg, &r->arena, &r->host, &r->init_rng);
    registry_push(&r->reg, "layer");
    Tensor *w = registry_param(&r->reg, "conv.weight", 2, (int64_t[]){first_rows, 3});
    Tensor *g = registry_param(&r->reg, "bn.weight", 1, (int64_t[]){4});
    Tensor *b = registry_param(&r->reg, "bn.bias", 1, (int64_t[]){4});
    r->running_mean = registry_buffer(&r->reg, "bn.running_mean", 1, (int64_t[]){4});
    registry_counter(&r->reg, "bn.num_batches_tracked", &r->batches_tracked);
    Tensor *fc = registry_param(&r->reg, "fc.weight", 1, (int64_t[]){37});
    registry_pop(&r->reg);
    init_normal(w, &r->init_rng);
    init_fill(g, 1.0f);
    init_normal(b, &r->init_rng);
    init_normal(fc, &r->init_rng);
    r->cfg = (ScheduleConfig){.epochs = 10, .lrf = 0.01, .warmup_epochs = 3, .warmup_bias_lr = 0.1,
                              .warmup_momentum = 0.8, .momentum = 0.937, .nbs = 8, .batch = 2};
    optim_init(&r->opt, kind, r->reg.params, r->reg.names, r->reg.n_params, kind == OPTIM_SGD ? 0.01 : 0.001,
               0.9, schedule_weight_decay(5e-4, 2, 4, 8));
    r->ck = (Checkpoint){.model_name = "toy.yaml", .nc = 3, .model = &r->reg, .opt = &r->opt,
                         .ema = &r->ema, .rngs = &r->noise, .n_rngs = 1};
    schedule_lambda_init(&r->cfg, &r->opt, &r->ck.progress.scheduler_last_epoch);
    ema_init(&r->ema, &r->reg);
    r->ck.progress.last_opt_step = -1;
    r->ck.progress.accumulate = schedule_base_accumulate(r->cfg.nbs, r->cfg.batch);
}

static void run_free(Run *r) {
    ema_free(&r->ema);
    optim_free(&r->opt);
    registry_free(&r->reg);
    arena_free(&r->arena);
    arena_free(&r->host);
}

// One batch of BaseTrainer._do_train: warmup, "backward" (accumulates), maybe an optimizer
// step with clipping and EMA, the BatchNorm buffer update, and LambdaLR at the epoch's end.
static void run_batch(Run *r) {
    CheckpointProgress *p = &r->ck.progress;
    int64_t ni = p->iteration;
    int accumulate = (int)p->accumulate;
    schedule_warmup(&r->cfg, &r->opt, ni, WARMUP_ITERS, (int)p->epoch, &accumulate);
    p->accumulate = accumulate;
    for (int i = 0; i < r->reg.n_params; i++) {
        Tensor *t = r->reg.params[i];
        if (i == 2 && ni % 3 == 1) continue; // no gradient reaches the bias on these batches
        if (!t->grad_defined) memset(t->grad, 0, sizeof(float) * (size_t)t->n);
        t->grad_defined = true;
        for (int64_t j = 0; j < t->n; j++)
            t->grad[j] += 4.0f * sinf(3.0f * t->data[j] + (float)ni) + 0.5f * rng_normal(&r->noise);
    }
    if (ni - p->last_opt_step >= p->accumulate) {
        clip_grad_norm(r->reg.params, r->reg.n_params, 10.0);
        optim_step(&r->opt);
        optim_zero_grad(&r->opt, true);
        ema_update(&r->ema, &r->reg);
        p->last_opt_step = ni;
    }
    const Tensor *gamma = r->reg.params[1];
    for (int j = 0; j < 4; j++) r->running_mean->data[j] = 0.97f * r->running_mean->data[j] + 0.03f * gamma->data[j];
    r->batches_tracked++;
    p->iteration++;
    if (p->iteration % BATCHES_PER_EPOCH == 0) {
        schedule_lambda_step(&r->cfg, &r->opt, &p->scheduler_last_epoch);
        p->epoch++;
    }
}

static bool same_floats(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

// Everything that decides the future of the run, compared exactly.
static bool runs_equal(const Run *a, const Run *b, const char *what) {
    bool ok = true;
    for (int i = 0; i < a->reg.n_params; i++) {
        bool same = same_floats(a->reg.params[i]->data, b->reg.params[i]->data, a->reg.params[i]->n);
        EXPECT(same, "%s: parameter %s differs", what, a->reg.names[i]);
        ok &= same;
    }
    const Optimizer *oa = &a->opt, *ob = &b->opt;
    bool opt_same = memcmp(oa->step, ob->step, sizeof(int64_t) * (size_t)oa->n_params) == 0 &&
                    memcmp(oa->has_state, ob->has_state, (size_t)oa->n_params) == 0 &&
                    memcmp(oa->groups, ob->groups, sizeof oa->groups) == 0;
    if (oa->kind == OPTIM_ADAMW)
        opt_same &= same_floats(oa->exp_avg, ob->exp_avg, oa->numel) && same_floats(oa->exp_avg_sq, ob->exp_avg_sq, oa->numel);
    else
        opt_same &= same_floats(oa->momentum_buffer, ob->momentum_buffer, oa->numel);
    EXPECT(opt_same, "%s: optimizer state differs", what);
    bool ema_same = a->ema.updates == b->ema.updates && same_floats(a->ema.params, b->ema.params, a->ema.n_param_floats) &&
                    same_floats(a->ema.buffers, b->ema.buffers, a->ema.n_buffer_floats);
    EXPECT(ema_same, "%s: EMA differs", what);
    bool rest = same_floats(a->running_mean->data, b->running_mean->data, 4) && a->batches_tracked == b->batches_tracked &&
                memcmp(&a->noise, &b->noise, sizeof a->noise) == 0 &&
                memcmp(&a->ck.progress, &b->ck.progress, sizeof a->ck.progress) == 0;
    EXPECT(rest, "%s: buffers, counter, generator or progress differ", what);
    return ok && opt_same && ema_same && rest;
}

static char dir[64];

static void path_of(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static void test_resume(OptimKind kind) {
    const char *what = optim_kind_name(kind);
    Run straight, first, resumed;
    run_init(&straight, kind, 7, 4);
    for (int i = 0; i < N_BATCHES; i++) run_batch(&straight);

    // save right after an optimizer step past batch 8 (no gradient is pending then)
    run_init(&first, kind, 7, 4);
    while (first.ck.progress.iteration < 8 || first.ck.progress.last_opt_step != first.ck.progress.iteration - 1)
        run_batch(&first);
    int64_t saved_at = first.ck.progress.iteration;
    first.ck.progress.best_fitness = 0.25;
    char path[128], err[512];
    path_of(path, sizeof path, "resume.ckpt");
    EXPECT(checkpoint_save(path, &first.ck, err, sizeof err) == 0, "%s: save: %s", what, err);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    EXPECT(access(tmp, F_OK) != 0, "the temporary file is renamed away");

    run_init(&resumed, kind, 99, 4); // other initial values, other noise
    EXPECT(checkpoint_load(path, &resumed.ck, err, sizeof err) == 0, "%s: load: %s", what, err);
    EXPECT(resumed.ck.progress.iteration == saved_at && resumed.ck.progress.best_fitness == 0.25, "progress restored");
    EXPECT(runs_equal(&first, &resumed, "right after loading"), "%s: the loaded run is the saved one", what);
    while (resumed.ck.progress.iteration < N_BATCHES) run_batch(&resumed);
    straight.ck.progress.best_fitness = 0.25; // the one value the runs do not compute
    EXPECT(runs_equal(&straight, &resumed, what), "%s: resumed at batch %lld, differs after %d batches", what,
           (long long)saved_at, N_BATCHES);
    EXPECT(straight.opt.step[2] < straight.opt.step[0], "%s: the bias missed some steps", what);
    remove(path);
    run_free(&straight);
    run_free(&first);
    run_free(&resumed);
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

// Writes a copy of src with bytes [0, keep) and then `patch` at `at` (if patch_len > 0),
// plus `append` extra bytes.
static void write_variant(const char *src, const char *dst, long keep, long at, const void *patch, size_t patch_len,
                          size_t append) {
    long n = file_size(src);
    CHECK(n > 0, "%s", src);
    char *buf = xmalloc((size_t)n + append + 1);
    FILE *f = fopen(src, "rb");
    CHECK(f && fread(buf, 1, (size_t)n, f) == (size_t)n, "read %s", src);
    fclose(f);
    if (patch_len) memcpy(buf + at, patch, patch_len);
    memset(buf + n, 0x5a, append);
    long out = keep < 0 ? n + (long)append : keep;
    f = fopen(dst, "wb");
    CHECK(f && fwrite(buf, 1, (size_t)out, f) == (size_t)out, "write %s", dst);
    fclose(f);
    free(buf);
}

// Loads path into a fresh run and expects -1 with a message naming the file and `needle`,
// and the run left exactly as it was.
static void expect_refused(const char *path, Run *r, const char *needle) {
    Run before;
    run_init(&before, r->opt.kind, 5, (int)r->reg.params[0]->shape[0]);
    char err[512] = "";
    int rc = checkpoint_load(path, &r->ck, err, sizeof err);
    EXPECT(rc == -1, "%s loaded (wanted: %s)", path, needle);
    EXPECT(strstr(err, path) == err && strstr(err, needle) && !strchr(err, '\n'),
           "error for %s: \"%s\" (wanted one line with \"%s\")", path, err, needle);
    EXPECT(runs_equal(&before, r, "after a refused load"), "a refused load changed the run (%s)", needle);
    run_free(&before);
}

static void test_refusals(void) {
    Run saved;
    run_init(&saved, OPTIM_ADAMW, 3, 4);
    for (int i = 0; i < 6; i++) run_batch(&saved);
    char good[128], bad[128], err[512];
    path_of(good, sizeof good, "good.ckpt");
    path_of(bad, sizeof bad, "bad.ckpt");
    EXPECT(checkpoint_save(good, &saved.ck, err, sizeof err) == 0, "save: %s", err);
    long n = file_size(good);

    Run r;
    run_init(&r, OPTIM_ADAMW, 5, 4);
    write_variant(good, bad, n / 2, 0, NULL, 0, 0);
    expect_refused(bad, &r, "truncated");
    write_variant(good, bad, n - 3, 0, NULL, 0, 0);
    expect_refused(bad, &r, "truncated");
    write_variant(good, bad, 10, 0, NULL, 0, 0);
    expect_refused(bad, &r, "truncated");
    write_variant(good, bad, -1, 0, "PK\3\4", 4, 0);
    expect_refused(bad, &r, "not a ddpdbg checkpoint");
    uint32_t v2 = CHECKPOINT_VERSION + 1;
    write_variant(good, bad, -1, 8, &v2, 4, 0);
    expect_refused(bad, &r, "version 2");
    uint8_t flip = 0x3c;
    write_variant(good, bad, -1, n / 2, &flip, 1, 0);
    expect_refused(bad, &r, "checksum");
    write_variant(good, bad, -1, 0, NULL, 0, 5);
    expect_refused(bad, &r, "trailing");
    path_of(bad, sizeof bad, "missing.ckpt");
    expect_refused(bad, &r, "cannot open");
    path_of(bad, sizeof bad, "bad.ckpt");

    r.ck.nc = 4;
    expect_refused(good, &r, "nc 3, this run is toy.yaml nc 4");
    r.ck.nc = 3;
    r.ck.model_name = "other.yaml";
    expect_refused(good, &r, "model toy.yaml");
    r.ck.model_name = "toy.yaml";
    r.ck.n_rngs = 0;
    expect_refused(good, &r, "generator states");
    r.ck.n_rngs = 1;
    r.ck.ema = NULL;
    expect_refused(good, &r, "has EMA state, this run has none");
    r.ck.ema = &r.ema;
    run_free(&r);

    run_init(&r, OPTIM_ADAMW, 5, 5); // conv.weight 5x3 instead of 4x3
    expect_refused(good, &r, "parameter 0 is layer.conv.weight 4x3 there, layer.conv.weight 5x3 here");
    run_free(&r);
    run_init(&r, OPTIM_SGD, 5, 4);
    expect_refused(good, &r, "optimizer AdamW in the checkpoint, SGD in this run");
    r.ck.opt = NULL;
    expect_refused(good, &r, "has OPTIM state, this run has none");
    run_free(&r);

    path_of(bad, sizeof bad, "no/such/dir/x.ckpt");
    EXPECT(checkpoint_save(bad, &saved.ck, err, sizeof err) == -1 && strstr(err, "cannot write") &&
               strstr(err, bad) == err, "save into a missing folder: \"%s\"", err);
    run_free(&saved);
    remove(good);
    path_of(bad, sizeof bad, "bad.ckpt");
    remove(bad);
}

// The real thing at small scale: rtdetr-tiny's 323 tensors and BatchNorm buffers.
static void test_rtdetr_tiny(void) {
    Rtdetr a, b;
    char err[512];
    if (rtdetr_init(&a, "rtdetr-tiny", 0, 1, err, sizeof err) != 0) {
        EXPECT(false, "rtdetr-tiny: %s", err);
        return;
    }
    EXPECT(rtdetr_init(&b, "rtdetr-tiny", 0, 2, err, sizeof err) == 0, "%s", err);
    Optimizer oa, ob;
    Ema ea, eb;
    optim_init(&oa, OPTIM_ADAMW, a.reg.params, a.reg.names, a.reg.n_params, 1e-4, 0.9, 1e-4);
    optim_init(&ob, OPTIM_ADAMW, b.reg.params, b.reg.names, b.reg.n_params, 1e-4, 0.9, 1e-4);
    for (int i = 0; i < a.reg.n_params; i++) { // one step with a fake gradient
        Tensor *p = a.reg.params[i];
        p->grad_defined = i % 7 != 3;
        for (int64_t j = 0; j < p->n; j++) p->grad[j] = 0.01f * (float)((j + i) % 13) - 0.06f;
    }
    optim_step(&oa);
    ema_init(&ea, &a.reg);
    ema_init(&eb, &b.reg);
    a.reg.buffers[1].t->data[0] = 0.5f; // a running_var that is not 1
    Checkpoint ca = {.model_name = "rtdetr-tiny.yaml", .nc = a.spec.nc, .model = &a.reg, .opt = &oa, .ema = &ea};
    Checkpoint cb = ca;
    cb.model = &b.reg;
    cb.opt = &ob;
    cb.ema = &eb;
    char path[128];
    path_of(path, sizeof path, "tiny.ckpt");
    EXPECT(checkpoint_save(path, &ca, err, sizeof err) == 0, "%s", err);
    EXPECT(checkpoint_load(path, &cb, err, sizeof err) == 0, "%s", err);
    int differ = 0;
    for (int i = 0; i < a.reg.n_params; i++)
        differ += !same_floats(a.reg.params[i]->data, b.reg.params[i]->data, a.reg.params[i]->n);
    EXPECT(differ == 0, "rtdetr-tiny: %d parameters differ after the round trip", differ);
    EXPECT(b.reg.buffers[1].t->data[0] == 0.5f, "buffers travel");
    EXPECT(same_floats(oa.exp_avg_sq, ob.exp_avg_sq, oa.numel) && memcmp(oa.step, ob.step, sizeof(int64_t) * (size_t)oa.n_params) == 0,
           "optimizer state travels");
    EXPECT(same_floats(ea.params, eb.params, ea.n_param_floats), "EMA travels");
    cb.nc = a.spec.nc + 1;
    EXPECT(checkpoint_load(path, &cb, err, sizeof err) == -1 && strstr(err, "nc"), "nc mismatch: %s", err);
    remove(path);
    ema_free(&ea);
    ema_free(&eb);
    optim_free(&oa);
    optim_free(&ob);
    rtdetr_free(&a);
    rtdetr_free(&b);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/test_checkpoint.XXXXXX");
    if (!mkdtemp(dir)) {
        EXPECT(false, "mkdtemp failed");
        return expect_report();
    }
    test_resume(OPTIM_ADAMW);
    test_resume(OPTIM_SGD);
    test_refusals();
    test_rtdetr_tiny();
    EXPECT(rmdir(dir) == 0, "%s: files left behind", dir);
    return expect_report();
}
