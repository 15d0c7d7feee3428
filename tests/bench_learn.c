/* bench_learn.c -- does the trainer learn, and how fast: rtdetr-tiny on the synthetic shapes
 * (synth n=1200 at 128 px, 3 classes: 960 train / 240 val images) with Ultralytics' defaults
 * (batch 16, optimizer auto, 100-epoch schedule, warmup, EMA), validated every epoch, until
 * the EMA model's mAP50 reaches 0.5 or the time limit passes (30 minutes;
 * BENCH_LEARN_SECONDS overrides it). Prints one progress row per epoch, the validation table,
 * the mAP curve (epoch, mAP50, mAP50-95, seconds) and the time to the target. `BENCH=learn
 * make bench` runs it (a plain `make bench` skips it: it takes up to the limit); it never
 * fails on the numbers, only on a failed run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/base.h"
#include "trainer/data/synth.h"
#include "trainer/train.h"

#define TARGET_MAP50 0.5

typedef struct Curve {
    double limit_s;
    int n;
    double map50[1000], map50_95[1000], seconds[1000];
    float loss[1000];
    bool reached;
} Curve;

static bool on_epoch(void *user, const TrainEpochReport *r) {
    Curve *c = user;
    if (c->n < 1000) {
        c->map50[c->n] = r->map50;
        c->map50_95[c->n] = r->map50_95;
        c->seconds[c->n] = r->seconds;
        c->loss[c->n] = r->giou + r->cls + r->l1;
        c->n++;
    }
    printf("bench_learn: epoch %d  mAP50 %.4f  mAP50-95 %.4f  %.1f s\n", r->epoch + 1, r->map50,
           r->map50_95, r->seconds);
    fflush(stdout);
    c->reached = r->map50 >= TARGET_MAP50;
    return !c->reached && r->seconds < c->limit_s;
}

int main(void) {
    const char *only = getenv("BENCH");
    if (!only || strcmp(only, "learn") != 0) {
        printf("bench_learn: skipped (up to 30 minutes; run it with BENCH=learn make bench)\n");
        return 0;
    }
    const char *limit = getenv("BENCH_LEARN_SECONDS");
    Curve curve = {.limit_s = limit ? atof(limit) : 1800.0};
    char dir[64] = "/tmp/bench_learn.XXXXXX", data[128], out[128], err[1024];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(data, sizeof data, "%s/synth", dir);
    SynthConfig sc = {.out = data, .n = 1200, .imgsz = 128, .classes = 3, .empty = 0.1, .seed = 0};
    SynthSummary sum;
    CHECK(synth_generate(&sc, &sum, err, sizeof err) == 0, "synth: %s", err);
    printf("bench_learn: synth %d train / %d val images at 128 px, limit %.0f s\n", sum.n_train,
           sum.n_val, curve.limit_s);
    snprintf(data, sizeof data, "%s/synth/data.yaml", dir);
    snprintf(out, sizeof out, "%s/run", dir);

    TrainConfig c;
    train_config_default(&c);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c.model = "rtdetr-tiny";
    c.data = data;
    c.imgsz = 128;
    c.threads = cores > 0 ? (int)cores : 1;
    c.out_dir = out;
    c.log_rows = 1;
    c.on_epoch = on_epoch;
    c.user = &curve;
    int rc = train_run(&c, err, sizeof err);
    if (rc) fprintf(stderr, "bench_learn: %s\n", err);

    printf("bench_learn: curve (epoch mAP50 mAP50-95 loss seconds)\n");
    for (int i = 0; i < curve.n; i++)
        printf("  %3d %.4f %.4f %8.4f %8.1f\n", i + 1, curve.map50[i], curve.map50_95[i],
               curve.loss[i], curve.seconds[i]);
    if (curve.reached)
        printf("bench_learn: mAP50 >= %.2f after %d epochs, %.1f s (%d threads)\n", TARGET_MAP50,
               curve.n, curve.seconds[curve.n - 1], c.threads);
    else
        printf("bench_learn: mAP50 < %.2f after %d epochs, %.1f s (%d threads): stopped at the "
               "limit\n",
               TARGET_MAP50, curve.n, curve.n ? curve.seconds[curve.n - 1] : 0.0, c.threads);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_learn: could not remove %s\n", dir);
    return rc ? 1 : 0;
}
