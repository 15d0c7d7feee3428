/* comm.h -- the process group: collectives over every rank of a run (PyTorch's ProcessGroup,
 * in C), backed by Gloo over TCP and rendezvoused through the run's Store. Each group runs its
 * collectives on one worker thread, strictly in launch order, so every rank must launch the
 * same collectives in the same order. Allreduce is asynchronous (a work handle); the others
 * block. Not a NCCL backend, not a general tensor library: float sums, raw-byte gathers.
 * Failures (timeout, a peer gone) return -1 with one line in err; once a collective fails,
 * the group is broken and every later one fails with the same reason. */
#ifndef TRAINER_DIST_COMM_H
#define TRAINER_DIST_COMM_H

#include "trainer/dist/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ProcessGroup ProcessGroup;
typedef struct PgWork PgWork;

// Connects rank (of world) to every other rank: addresses are exchanged through store under
// keys private to this group (groups are numbered per process, so every rank must create its
// groups in the same order). The Gloo device binds the interface GLOO_SOCKET_IFNAME names;
// else 127.0.0.1 when MASTER_ADDR is unset or loopback (one machine); else this machine's
// hostname, as PyTorch does. timeout_ms bounds the connection and every later
// collective. Blocks until all ranks have joined; returns NULL with one line in err on
// failure. The store must outlive the group.
ProcessGroup *pg_new_gloo(Store *store, int rank, int world, int timeout_ms, char *err,
                          size_t errlen);
int pg_rank(const ProcessGroup *pg);
int pg_world(const ProcessGroup *pg);
// Number of collectives launched on pg so far; equal across ranks that launched the same ones.
uint64_t pg_seq(const ProcessGroup *pg);

// Launches an in-place sum of data[0..n) across ranks. data must stay valid and untouched
// until the work completes. Returns a handle the caller waits on and frees.
PgWork *pg_allreduce_sum(ProcessGroup *pg, float *data, int64_t n);
// Blocks until the work completes: 0, or -1 with the reason in err.
int pg_work_wait(PgWork *w, char *err, size_t errlen);
// True once the work has completed (successfully or not); never blocks.
bool pg_work_test(PgWork *w);
// Waits for the work if it is still running, then frees it.
void pg_work_free(PgWork *w);

// Blocking collectives, queued behind any running allreduce: 0 or -1 with err.
// data[0..n) on every rank becomes root's.
int pg_broadcast(ProcessGroup *pg, float *data, int64_t n, int root, char *err, size_t errlen);
// out[r*bytes .. (r+1)*bytes) becomes rank r's in[0..bytes); out holds world*bytes.
int pg_allgather(ProcessGroup *pg, const void *in, size_t bytes, void *out, char *err,
                 size_t errlen);
int pg_barrier(ProcessGroup *pg, char *err, size_t errlen);

// Waits for queued collectives, then disconnects and frees pg.
void pg_free(ProcessGroup *pg);

#ifdef __cplusplus
}
#endif

#endif
