/* checkpoint.h -- the training checkpoint: everything a run needs to continue bit for bit
 * (model parameters and buffers, optimizer state, EMA, generator states, schedule progress),
 * in one binary file of our own (not Ultralytics' .pt pickle; weights stay float32).
 *
 * File (little-endian): "DDPDBGCK", u32 version, u32 byte-order mark 0x01020304, then the
 * sections HEADER, LAYOUT, MODEL, [OPTIM], [EMA], RNG, END in that order, each as
 * char tag[8], u64 payload bytes, payload. LAYOUT holds every parameter's and buffer's name and
 * shape, so a checkpoint of another model is refused; END holds a 64-bit FNV-1a checksum of all
 * bytes before it. Saving writes "<path>.tmp" and renames it over path (atomic on POSIX).
 * Gradients are not saved: save between optimizer steps (after zero_grad), as Ultralytics
 * saves at an epoch's end; then resuming is bit-exact (tests/test_checkpoint.c). */
#ifndef TRAINER_CHECKPOINT_H
#define TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/nn/module.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/ema.h"
#include "trainer/rng.h"

#define CHECKPOINT_VERSION 1

// Where the run is: the training loop's counters (Ultralytics' BaseTrainer names in comments).
typedef struct CheckpointProgress {
    int64_t epoch;                // the epoch to continue in
    int64_t iteration;            // ni of the next batch
    int64_t last_opt_step;        // ni of the last optimizer step, -1 before the first
    int64_t accumulate;           // self.accumulate
    int64_t scheduler_last_epoch; // LambdaLR.last_epoch
    double best_fitness;
} CheckpointProgress;

// What is saved, all borrowed. On load, every pointer must describe the same layout as the
// file (model name, nc, parameter and buffer names and shapes, optimizer kind, EMA and RNG
// presence and count); the file's values are then copied into them and into progress.
typedef struct Checkpoint {
    const char *model_name; // the model yaml's name, e.g. "rtdetr-l.yaml"
    int nc;
    Registry *model;        // parameters and buffers
    Optimizer *opt;         // NULL: no OPTIM section; else over model's parameters, in order
    Ema *ema;               // NULL: no EMA section; else made from model
    Rng *rngs;              // n_rngs generator states
    int n_rngs;
    CheckpointProgress progress;
} Checkpoint;

// Returns 0, or -1 with one line in err naming the file and the problem (cannot write ...).
// A failed save leaves an existing file at path untouched.
int checkpoint_save(const char *path, const Checkpoint *c, char *err, size_t errlen);
// Returns 0, or -1 with one line in err naming the file and what is wrong: cannot open, not a
// checkpoint (bad magic), another version, truncated, a section of the wrong size, a checksum
// mismatch, trailing bytes, or a checkpoint of another model / optimizer. The file is
// validated whole before anything in c is written: on -1, c is unchanged.
int checkpoint_load(const char *path, Checkpoint *c, char *err, size_t errlen);

#endif
