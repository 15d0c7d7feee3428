/* bench_steps.c -- are training steps steady? rtdetr-l at 320 px, batch 2, 2 threads, the real
 * training loop (train_run: data, forward, RT-DETR loss with denoising, backward, clip, AdamW,
 * EMA, the probe's writer thread into a trace) over a synthetic set whose images hold 0-4
 * boxes, so shapes that depend on the number of boxes change from step to step (issue 14 saw
 * 4 steps in 16 take 2.5-3x the median). nbs=2: the optimizer steps every batch.
 * A step is the time between two consecutive on_step calls (each right after a backward), so
 * it holds one optimizer step, one batch load, one forward and one backward. After WARMUP
 * steps, prints every timed step with its page faults and context switches, then median, p90,
 * p90 / median (goal <= 1.15), max, and peak RSS, and the same for the CPU time a step used
 * (steadier than wall time when other processes share the cores). BENCH_STEPS_MODEL / _IMGSZ / _STEPS override
 * the model, size and number of timed steps (e.g. rtdetr-tiny for a quick look). Prints
 * timings only, never fails on them (exit 1 only if training fails). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kernels/base.h"
#include "tests/bench_stats.h"
#include "trainer/data/synth.h"
#include "trainer/train.h"

#define WARMUP 2      // untimed steps: the first grows the step arena and scratch buffers
#define MAX_STEPS 200 // timed steps, at most

typedef struct StepLog {
    int want, n_seen;              // timed steps wanted; on_step calls so far
    double t_last;                 // the previous on_step's time
    struct rusage ru_last;         // and its resource usage
    double secs[MAX_STEPS];        // step times
    double cpu[MAX_STEPS];         // process CPU time in the step (all threads)
    long minflt[MAX_STEPS];        // minor page faults in the step
    long nivcsw[MAX_STEPS];        // involuntary context switches (the machine's other load)
    int n;
} StepLog;

static double cpu_seconds(const struct rusage *ru) {
    return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) +
           1e-6 * (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec);
}

static void on_step(void *user, int64_t ni, const LossItems *items) {
    (void)ni;
    (void)items;
    StepLog *s = user;
    double t = bench_now();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int k = s->n_seen - WARMUP; // the step that ended now began at the previous on_step
    if (k >= 0 && s->n < s->want) {
        s->secs[k] = t - s->t_last;
        s->cpu[k] = cpu_seconds(&ru) - cpu_seconds(&s->ru_last);
        s->minflt[k] = ru.ru_minflt - s->ru_last.ru_minflt;
        s->nivcsw[k] = ru.ru_nivcsw - s->ru_last.ru_nivcsw;
        s->n = k + 1;
        printf("bench_steps: step %2d  %.3f s  cpu %.3f s  %7ld page faults  %5ld preempted\n",
               k + 1, s->secs[k], s->cpu[k], s->minflt[k], s->nivcsw[k]);
        fflush(stdout);
    }
    s->t_last = t;
    s->ru_last = ru;
    s->n_seen++;
}

static bool on_epoch(void *user, const TrainEpochReport *r) {
    (void)user;
    (void)r;
    return false; // one epoch is enough (and skips the final validation)
}

int main(void) {
    const char *model = getenv("BENCH_STEPS_MODEL") ? getenv("BENCH_STEPS_MODEL") : "rtdetr-l";
    int imgsz = getenv("BENCH_STEPS_IMGSZ") ? atoi(getenv("BENCH_STEPS_IMGSZ")) : 320;
    int want = getenv("BENCH_STEPS_STEPS") ? atoi(getenv("BENCH_STEPS_STEPS")) : 30;
    CHECK(want >= 2 && want <= MAX_STEPS, "BENCH_STEPS_STEPS must be 2..%d", MAX_STEPS);
    const int batch = 2, threads = 2;
    int n_train = batch * (want + WARMUP + 1); // one spare batch: the last step's end
    char dir[64] = "/tmp/bench_steps.XXXXXX", data[128], out[128], trace[128], err[1024];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(data, sizeof data, "%s/synth", dir);
    // The last round(n / 5) images are the val split: n = 5/4 of the training images.
    SynthConfig sc = {.out = data, .n = n_train * 5 / 4, .imgsz = imgsz, .classes = 3,
                      .empty = 0.15, .seed = 3};
    SynthSummary sum;
    CHECK(synth_generate(&sc, &sum, err, sizeof err) == 0, "synth: %s", err);
    snprintf(data, sizeof data, "%s/synth/data.yaml", dir);
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(trace, sizeof trace, "%s/trace", dir);
    FILE *load = fopen("/proc/loadavg", "r");
    char loadavg[64] = "?";
    if (load) {
        if (!fgets(loadavg, sizeof loadavg, load)) strcpy(loadavg, "?");
        fclose(load);
        loadavg[strcspn(loadavg, "\n")] = 0;
    }
    printf("bench_steps: %s %d px, batch %d, %d threads, %d train images (%d empty in all), "
           "trace on, load %s\n",
           model, imgsz, batch, threads, sum.n_train, sum.n_empty, loadavg);

    StepLog *s = xcalloc(1, sizeof *s);
    s->want = want;
    TrainConfig c;
    train_config_default(&c);
    c.model = model;
    c.data = data;
    c.imgsz = imgsz;
    c.batch = batch;
    c.epochs = 2;
    c.val = false;
    c.nbs = batch; // the optimizer every step, as the PyTorch benchmark's --accumulate 1
    c.augment = false;
    c.threads = threads;
    c.out_dir = out;
    c.trace_dir = trace;
    FILE *devnull = fopen("/dev/null", "w");
    c.log = devnull;
    c.on_step = on_step;
    c.on_epoch = on_epoch;
    c.user = s;
    s->t_last = bench_now();
    int rc = train_run(&c, err, sizeof err);
    if (rc) fprintf(stderr, "bench_steps: %s\n", err);
    fclose(devnull);

    if (s->n > 0) {
        double med = bench_quantile(s->secs, s->n, 0.5), p90 = bench_quantile(s->secs, s->n, 0.9);
        double mx = bench_quantile(s->secs, s->n, 1.0);
        double cmed = bench_quantile(s->cpu, s->n, 0.5), cp90 = bench_quantile(s->cpu, s->n, 0.9);
        long flt = 0;
        for (int i = 0; i < s->n; i++) flt += s->minflt[i];
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("bench_steps: %d steps: median %.3f s, p90 %.3f s, p90/median %.2f (goal <= 1.15), "
               "max %.3f s; %.0f page faults a step; peak RSS %.2f GiB\n",
               s->n, med, p90, p90 / med, mx, (double)flt / s->n, (double)ru.ru_maxrss / 1048576.0);
        // CPU time counts what the step computed, not the time other processes took the cores
        // from it: on a shared machine its p90/median is the steadier figure.
        printf("bench_steps: CPU time a step (both threads): median %.3f s, p90 %.3f s, p90/median "
               "%.2f\n", cmed, cp90, cp90 / cmed);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_steps: could not remove %s\n", dir);
    free(s);
    return rc ? 1 : 0;
}
