/* test_sampler.c -- DistributedSampler semantics: hand-computed index lists without shuffle
 * (world 1, 2, 3; padding by the first indices; padding longer than the dataset), and with
 * shuffle: every rank strides the same epoch permutation, the padded total covers every index,
 * epochs differ, the same (seed, epoch) repeats exactly. */
#include <stdbool.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/data/sampler.h"

static void expect_ranks(int64_t n, int world, const int64_t *want /* world x per_rank */,
                         int64_t per_rank) {
    for (int r = 0; r < world; r++) {
        Sampler s;
        sampler_init(&s, n, world, r, false, 0);
        EXPECT(s.per_rank == per_rank, "n %lld world %d: per_rank %lld", (long long)n, world,
               (long long)s.per_rank);
        int64_t got[16];
        sampler_epoch(&s, 0, got);
        for (int64_t k = 0; k < per_rank; k++)
            EXPECT(got[k] == want[r * per_rank + k], "n %lld world %d rank %d [%lld] = %lld, expected %lld",
                   (long long)n, world, r, (long long)k, (long long)got[k],
                   (long long)want[r * per_rank + k]);
    }
}

static void test_unshuffled(void) {
    expect_ranks(5, 1, (int64_t[]){0, 1, 2, 3, 4}, 5);
    // 5 on 2 ranks: total 6, padded list 0 1 2 3 4 | 0
    expect_ranks(5, 2, (int64_t[]){0, 2, 4, 1, 3, 0}, 3);
    // 10 on 3 ranks: total 12, padded 0..9 | 0 1
    expect_ranks(10, 3, (int64_t[]){0, 3, 6, 9, 1, 4, 7, 0, 2, 5, 8, 1}, 4);
    // 6 on 3 ranks: no padding
    expect_ranks(6, 3, (int64_t[]){0, 3, 1, 4, 2, 5}, 2);
    // 2 on 5 ranks: padding (3) longer than the dataset repeats it: 0 1 | 0 1 0
    expect_ranks(2, 5, (int64_t[]){0, 1, 0, 1, 0}, 1);
}

static void test_shuffled(void) {
    const int64_t n = 11;
    Sampler one;
    sampler_init(&one, n, 1, 0, true, 123);
    int64_t perm[11], again[11], next[11];
    sampler_epoch(&one, 4, perm);
    sampler_epoch(&one, 4, again);
    sampler_epoch(&one, 5, next);
    bool seen[11] = {false};
    for (int i = 0; i < n; i++) seen[perm[i]] = true;
    bool all = true, identity = true;
    for (int i = 0; i < n; i++) all &= seen[i], identity &= perm[i] == i;
    EXPECT(all && !identity, "world 1: a permutation of 0..10, not the identity");
    EXPECT(!memcmp(perm, again, sizeof perm), "the same (seed, epoch) repeats");
    EXPECT(memcmp(perm, next, sizeof perm) != 0, "another epoch, another order");
    Sampler other_seed;
    sampler_init(&other_seed, n, 1, 0, true, 124);
    sampler_epoch(&other_seed, 3, again); // seed + epoch = 127 = 123 + 4: the same permutation
    EXPECT(!memcmp(perm, again, sizeof perm), "the generator is seeded with seed + epoch");

    const int world = 3; // 11 on 3 ranks: per_rank 4, padded with perm[0]
    int count[11] = {0};
    for (int r = 0; r < world; r++) {
        Sampler s;
        sampler_init(&s, n, world, r, true, 123);
        int64_t got[4];
        sampler_epoch(&s, 4, got);
        for (int k = 0; k < 4; k++) {
            EXPECT(got[k] == perm[(r + k * world) % n], "rank %d [%d] = %lld", r, k, (long long)got[k]);
            count[got[k]]++;
        }
    }
    for (int i = 0; i < n; i++)
        EXPECT(count[i] == 1 + (i == perm[0]), "index %d visited %d times", i, count[i]);
}

int main(void) {
    test_unshuffled();
    test_shuffled();
    return expect_report();
}
