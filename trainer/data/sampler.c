/* sampler.c -- DistributedSampler.__iter__ (torch/utils/data/distributed.py) over rng.h. */
#include "trainer/data/sampler.h"

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/rng.h"

void sampler_init(Sampler *s, int64_t dataset_len, int world, int rank, bool shuffle,
                  uint64_t seed) {
    CHECK(dataset_len > 0 && world > 0 && rank >= 0 && rank < world,
          "sampler_init(len %lld, world %d, rank %d)", (long long)dataset_len, world, rank);
    *s = (Sampler){.dataset_len = dataset_len, .world = world, .rank = rank, .shuffle = shuffle,
                   .seed = seed, .per_rank = CEIL_DIV(dataset_len, (int64_t)world)};
}

void sampler_epoch(const Sampler *s, int64_t epoch, int64_t *out) {
    int64_t n = s->dataset_len;
    int64_t *order = xmalloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (s->shuffle) {
        Rng rng;
        rng_init(&rng, s->seed + (uint64_t)epoch);
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)rng_below(&rng, (uint64_t)i + 1);
            int64_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    // Position p of the padded list is order[p mod n]: exactly torch's indices += indices[:pad]
    // (or its repeated form when pad > n).
    for (int64_t k = 0; k < s->per_rank; k++) out[k] = order[(s->rank + k * s->world) % n];
    free(order);
}
