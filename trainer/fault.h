/* fault.h -- fault injection for the DDP failure catalog: `fault=KIND:key=value,...` train
 * arguments that make one rank do what real code does when it goes wrong. The trainer applies
 * them at the point where the real mechanism lives; nothing fakes an event.
 *   nogt:rank=R,iter=I   rank R's batch at iteration I keeps its images but loses every label
 *                        (a real zero-box batch: RT-DETR's box losses become constants). */
#ifndef TRAINER_FAULT_H
#define TRAINER_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { FAULT_NOGT } FaultKind;

typedef struct Fault {
    FaultKind kind;
    int rank;     // the rank it applies to
    int64_t iter; // the iteration (0-based count of batches over all epochs)
} Fault;

#define FAULT_MAX 16

// Parses one spec (the text after "fault="). Returns 0, or -1 with one line in err naming the
// spec, the bad part and what was expected.
int fault_parse(const char *spec, Fault *out, char *err, size_t errlen);

// Whether a fault of `kind` hits `rank` at iteration ni.
bool fault_hits(const Fault *faults, int n, FaultKind kind, int rank, int64_t ni);

#endif
