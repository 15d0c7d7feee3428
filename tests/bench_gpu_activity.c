/* bench_gpu_activity.c -- what a GPU activity record costs on its way into the trace
 * (probe/gpu_activity.c, the path every CUPTI record takes): records per second written as rows
 * (into a real probe's ring), kept out by the per-step bound, and NCCL kernels tied by stream
 * order; the writer thread's SQLite cost per row is bench_probe's. From these and a step's
 * records the CPU a step's GPU rows cost: a CUPTI buffer thread, not the training thread, pays
 * it. Prints timings only; exit 1 only if the probe cannot open. */
#include "probe/gpu_activity.h"
#include "probe/probe.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define RECORDS 200000
#define RUNS 5

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

// ns per record of RECORDS compute kernels (bound: rows_per_step, one step per 4096 records),
// or of NCCL kernels on a stream of collectives when nccl.
static double run(Probe *p, int rows_per_step, bool nccl) {
    GpuActivity *g = gpu_activity_new(p, rows_per_step);
    GpuRecord r = {.kind = GPU_RECORD_KERNEL, .stream = nccl ? 7 : 3,
                   .name = nccl ? "ncclDevKernel_AllReduce_Sum_f32_RING_LL" : "conv_fwd_kernel"};
    double t0 = now();
    for (int i = 0; i < RECORDS; i++) {
        if (i % 4096 == 0) gpu_activity_step(g, i / 4096, (int64_t)i * 1000);
        if (nccl) gpu_activity_collective(g, 7, (uint64_t)i);
        r.correlation = (uint32_t)i, r.start_ns = (int64_t)i * 1000, r.end_ns = r.start_ns + 500;
        gpu_activity_record(g, &r);
    }
    double ns = (now() - t0) * 1e9 / RECORDS;
    gpu_activity_free(g);
    return ns;
}

static double best(Probe *p, int rows_per_step, bool nccl) {
    double b = 1e300;
    for (int k = 0; k < RUNS; k++) {
        double ns = run(p, rows_per_step, nccl);
        b = ns < b ? ns : b;
    }
    return b;
}

int main(void) {
    char dir[] = "/tmp/bench_gpu_activity.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    // A ring large enough that no run waits for the writer: the emit's cost alone.
    ProbeConfig cfg = {.dir = dir, .rank = 0, .capacity = 1u << 26};
    Probe *p = probe_open(&cfg);
    if (!p) return 1;
    double written = best(p, 0, false), filtered = best(NULL, 1, false), tied = best(p, 0, true);
    printf("gpu_activity: %.0f ns per row written (kernel, no bound), %.0f ns per record kept "
           "out by the bound, %.0f ns per NCCL kernel tied (its tie row and its own)\n",
           written, filtered, tied);
    printf("a step at the default bound (%d rows): %.2f ms of a CUPTI thread's CPU before the "
           "writer's SQLite (bench_probe)\n",
           GPU_ROWS_PER_STEP_DEFAULT, GPU_ROWS_PER_STEP_DEFAULT * written * 1e-6);
    probe_close(p);
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}
