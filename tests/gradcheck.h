/* gradcheck.h -- finite-difference gradient checks for ops (house style §2.8).
 *
 * The op under test is a GcForward that builds y from leaf inputs on a tape. The check uses
 * loss = sum_i w_i * y_i with fixed random w (accumulated in double), runs tape_backward with
 * d(y) = w, and compares every input's analytic gradient with the central difference
 * (loss(x + h) - loss(x - h)) / 2h, at up to max_coords sampled coordinates per input.
 * Relative error |a - n| / max(floor, |a| + |n|) must stay below tol. */
#ifndef TESTS_GRADCHECK_H
#define TESTS_GRADCHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "trainer/tape.h"

typedef Tensor *(*GcForward)(Tape *t, Tensor *const *inputs, void *user);

typedef struct GcOptions {
    double h;          // finite-difference step (default 1e-2 for fp32 ops of O(1) values)
    double tol;        // max relative error (default 1e-2)
    double floor;      // denominator floor (default 1e-3)
    int max_coords;    // per input (default 1000)
    bool training;     // tape->training during the check (false unless set)
} GcOptions;

// Returns the number of failing coordinates (0 = pass) and prints the worst one per input.
// inputs[i] must be tensor_leaf()s; their data is perturbed and restored.
int gradcheck(const char *name, GcForward f, void *user, Tensor *const *inputs, int n_in,
              GcOptions opt);

// An arena and a tape over it, the fixture of most op tests.
typedef struct GcTape {
    Arena arena;
    Tape tape;
} GcTape;
Tape *gc_tape_init(GcTape *f, int n_threads);
void gc_tape_free(GcTape *f);

// Deterministic test data: xorshift-based uniform floats in [lo, hi).
void gc_fill_uniform(Tensor *x, uint64_t seed, float lo, float hi);

#endif
