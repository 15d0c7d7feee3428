/* fault.h -- fault injection for the DDP failure catalog: `fault=KIND:key=value,...` train
 * arguments (several may be given) that make one rank do what real code does when it goes
 * wrong. The trainer applies each at the point where the real mechanism lives; nothing fakes
 * an event: the reducer, the process group and the probe see what they would see.
 *   nogt:rank=R,iter=I         rank R's batch at iteration I keeps its images but loses every
 *                              label (a real zero-box batch: RT-DETR's box losses become
 *                              constants, 43 rtdetr-l tensors get no gradient)
 *   unused:param=GLOB,rank=R   on rank R, every iteration, the parameters whose names match
 *                              GLOB (fnmatch, e.g. 'model.28.dec_score_head.*') do not reach
 *                              the loss: their graph edges are cut at the end of the forward,
 *                              before DDP's post-forward search, as when a head's output is
 *                              detached or left out of the loss (so find_unused_parameters
 *                              finds them unused and the run trains through, as PyTorch's does)
 *   skip_backward:rank=R,iter=I rank R runs iteration I's forward, then skips backward and the
 *                              step (a per-rank `continue`)
 *   uneven:rank=R,batches=K    rank R runs K fewer batches per epoch (an unequal shard)
 *   no_sync:rank=R,iter=I      rank R runs iteration I under ddp.no_sync() (the others sync)
 *   bucket_cap:rank=R,mb=M     rank R builds DDP with bucket_cap_mb=M (another bucket layout;
 *                              with check_ddp_settings=false the ranks go on as PyTorch's do)
 *   kill:rank=R,iter=I,phase=P rank R is SIGKILLed at iteration I in P: forward, backward or
 *                              allreduce (while waiting for its first bucket)
 *   slow:rank=R,ms=M           rank R sleeps M ms in every forward (a straggler)
 *   shape:rank=R               rank R's model has one parameter of another shape (the first
 *                              decoder score head with one class more) */
#ifndef TRAINER_FAULT_H
#define TRAINER_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    FAULT_NOGT,
    FAULT_UNUSED,
    FAULT_SKIP_BACKWARD,
    FAULT_UNEVEN,
    FAULT_NO_SYNC,
    FAULT_BUCKET_CAP,
    FAULT_KILL,
    FAULT_SLOW,
    FAULT_SHAPE,
} FaultKind;

typedef enum { FAULT_PHASE_FORWARD, FAULT_PHASE_BACKWARD, FAULT_PHASE_ALLREDUCE } FaultPhase;

typedef struct Fault {
    FaultKind kind;
    int rank;           // the rank it applies to
    int64_t iter;       // the iteration (0-based count of batches over all epochs), or -1
    int64_t batches;    // uneven
    int64_t ms;         // slow
    double mb;          // bucket_cap
    FaultPhase phase;   // kill
    char param[128];    // unused: the name pattern
} Fault;

#define FAULT_MAX 16

// Parses one spec (the text after "fault="). Returns 0, or -1 with one line in err naming the
// spec, the bad part and what was expected.
int fault_parse(const char *spec, Fault *out, char *err, size_t errlen);

// The first fault of `kind` for `rank` at iteration ni (ni < 0: any iteration), or NULL.
const Fault *fault_find(const Fault *faults, int n, FaultKind kind, int rank, int64_t ni);
// Whether a fault of `kind` hits `rank` at iteration ni.
bool fault_hits(const Fault *faults, int n, FaultKind kind, int rank, int64_t ni);

#endif
