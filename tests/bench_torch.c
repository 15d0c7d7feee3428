/* bench_torch.c -- ours against PyTorch 1.13, side by side in one run (`make bench
 * BENCH=torch`; a plain `make bench` skips it: it takes minutes). Both train the same model on
 * the same synthetic set (0-4 boxes an image; 1-4 with 2 ranks) with the same step: forward,
 * the RT-DETR loss with denoising, backward, clip 10, AdamW every batch, EMA. PyTorch runs
 * tests/torch/rtdetr_torch.py --bench (our rtdetr-l rendered in PyTorch, same loss: see
 * tests/torch/README.md) under /usr/bin/python3; ours runs train_run in a forked process
 * (trace off, as PyTorch has none). Blocks alternate ours, PyTorch, ours, ... over ROUNDS
 * rounds (each block a fresh process: WARMUP untimed steps, then STEPS timed ones), so that
 * the machine's load hits both alike; the figures are medians over all timed steps of each
 * side, the ratio of those medians, and each round's own ratio.
 * A step: ours is the time between two consecutive on_step calls (optimizer, batch load,
 * forward, backward: the PNG decode of 2 small images is in ours and not in PyTorch's);
 * PyTorch's is bench_step.py's "step" line (forward+loss, backward, optimizer).
 * BENCH_TORCH_RANKS=2: both sides as 2 DDP ranks on this machine (ours: two forked ranks over
 * Gloo, PyTorch: --ddp --nproc 2), batch and threads per rank; a step is rank 0's.
 * Both sides' OpenBLAS run the core ours chooses (blas_core): PyTorch's through
 * OPENBLAS_CORETYPE, set for its processes.
 * Overrides: BENCH_TORCH_MODEL (rtdetr-l), _IMGSZ (320), _BATCH (2), _THREADS (2), _ROUNDS (3),
 * _STEPS (4), _RANKS (1). Skipped, exit 0 with a line saying why, when /usr/bin/python3 cannot import
 * torch or tests/torch is not below the working directory. Exit 1 only if a run fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/base.h"
#include "kernels/cpu/blas.h"
#include "tests/bench_stats.h"
#include "tests/ddp_harness.h"
#include "trainer/data/synth.h"
#include "trainer/train.h"

#define PYTHON "/usr/bin/python3"
#define SCRIPT "tests/torch/rtdetr_torch.py"
// Untimed steps a block, on both sides: ours' first grows the step arena in chunks and the
// second faults in the one block they merge into, so with 1 warm-up step the slow second
// step was timed (rtdetr-l 320 px, 4 timed steps, load ~2: ours 1.68 s a step with 1 warm-up,
// 1.32 s with 2; PyTorch 3.69 and 3.41 s).
#define WARMUP 2
#define MAX_STEPS 64
#define MAX_ROUNDS 16

typedef struct Side {
    double steps[MAX_ROUNDS * MAX_STEPS];
    int n;
    double round_median[MAX_ROUNDS];
    double peak_rss_gb; // GiB, the largest block's (under DDP its largest rank's)
} Side;

// What the child writes back to the parent (mapped shared before the fork).
typedef struct OursBlock {
    int want, seen, n;
    double t_last;
    double steps[MAX_STEPS];
} OursBlock;

static int env_int(const char *name, int dflt, int lo, int hi) {
    const char *v = getenv(name);
    int x = v ? atoi(v) : dflt;
    if (x < lo || x > hi) DIE(2, "%s=%s: expected %d..%d", name, v, lo, hi);
    return x;
}

static void load_line(char *buf, size_t len) {
    FILE *f = fopen("/proc/loadavg", "r");
    snprintf(buf, len, "?");
    if (!f) return;
    if (fgets(buf, (int)len, f)) buf[strcspn(buf, "\n")] = 0;
    fclose(f);
}

static void on_step(void *user, int64_t ni, const LossItems *items) {
    (void)ni;
    (void)items;
    OursBlock *b = user;
    double t = bench_now();
    int k = b->seen - WARMUP; // the step that ended now began at the previous on_step
    if (k >= 0) b->steps[b->n++] = t - b->t_last;
    b->t_last = t;
    b->seen++;
    if (b->n == b->want) _exit(0); // enough: skip the epoch's end (checkpoint, validation)
}

// One block of ours: `ranks` fresh processes (DDP over Gloo when 2); appends rank 0's steps to
// s. Returns 0 or -1.
static int run_ours(const TrainConfig *base, int ranks, int steps, Side *s, int round) {
    OursBlock *b = mmap(NULL, sizeof *b * (size_t)ranks, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(b != MAP_FAILED, "mmap");
    memset(b, 0, sizeof *b * (size_t)ranks);
    int port = ranks > 1 ? harness_free_port() : 0;
    pid_t pid[2];
    fflush(stdout);
    for (int r = 0; r < ranks; r++) {
        b[r].want = steps;
        pid[r] = fork();
        CHECK(pid[r] >= 0, "fork");
        if (pid[r] == 0) {
            if (ranks > 1) {
                char v[16];
                snprintf(v, sizeof v, "%d", r);
                setenv("RANK", v, 1);
                setenv("LOCAL_RANK", v, 1);
                snprintf(v, sizeof v, "%d", ranks);
                setenv("WORLD_SIZE", v, 1);
                setenv("LOCAL_WORLD_SIZE", v, 1);
                setenv("MASTER_ADDR", "127.0.0.1", 1);
                snprintf(v, sizeof v, "%d", port);
                setenv("MASTER_PORT", v, 1);
            }
            TrainConfig c = *base;
            c.user = &b[r];
            char err[1024];
            b[r].t_last = bench_now();
            int rc = train_run(&c, err, sizeof err);
            fprintf(stderr, "bench_torch: ours (rank %d) stopped before %d steps: %s\n", r, steps,
                    rc ? err : "");
            _exit(1);
        }
    }
    int rc = 0;
    for (int r = 0; r < ranks; r++) {
        int status;
        struct rusage ru;
        CHECK(wait4(pid[r], &status, 0, &ru) == pid[r], "wait4");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || b[r].n != steps) rc = -1;
        double gb = (double)ru.ru_maxrss / 1048576.0;
        if (rc == 0 && gb > s->peak_rss_gb) s->peak_rss_gb = gb;
    }
    if (rc == 0) {
        memcpy(s->steps + s->n, b[0].steps, sizeof(double) * (size_t)steps);
        s->n += steps;
        s->round_median[round] = bench_median(b[0].steps, steps);
    }
    munmap(b, sizeof *b * (size_t)ranks);
    return rc;
}

// One block of PyTorch's; appends its steps to s. Returns 0 or -1.
static int run_torch(const char *model, int imgsz, int batch, int threads, int ranks,
                     const char *data, int steps, Side *s, int round) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             PYTHON " " SCRIPT " --bench --model %s --imgsz %d --batch %d --threads %d --steps %d "
                    "--warmup %d --data %s%s 2>&1",
             model, imgsz, batch, threads, steps, WARMUP, data,
             ranks > 1 ? " --ddp --nproc 2" : "");
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    CHECK(p, "popen");
    char line[8192];
    double got[MAX_STEPS];
    int n = 0;
    double rss_mb = 0;
    while (fgets(line, sizeof line, p)) {
        int k;
        double secs;
        // under DDP the JSON's peak_rss_mb is rank 0's (peak_rss_mb_per_rank follows it)
        const char *rss = strstr(line, "\"peak_rss_mb\": ");
        if (sscanf(line, "step %d: %lf s", &k, &secs) == 2 && n < MAX_STEPS)
            got[n++] = secs;
        else if (line[0] == '{' && rss)
            rss_mb = atof(rss + strlen("\"peak_rss_mb\": "));
        else if (!strncmp(line, "Traceback", 9) || strstr(line, "Error"))
            fputs(line, stderr);
    }
    int rc = pclose(p);
    if (rc != 0 || n != steps) {
        fprintf(stderr, "bench_torch: PyTorch block failed (exit %d, %d of %d steps): %s\n", rc,
                n, steps, cmd);
        return -1;
    }
    memcpy(s->steps + s->n, got, sizeof(double) * (size_t)n);
    s->n += n;
    s->round_median[round] = bench_median(got, n);
    if (rss_mb / 1024.0 > s->peak_rss_gb) s->peak_rss_gb = rss_mb / 1024.0; // MiB -> GiB
    return 0;
}

int main(void) {
    const char *only = getenv("BENCH");
    if (!only || strcmp(only, "torch") != 0) {
        printf("bench_torch: skipped (ours vs PyTorch, minutes; run it with BENCH=torch make "
               "bench)\n");
        return 0;
    }
    if (access(SCRIPT, R_OK) != 0) {
        printf("bench_torch: skipped: %s not found below %s (run it from the repository root)\n",
               SCRIPT, getcwd((char[512]){0}, 512));
        return 0;
    }
    if (system(PYTHON " -c 'import torch, yaml, numpy, PIL' >/dev/null 2>&1") != 0) {
        printf("bench_torch: skipped: " PYTHON " cannot import torch, yaml, numpy and PIL "
               "(Debian's python3-torch 1.13: `make deps`)\n");
        return 0;
    }
    const char *model = getenv("BENCH_TORCH_MODEL") ? getenv("BENCH_TORCH_MODEL") : "rtdetr-l";
    int imgsz = env_int("BENCH_TORCH_IMGSZ", 320, 64, 2048);
    int batch = env_int("BENCH_TORCH_BATCH", 2, 1, 64);
    int threads = env_int("BENCH_TORCH_THREADS", 2, 1, 256);
    int rounds = env_int("BENCH_TORCH_ROUNDS", 3, 1, MAX_ROUNDS);
    int steps = env_int("BENCH_TORCH_STEPS", 4, 1, MAX_STEPS);
    int ranks = env_int("BENCH_TORCH_RANKS", 1, 1, 2);

    char dir[64] = "/tmp/bench_torch.XXXXXX", data[160], out[160], err[1024];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(data, sizeof data, "%s/synth", dir);
    int n_train = ranks * batch * (WARMUP + steps + 1);
    // 2 ranks: no background-only images. A rank whose whole batch has no box leaves the
    // decoder's matched-query parameters without grads, and DDP (find_unused_parameters off, as
    // Ultralytics) stops with the field report's error; at batch 1 that is any empty image.
    SynthConfig sc = {.out = data, .n = n_train * 5 / 4 + 1, .imgsz = imgsz, .classes = 3,
                      .empty = ranks > 1 ? 0.0 : 0.15, .seed = 5};
    // The set is rendered in a child: synth_generate starts OpenMP threads, and a process
    // whose OpenMP pool is running must not fork ours (libgomp's pool does not survive fork).
    SynthSummary *sum = mmap(NULL, sizeof *sum, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    CHECK(sum != MAP_FAILED, "mmap");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        if (synth_generate(&sc, sum, err, sizeof err) == 0) _exit(0);
        fprintf(stderr, "bench_torch: synth: %s\n", err);
        _exit(1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "synth failed");
    snprintf(data, sizeof data, "%s/synth/data.yaml", dir);
    snprintf(out, sizeof out, "%s/run", dir);

    TrainConfig c;
    train_config_default(&c);
    c.model = model;
    c.data = data;
    c.imgsz = imgsz;
    c.batch = batch;
    c.epochs = 1;
    c.nbs = batch; // AdamW every batch, as bench_step.py's --accumulate 1
    c.augment = false;
    c.val = false;
    c.threads = threads;
    c.out_dir = out;
    c.log = fopen("/dev/null", "w");
    c.on_step = on_step;

    // Both sides' OpenBLAS run the same core: ours picks it from cpuid (kernels/cpu/blas.c),
    // PyTorch's follows OPENBLAS_CORETYPE, which machines often set to an older core for every
    // program. PyTorch's convolutions are oneDNN's, which picks its instructions itself.
    const char *core = blas_core();
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    char load[128];
    load_line(load, sizeof load);
    printf("bench_torch: %s %d px, batch %d, %d threads%s, %d rounds of ours then PyTorch (%d "
           "warm-up + %d timed steps a block), %d train images; OpenBLAS core %s on both sides; "
           "load at start %s\n",
           model, imgsz, batch, threads, ranks > 1 ? " per rank x 2 DDP ranks" : "", rounds, WARMUP,
           steps, sum->n_train, core ? core : "(OpenBLAS's own choice)", load);
    Side *ours = xcalloc(1, sizeof *ours), *torch = xcalloc(1, sizeof *torch);
    int rc = 0;
    for (int r = 0; r < rounds && rc == 0; r++) {
        if (run_ours(&c, ranks, steps, ours, r) ||
            run_torch(model, imgsz, batch, threads, ranks, data, steps, torch, r)) {
            rc = 1;
            break;
        }
        load_line(load, sizeof load);
        printf("bench_torch: round %d: ours %.3f s, PyTorch %.3f s a step (medians): ratio %.2f; "
               "load %s\n",
               r + 1, ours->round_median[r], torch->round_median[r],
               ours->round_median[r] / torch->round_median[r], load);
    }
    if (rc == 0) {
        double mo = bench_median(ours->steps, ours->n), mt = bench_median(torch->steps, torch->n);
        double ratios[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) ratios[r] = ours->round_median[r] / torch->round_median[r];
        printf("bench_torch: ours    median %.3f s a step (%d steps), peak RSS %.2f GiB\n", mo,
               ours->n, ours->peak_rss_gb);
        printf("bench_torch: PyTorch median %.3f s a step (%d steps), peak RSS %.2f GiB\n", mt,
               torch->n, torch->peak_rss_gb);
        printf("bench_torch: ratio ours / PyTorch: %.2f (medians); per round: median %.2f "
               "(goal <= %.2f); memory %.2f\n",
               mo / mt, bench_median(ratios, rounds), ranks > 1 ? 0.5 : 0.35,
               ours->peak_rss_gb / torch->peak_rss_gb);
    }
    fclose(c.log);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_torch: could not remove %s\n", dir);
    free(ours);
    free(torch);
    return rc;
}
