/* sampler.h -- which dataset indices a rank visits in an epoch: PyTorch's DistributedSampler
 * (shuffle, drop_last=False) with our own generator instead of torch.randperm. With world 1 it
 * is the single-process sampler. Knows nothing of images or batches. */
#ifndef TRAINER_DATA_SAMPLER_H
#define TRAINER_DATA_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct Sampler {
    int64_t dataset_len; // > 0
    int world, rank;     // 0 <= rank < world
    bool shuffle;
    uint64_t seed;
    int64_t per_rank; // num_samples = ceil(dataset_len / world), the same on every rank
} Sampler;

void sampler_init(Sampler *s, int64_t dataset_len, int world, int rank, bool shuffle,
                  uint64_t seed);

// Writes the rank's s->per_rank indices for `epoch` into out. The epoch's order is a
// Fisher-Yates permutation from rng_init(seed + epoch) (identity without shuffle), padded by
// repeating its first indices (cyclically, if it must be repeated more than once) to
// per_rank * world; rank r takes positions r, r + world, r + 2 world, ...
void sampler_epoch(const Sampler *s, int64_t epoch, int64_t *out);

#endif
