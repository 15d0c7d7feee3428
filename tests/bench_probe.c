/* bench_probe.c -- what the flight recorder costs: events per second into the ring from one
 * thread (and from two at once), rows per second the writer thread moves into SQLite, the
 * writer's CPU per row at a training run's pace for three commit intervals, and the cost of an
 * emit with the probe off (a NULL Probe). Files go to a temporary directory. The
 * ring figures reset the tail between runs (a consumer that keeps up), so they time the
 * producer alone. Prints timings only; exit 1 only if the probe cannot open. */
#include "probe/probe.h"
#include "probe/ring.h"

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define RUNS 7
#define RING_CAPACITY (1u << 20)
#define WRITER_EVENTS (1u << 20)
// A 2-rank rtdetr-tiny step on this project's 2-core machine, as one rank's probe sees it
// (bench_trace): 340 records per step, about 11 steps a second.
#define PACE_ROWS 340
#define PACE_STEPS_PER_S 11
#define PACE_SECONDS 8

static double seconds(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double now(void) {
    return seconds(CLOCK_MONOTONIC);
}

// Until the writer has stored every record claimed so far.
static void wait_stored(const Probe *p) {
    for (ProbeStats st = probe_stats(p); st.stored < st.claimed; st = probe_stats(p))
        usleep(1000);
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct Producer {
    ProbeRing *ring;
    uint64_t n;
} Producer;

static void *produce(void *arg) {
    Producer *pr = arg;
    for (uint64_t i = 0; i < pr->n; i++)
        probe_ring_emit(pr->ring, PROBE_GRAD_READY, 0, 1, (int32_t)i, (int32_t)(i & 1023),
                        (int64_t)i, 1, NULL, 0);
    return NULL;
}

// Events per second into the ring from n_threads threads together (RING_CAPACITY in all).
static double ring_rate(ProbeRing *ring, int n_threads) {
    double rates[RUNS];
    for (int run = 0; run < RUNS; run++) {
        pthread_t th[2];
        Producer pr[2];
        double t0 = now();
        for (int i = 0; i < n_threads; i++) {
            pr[i] = (Producer){ring, RING_CAPACITY / (uint64_t)n_threads};
            if (n_threads == 1)
                produce(&pr[i]);
            else
                pthread_create(&th[i], NULL, produce, &pr[i]);
        }
        for (int i = 0; n_threads > 1 && i < n_threads; i++)
            pthread_join(th[i], NULL);
        rates[run] = RING_CAPACITY / (now() - t0);
        ProbeRingState st = probe_ring_state(ring);
        if (st.overruns)
            printf("  (run %d: %llu overruns)\n", run, (unsigned long long)st.overruns);
        ring_set_tail(ring, st.head - 1); // as if the writer had stored everything
    }
    return median(rates, RUNS);
}

// Rows per second the writer stores: WRITER_EVENTS emitted at once, timed until all are stored.
static double writer_rate(const char *dir, bool with_text, double *close_s) {
    double rates[3];
    for (int run = 0; run < 3; run++) {
        ProbeConfig cfg = {.dir = dir, .rank = run, .capacity = 2 * WRITER_EVENTS};
        Probe *p = probe_open(&cfg);
        if (!p) exit(1);
        double t0 = now();
        for (uint64_t i = 0; i < WRITER_EVENTS; i++) {
            if (with_text && i % 64 == 0)
                probe_emit(p, PROBE_COLL_LAUNCH, (int64_t)i / 600, 1, 3, (int64_t)i, 1000,
                           "local_used_map");
            else
                probe_emit(p, PROBE_GRAD_READY, (int64_t)i / 600, (int32_t)(i % 600), (int32_t)i, 1,
                           0, NULL);
        }
        wait_stored(p);
        rates[run] = WRITER_EVENTS / (now() - t0);
        double t1 = now();
        probe_close(p);
        *close_s = now() - t1;
    }
    return median(rates, 3);
}

// The writer's CPU per stored row when the rows come at a training run's pace: PACE_ROWS
// marked hooks per step, PACE_STEPS_PER_S steps a second, the writer committing every flush_ms.
// Its CPU is the process's less this (the emitting) thread's: no other thread runs.
static double writer_us_per_row(const char *dir, int rank, int flush_ms) {
    ProbeConfig cfg = {.dir = dir, .rank = rank, .flush_ms = flush_ms, .heartbeat_ms = 1000};
    Probe *p = probe_open(&cfg);
    if (!p) exit(1);
    usleep(300000); // the writer has stored the opening metadata
    double proc0 = seconds(CLOCK_PROCESS_CPUTIME_ID), self0 = seconds(CLOCK_THREAD_CPUTIME_ID);
    uint64_t rows = 0;
    for (int step = 0; step < PACE_STEPS_PER_S * PACE_SECONDS; step++) {
        for (int i = 0; i < PACE_ROWS; i++, rows++)
            probe_emit_at(p, 0, PROBE_GRAD_READY, PROBE_FLAG_MARKED, step, i, i, 1, i & 1);
        usleep(1000000 / PACE_STEPS_PER_S);
    }
    wait_stored(p);
    double writer =
        (seconds(CLOCK_PROCESS_CPUTIME_ID) - proc0) - (seconds(CLOCK_THREAD_CPUTIME_ID) - self0);
    probe_close(p);
    return 1e6 * writer / (double)rows;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

int main(void) {
    char dir[] = "/tmp/bench_probe.XXXXXX", path[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/bench.ring", dir);
    char err[512];
    ProbeRing *ring = probe_ring_create(path, RING_CAPACITY, 0, err, sizeof err);
    if (!ring) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double one = ring_rate(ring, 1), two = ring_rate(ring, 2);
    printf("ring, 1 thread:   %6.1f M events/s (%.1f ns per emit; median of %d runs of %u)\n",
           one / 1e6, 1e9 / one, RUNS, RING_CAPACITY);
    printf("ring, 2 threads:  %6.1f M events/s together (contended compare-and-swap on head)\n",
           two / 1e6);
    probe_ring_close(ring);

    double close_s;
    double rows = writer_rate(dir, false, &close_s);
    printf("writer -> SQLite: %6.2f M rows/s (%u events, median of 3; close %.0f ms)\n", rows / 1e6,
           WRITER_EVENTS, close_s * 1e3);
    rows = writer_rate(dir, true, &close_s);
    printf("  1 in 64 with a 14-byte text: %6.2f M rows/s\n", rows / 1e6);

    printf("writer at a training run's pace (%d rows per step, %d steps/s, %d s each; CPU per "
           "row, and per step):\n",
           PACE_ROWS, PACE_STEPS_PER_S, PACE_SECONDS);
    const int intervals[] = {200, 500, 1000};
    for (int i = 0; i < 3; i++) {
        double us = writer_us_per_row(dir, 10 + i, intervals[i]);
        printf("  commits every %4d ms: %.2f us per row, %.3f ms per step\n", intervals[i], us,
               us * PACE_ROWS / 1e3);
    }

    // Probe off: the cost of probe_emit(NULL, ...) over a loop that does the same volatile load.
    Probe *volatile off = NULL;
    const long n = 200000000;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        Probe *p = off;
        __asm__ volatile("" ::"r"(p));
    }
    double base = now() - t0;
    t0 = now();
    for (long i = 0; i < n; i++)
        probe_emit(off, PROBE_GRAD_READY, i, (int32_t)i, 0, 1, 0, NULL);
    double with = now() - t0;
    printf("probe off:        %.2f ns per emit (%.2f ns loop with the pointer load alone)\n",
           with / n * 1e9, base / n * 1e9);
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}
