/* parity.h -- the kernel parity harness: every field of the Backend table run on a reference
 * backend (the CPU) and on a backend under test, on the same inputs, and compared.
 * A case (tests/parity_cases.c) is a function that makes its buffers through the p*() helpers
 * below and calls one or more kernels of p->be; the harness runs it on the reference once and
 * on the backend under test twice, and compares every output buffer:
 * - inputs (pin*) hold the same pseudo-random values on every run; outputs (pout*) start at
 *   the same nonzero values, so a backward that overwrites instead of accumulating, or a
 *   forward that leaves an element unwritten, differs from the reference;
 * - each buffer has GUARD floats of the same values before and after it, compared too: a
 *   kernel that writes past its range differs;
 * - a float agrees when both are NaN, or the same infinity, or both finite within
 *   atol + rtol * |reference| (the row's tolerance, with its reason beside it);
 * - the two runs under test must be equal bit for bit (the determinism check), except buffers
 *   a case marks nondeterministic (atomics), which are held to the tolerance alone.
 * Devices: buffers live in the backend's memory and are filled and read through its
 * to_device / to_host only, so the harness runs unchanged on the CPU, the fake device and CUDA.
 * Used by test_parity (CUDA against the CPU) and test_parity_harness (the harness proven on
 * the CPU: CPU against itself, and against broken copies of the CPU table). */
#ifndef TESTS_PARITY_H
#define TESTS_PARITY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/backend.h"

#define PARITY_MAX_ARGS 24
#define PARITY_MAX_PARAMS 16

// One row of the table: a case function, the shape parameters it reads (v[]), whether its
// inputs hold NaN and infinities, the fields it exercises and its tolerance with the reason.
typedef struct Pc Pc;
typedef struct ParityCase {
    const char *name;             // unique; `-o NAME` runs rows named NAME*
    const char *fields;           // the Backend fields it calls, space-separated
    void (*run)(Pc *p);           // makes buffers, calls the kernels
    int64_t v[PARITY_MAX_PARAMS]; // shape parameters, meaning per case function
    bool special;                 // pin_sp inputs start with NaN, +inf, -inf, 0, -0
    double atol, rtol;            // |test - ref| <= atol + rtol * |ref|
    const char *why;              // the reason for the tolerance
} ParityCase;

typedef struct PArg {
    char name[24];
    size_t elem;   // bytes per element (4 for float and int32, 8 for int64, 1 for masks)
    int64_t n;     // elements
    bool out;      // compared after the call
    bool is_float; // compared by value (else bit for bit)
    bool nondet;   // excluded from the run-twice equality
    void *host;    // guard + contents + guard as they start, the same on every run
    void *dev;     // the same on the backend of this run (kernels get dev + guard)
} PArg;

// The context a case function runs in: the backend of this run and its buffers.
struct Pc {
    const Backend *be;
    KernelCtx kc;
    const ParityCase *row;
    const int64_t *v; // row->v
    PArg args[PARITY_MAX_ARGS];
    int n_args;
};

// Guard floats before and after every buffer (64 bytes: the data stays 64-byte aligned).
#define PARITY_GUARD 16

// Inputs: n floats uniform in [lo, hi); pin_sp's first five are NaN, +inf, -inf, 0, -0 when
// the row is `special`; n indices in [0, n_src).
const float *pin(Pc *p, const char *name, int64_t n, float lo, float hi);
const float *pin_sp(Pc *p, const char *name, int64_t n, float lo, float hi);
const int64_t *pin_idx(Pc *p, const char *name, int64_t n, int64_t n_src);
// Inputs with values the case chose (copied), e.g. integer-valued floats for ties.
const float *pin_values(Pc *p, const char *name, int64_t n, const float *values);
const uint8_t *pin_bytes(Pc *p, const char *name, int64_t n, const uint8_t *values);
// Outputs: n floats (or int32s) starting at the same nonzero values on every run; pout_sp's
// first five are NaN, +inf, -inf, 0, -0 when the row is `special` (a kernel must not read them).
float *pout(Pc *p, const char *name, int64_t n);
float *pout_sp(Pc *p, const char *name, int64_t n);
int32_t *pout_i32(Pc *p, const char *name, int64_t n);
// Marks the output just made as written by atomics: held to the tolerance, not bitwise.
void pnondet(Pc *p);

// The table.
extern const ParityCase parity_cases[];
extern const int parity_n_cases;

typedef struct ParityResult {
    int rows, failed; // rows run, rows with any failure below
    int mismatches;   // elements outside the tolerance (all rows)
    int nondet;       // rows whose two runs under test differed
    int missing;      // rows skipped because a field they call is NULL on either backend
} ParityResult;

// Runs every row (or, when `only` is a comma-separated list, those whose name starts with an
// item of it or that call a field it names) on `ref` and twice on `test`; one line per row to
// `log`, details of failures after it.
ParityResult parity_run(const Backend *ref, const Backend *test, const char *only, FILE *log);

// The coverage list of rows[0..n_rows) (normally the table): every Backend field, whether
// `test` fills it and the rows that call it. Returns the number of fields no row calls, plus
// the table slots the list does not name (a field added to backend.h without a line in
// tests/parity.c), plus the row words that name no Backend field: 0 when complete.
int parity_coverage(const ParityCase *rows, int n_rows, const Backend *test, FILE *out);

#endif
