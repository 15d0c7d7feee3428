/* bench_stats.h -- what every benchmark measures with: a monotonic clock and order statistics
 * over a sample of seconds. Header-only (static functions); uses kernels/base.h's xmalloc. */
#ifndef DDPDBG_TESTS_BENCH_STATS_H
#define DDPDBG_TESTS_BENCH_STATS_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/base.h"

// Seconds on the monotonic clock (an arbitrary origin: only differences mean anything).
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// qsort comparator of doubles, ascending.
static inline int bench_by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The q-quantile of v[0..n) (sorts a copy): for q = 0.5 the median (the mean of the middle two
// when n is even), otherwise by nearest rank (numpy's 'higher': the p90 of 30 is the 27th).
// 0 for n == 0.
static inline double bench_quantile(const double *v, int n, double q) {
    if (n <= 0) return 0;
    double *c = xmalloc(sizeof(double) * (size_t)n);
    memcpy(c, v, sizeof(double) * (size_t)n);
    qsort(c, (size_t)n, sizeof(double), bench_by_double);
    double r;
    if (q == 0.5)
        r = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    else {
        int k = (int)(q * (double)n + 0.999999) - 1;
        r = c[k < 0 ? 0 : k >= n ? n - 1 : k];
    }
    free(c);
    return r;
}

static inline double bench_median(const double *v, int n) { return bench_quantile(v, n, 0.5); }

#endif
