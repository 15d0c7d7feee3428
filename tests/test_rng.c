/* test_rng.c -- trainer/rng.h: same seed, same stream; ranges; and the moments and
 * uniformity of each distribution over 1e5 draws. Bounds are several standard errors wide
 * (stated at each), loose enough never to flake for a fixed seed, tight enough to catch a
 * wrong scale, offset or a stuck generator. */
#include "tests/expect.h"
#include "trainer/rng.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#define N_DRAWS 100000

static void test_determinism(void) {
    Rng a, b, c;
    rng_init(&a, 42);
    rng_init(&b, 42);
    rng_init(&c, 43);
    bool same = true, differs = false;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_u64(&a), y = rng_u64(&b), z = rng_u64(&c);
        same = same && x == y;
        differs = differs || x != z;
    }
    EXPECT(same, "two generators with seed 42 diverged");
    EXPECT(differs, "seeds 42 and 43 gave the same 1000 draws");
    // Re-seeding restarts the stream, for every distribution.
    rng_init(&a, 7);
    float u0 = rng_uniform(&a), n0 = rng_normal(&a);
    uint64_t k0 = rng_below(&a, 1000);
    rng_init(&a, 7);
    EXPECT(rng_uniform(&a) == u0 && rng_normal(&a) == n0 && rng_below(&a, 1000) == k0,
           "re-seeding did not restart the stream");
    // Seed 0 must not leave the xoshiro state all zero (it would then return 0 for ever).
    rng_init(&a, 0);
    uint64_t or_all = 0;
    for (int i = 0; i < 8; i++) or_all |= rng_u64(&a);
    EXPECT(or_all != 0, "seed 0 gives a stuck generator");
}

static void test_uniform(void) {
    Rng r;
    rng_init(&r, 1);
    double sum = 0, sum2 = 0;
    float lo = 1, hi = 0;
    int bins[10] = {0};
    for (int i = 0; i < N_DRAWS; i++) {
        float u = rng_uniform(&r);
        lo = fminf(lo, u);
        hi = fmaxf(hi, u);
        sum += u;
        sum2 += (double)u * u;
        if (u >= 0.0f && u < 1.0f) bins[(int)(u * 10.0f)]++;
    }
    EXPECT(lo >= 0.0f && hi < 1.0f, "uniform outside [0,1): min %g max %g", lo, hi);
    EXPECT(lo < 1e-3f && hi > 1.0f - 1e-3f, "uniform does not cover [0,1): min %g max %g", lo, hi);
    double mean = sum / N_DRAWS, var = sum2 / N_DRAWS - mean * mean;
    // Standard error of the mean: sqrt(1/12 / 1e5) = 0.0009; 0.005 is > 5 of them.
    EXPECT(fabs(mean - 0.5) < 0.005, "uniform mean %g, want 0.5", mean);
    EXPECT(fabs(var - 1.0 / 12.0) < 0.002, "uniform variance %g, want %g", var, 1.0 / 12.0);
    // Each tenth holds 1e4 +- 95 (binomial sd); 500 is > 5 sd.
    for (int b = 0; b < 10; b++)
        EXPECT(abs(bins[b] - N_DRAWS / 10) < 500, "uniform bin %d holds %d", b, bins[b]);
    for (int i = 0; i < 1000; i++) {
        float x = rng_range(&r, -3.0f, 5.0f);
        if (x < -3.0f || x >= 5.0f) {
            EXPECT(false, "rng_range(-3, 5) gave %g", x);
            break;
        }
    }
}

static void test_normal(void) {
    Rng r;
    rng_init(&r, 2);
    double sum = 0, sum2 = 0, sum4 = 0;
    int within1 = 0;
    bool finite = true;
    for (int i = 0; i < N_DRAWS; i++) {
        double x = rng_normal(&r);
        finite = finite && isfinite(x);
        sum += x;
        sum2 += x * x;
        sum4 += x * x * x * x;
        within1 += fabs(x) < 1.0;
    }
    EXPECT(finite, "a normal draw is not finite");
    double mean = sum / N_DRAWS, sd = sqrt(sum2 / N_DRAWS - mean * mean);
    // Standard errors: mean 0.0032, sd 0.0022, kurtosis ~0.015, P(|x|<1) 0.0015.
    EXPECT(fabs(mean) < 0.02, "normal mean %g, want 0", mean);
    EXPECT(fabs(sd - 1.0) < 0.015, "normal sd %g, want 1", sd);
    EXPECT(fabs(sum4 / N_DRAWS - 3.0) < 0.15, "normal 4th moment %g, want 3", sum4 / N_DRAWS);
    EXPECT(fabs((double)within1 / N_DRAWS - 0.6827) < 0.01, "P(|x| < 1) = %g, want 0.683",
           (double)within1 / N_DRAWS);
}

static void test_below(void) {
    Rng r;
    rng_init(&r, 3);
    enum { K = 7 };
    int counts[K] = {0};
    bool in_range = true;
    for (int i = 0; i < N_DRAWS; i++) {
        uint64_t k = rng_below(&r, K);
        if (k >= K) in_range = false;
        else counts[k]++;
    }
    EXPECT(in_range, "rng_below(%d) out of range", K);
    // Chi-square with 6 degrees of freedom: P(chi2 > 30) is about 4e-5.
    double chi2 = 0, e = (double)N_DRAWS / K;
    for (int k = 0; k < K; k++) chi2 += (counts[k] - e) * (counts[k] - e) / e;
    EXPECT(chi2 < 30.0, "rng_below(%d) chi-square %g over 6 dof", K, chi2);
    bool ones = true;
    for (int i = 0; i < 100; i++) ones = ones && rng_below(&r, 1) == 0;
    EXPECT(ones, "rng_below(1) is not always 0");
    // A bound just over 2^63 rejects almost half the raw draws: results stay below it and
    // land in both halves.
    const uint64_t big = (1ull << 63) + 12345;
    bool big_ok = true;
    int upper = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t k = rng_below(&r, big);
        big_ok = big_ok && k < big;
        upper += k >= big / 2;
    }
    EXPECT(big_ok, "rng_below(2^63 + 12345) out of range");
    EXPECT(upper > 400 && upper < 600, "rng_below(2^63 + 12345): %d of 1000 in the upper half",
           upper);
}

int main(void) {
    test_determinism();
    test_uniform();
    test_normal();
    test_below();
    return expect_report();
}
