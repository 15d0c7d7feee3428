/* rng.h -- the trainer's one random number generator: xoshiro256** seeded by splitmix64.
 * Deterministic for a seed on every platform; not PyTorch's generator (initial weights and
 * noise match PyTorch in distribution, not bit for bit). */
#ifndef TRAINER_RNG_H
#define TRAINER_RNG_H

#include <stdint.h>

typedef struct Rng {
    uint64_t s[4];
} Rng;

void rng_init(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
// Uniform in [0, 1) with 24 random bits (every float value equally likely to be hit).
float rng_uniform(Rng *r);
// Uniform in [lo, hi).
float rng_range(Rng *r, float lo, float hi);
// Standard normal (Box-Muller, double precision inside).
float rng_normal(Rng *r);
// Uniform integer in [0, n), n > 0, without modulo bias.
uint64_t rng_below(Rng *r, uint64_t n);

#endif
