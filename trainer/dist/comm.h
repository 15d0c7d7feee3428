/* comm.h -- the process group: collectives over every rank of a run (PyTorch's ProcessGroup,
 * in C), rendezvoused through the run's Store, on one of two backends: Gloo over TCP
 * (comm_gloo.cc, always built) or NCCL on the GPU (comm_nccl.c, built where CUDA and NCCL are
 * found). Each group runs its collectives strictly in launch order (Gloo: on one worker
 * thread; NCCL: on one CUDA stream), so every rank must launch the same collectives in the
 * same order. Allreduce is asynchronous (a work handle); the others block. Not a general
 * tensor library: float sums, raw-byte gathers, over host arrays on both backends.
 * Failures (timeout, a peer gone) return -1 with one line in err; once a collective fails,
 * the group is broken and every later one fails with the same reason. The program must ignore
 * SIGPIPE (trainer/main.c does, as Python does): a write to a dead peer is then an error here.
 * comm.c implements the pg_* functions once, over the backend table at the end of this file. */
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
// else 127.0.0.1 when MASTER_ADDR is unset or loopback (one machine); else the local address
// the kernel routes to MASTER_ADDR from (PyTorch binds the hostname's address, which is often
// loopback in /etc/hosts), the hostname only when no route is found. timeout_ms bounds the
// connection and every later
// collective. Blocks until all ranks have joined; returns NULL with one line in err on
// failure. The store must outlive the group.
ProcessGroup *pg_new_gloo(Store *store, int rank, int world, int timeout_ms, char *err,
                          size_t errlen);
// The same for either backend: "gloo" (as pg_new_gloo) or "nccl"; anything else is NULL with
// "backend=<x>: expected gloo or nccl". NCCL: rank 0 publishes the communicator's unique id
// through store (a key private to this group, numbered with the Gloo groups); the rank uses
// CUDA device LOCAL_RANK (else rank) modulo the visible device count; joining blocks until all
// ranks have, and includes one internal allreduce that pg_seq does not count. A collective
// that has not completed timeout_ms after its launch aborts the communicator with PyTorch's
// watchdog line ("[Rank r] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..."),
// and a peer that NCCL reports gone aborts it at once; both are noticed when the group is
// polled (a wait, a test, a launch, pg_free), there is no watchdog thread. NULL with one line
// in err when this build has no NCCL, no CUDA device is visible, or joining fails.
ProcessGroup *pg_new(const char *backend, Store *store, int rank, int world, int timeout_ms,
                     char *err, size_t errlen);
// "gloo" or "nccl".
const char *pg_backend(const ProcessGroup *pg);
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

// ---- the backend interface: comm.c and the backends only ------------------------------------
// comm.c validates arguments, owns rank, world, the group numbering and the sequence counter,
// then calls the backend's table. A backend's group and work are its own (void * here). seq is
// the collective's number, 1-based (pg_seq just after its launch), equal across ranks; Gloo
// tags its messages with seq - 1, NCCL names it in errors (PyTorch's SeqNum). Arguments reach
// the table already checked: 0 <= rank < world, timeout_ms > 0, n >= 0, 0 <= root < world.
typedef struct PgOps {
    const char *name; // what pg_backend answers
    // group_id numbers this process's groups (for store keys); NULL with one line in err.
    void *(*open)(Store *store, int rank, int world, int timeout_ms, int group_id, char *err,
                  size_t errlen);
    // Never NULL: a launch that fails returns work that fails on wait.
    void *(*allreduce_sum)(void *group, float *data, int64_t n, uint64_t seq);
    int (*work_wait)(void *work, char *err, size_t errlen);
    bool (*work_test)(void *work);
    void (*work_free)(void *work); // waits first, as pg_work_free
    int (*broadcast)(void *group, float *data, int64_t n, int root, uint64_t seq, char *err,
                     size_t errlen);
    int (*allgather)(void *group, const void *in, size_t bytes, void *out, uint64_t seq,
                     char *err, size_t errlen);
    int (*barrier)(void *group, uint64_t seq, char *err, size_t errlen);
    void (*free)(void *group);
} PgOps;

extern const PgOps pg_gloo_ops; // comm_gloo.cc
extern const PgOps pg_nccl_ops; // comm_nccl.c; without NCCL its open says so and fails

#ifdef __cplusplus
}
#endif

#endif
