/* test_train.c -- the training loop learns, and resumes bit for bit.
 * A 16-image synthetic dataset (96 px, 2 classes) is written to a temp folder; rtdetr-tiny
 * trains on it for 5 epochs of 7 batches (AdamW, no warmup, accumulate 1, 2 threads, the
 * training transforms with Mosaic closed for the last 2 epochs):
 * the mean loss of the last 7 steps must be clearly below that of the first 7. The same run
 * stopped after its first epoch and resumed from last.ckpt must see exactly the same loss
 * values, bit for bit, as the straight run. Then: a truncated checkpoint and a finished one
 * are refused with one line naming the file; lr0=1e10 makes the loss or the gradient norm
 * non-finite, which stops the run (status 1) naming the iteration. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/data/synth.h"
#include "trainer/train.h"

#define EPOCHS 5
#define BATCHES 7 // 13 train images at batch 2
#define MAX_STEPS (EPOCHS * BATCHES)

typedef struct Record {
    float total[MAX_STEPS];
    int64_t first_ni, n; // total[k] is iteration first_ni + k
    int stop_after;      // on_epoch returns false after this many epochs (0: never)
    int epochs_seen;
} Record;

static void on_step(void *user, int64_t ni, const LossItems *items) {
    Record *r = user;
    if (r->n == 0) r->first_ni = ni;
    CHECK(r->first_ni + r->n == ni && r->n < MAX_STEPS, "iteration %lld out of order",
          (long long)ni);
    r->total[r->n++] = items->total;
}

static bool on_epoch(void *user, const TrainEpochReport *rep) {
    Record *r = user;
    r->epochs_seen++;
    return r->stop_after == 0 || r->epochs_seen < r->stop_after;
}

static char dir[64], data[128];

static TrainConfig config(Record *rec, const char *out) {
    TrainConfig c;
    train_config_default(&c);
    c.model = "rtdetr-tiny";
    c.data = data;
    c.imgsz = 96;
    c.batch = 2;
    c.epochs = EPOCHS;
    c.optimizer = "AdamW";
    c.lr0 = 0.002;
    c.warmup_epochs = 0;
    c.nbs = 2;
    c.seed = 3;
    c.val = false; // the last epoch still validates
    // Mosaic for epochs 0-2, closed from epoch 3 (close_mosaic 2 of 5): the resumed run crosses
    // the switch and must still match the straight one bit for bit; the last epochs, without
    // mosaic, show the loss falling
    c.aug.close_mosaic = 2;
    c.threads = 2;
    c.out_dir = out;
    c.log = fopen("/dev/null", "w");
    c.on_step = on_step;
    c.on_epoch = on_epoch;
    c.user = rec;
    return c;
}

static double mean(const float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    return s / n;
}

static int run(TrainConfig *c, char *err, size_t errlen) {
    int rc = train_run(c, err, errlen);
    fclose(c->log);
    return rc;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/test_train.XXXXXX");
    CHECK(mkdtemp(dir), "mkdtemp");
    char path[256], err[1024];
    snprintf(path, sizeof path, "%s/data", dir);
    snprintf(data, sizeof data, "%s/data/data.yaml", dir);
    SynthConfig sc = {.out = path, .n = 16, .imgsz = 96, .classes = 2, .empty = 0.1, .seed = 5};
    SynthSummary sum;
    CHECK(synth_generate(&sc, &sum, err, sizeof err) == 0, "synth: %s", err);
    CHECK(sum.n_train == 13, "%d train images", sum.n_train);

    // the straight run learns
    char out_a[128], out_b[128];
    snprintf(out_a, sizeof out_a, "%s/a", dir);
    snprintf(out_b, sizeof out_b, "%s/b", dir);
    Record straight = {0};
    TrainConfig c = config(&straight, out_a);
    EXPECT(run(&c, err, sizeof err) == 0, "straight run: %s", err);
    EXPECT(straight.n == MAX_STEPS && straight.first_ni == 0, "%lld steps", (long long)straight.n);
    double first = mean(straight.total, BATCHES),
           last = mean(straight.total + MAX_STEPS - BATCHES, BATCHES);
    printf("mean loss: first epoch %.4f, last epoch %.4f\n", first, last);
    EXPECT(isfinite(first) && isfinite(last) && last < 0.85 * first,
           "the loss does not fall: first %.4f last %.4f", first, last);
    snprintf(path, sizeof path, "%s/last.ckpt", out_a);
    EXPECT(access(path, F_OK) == 0, "no %s", path);

    // stopped after epoch 1, then resumed: the same losses, bit for bit
    Record part = {.stop_after = 1}, rest = {0};
    c = config(&part, out_b);
    EXPECT(run(&c, err, sizeof err) == 0, "first part: %s", err);
    EXPECT(part.n == BATCHES && memcmp(part.total, straight.total, sizeof(float) * BATCHES) == 0,
           "the first epoch differs from the straight run's (%lld steps)", (long long)part.n);
    char ckpt[256];
    snprintf(ckpt, sizeof ckpt, "%s/last.ckpt", out_b);
    c = config(&rest, out_b);
    c.resume = ckpt;
    EXPECT(run(&c, err, sizeof err) == 0, "resumed: %s", err);
    EXPECT(rest.first_ni == BATCHES && rest.n == MAX_STEPS - BATCHES,
           "resumed at %lld for %lld steps", (long long)rest.first_ni, (long long)rest.n);
    int64_t differ = -1;
    for (int64_t k = 0; k < rest.n && differ < 0; k++)
        if (memcmp(&rest.total[k], &straight.total[BATCHES + k], sizeof(float))) differ = k;
    EXPECT(differ < 0, "resumed loss at iteration %lld: %.9g, straight %.9g",
           (long long)(BATCHES + differ), differ < 0 ? 0.0 : rest.total[differ],
           differ < 0 ? 0.0 : straight.total[BATCHES + differ]);

    // a finished checkpoint, then a truncated one
    Record none = {0};
    c = config(&none, out_b);
    c.resume = ckpt;
    EXPECT(run(&c, err, sizeof err) == 2 && strstr(err, "nothing to resume") && strstr(err, ckpt),
           "finished checkpoint: %s", err);
    FILE *f = fopen(ckpt, "r+b");
    CHECK(f, "open %s", ckpt);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    CHECK(truncate(ckpt, size / 2) == 0, "truncate");
    c = config(&none, out_b);
    c.resume = ckpt;
    EXPECT(run(&c, err, sizeof err) == 2 && strstr(err, ckpt) && !strchr(err, '\n'),
           "truncated checkpoint: %s", err);
    EXPECT(none.n == 0, "a refused resume ran %lld steps", (long long)none.n);

    // an exploding learning rate stops the run naming the iteration
    Record boom = {0};
    c = config(&boom, out_b);
    c.lr0 = 1e10;
    c.max_grad_norm = 1e30;
    int rc = run(&c, err, sizeof err);
    printf("lr0=1e10: %s\n", err);
    EXPECT(rc == 1 && strstr(err, "not finite at iteration"), "rc %d: %s", rc, err);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0, "cleanup");
    return expect_report();
}
