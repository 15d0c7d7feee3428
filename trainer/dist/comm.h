/* comm.h -- the process group: collectives over every rank of a run (PyTorch's ProcessGroup,
 * in C), rendezvoused through the run's Store, on one of two backends: Gloo over TCP
 * (comm_gloo.cc, always built) or NCCL on the GPU (comm_nccl.c, built where CUDA and NCCL are
 * found). Each group runs its collectives strictly in launch order (Gloo: on one worker
 * thread; NCCL: on one CUDA stream), so every rank must launch the same collectives in the
 * same order. Allreduce is asynchronous (a work handle); the others block. Not a general
 * tensor library: float sums and broadcasts, raw-byte gathers. Host arrays on both backends;
 * tensor data on a device (PgMemory) through the _device variants: NCCL reads CUDA memory
 * directly, Gloo stages it through (pinned) host memory as PyTorch's ProcessGroupGloo does for
 * CUDA tensors, so that several Gloo ranks may share one GPU.
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

// Where the tensor data of pg_allreduce_sum_device and pg_broadcast_device lives: a device's
// memory that host code may not touch (CUDA, or the fake device of the CPU tests), described
// by the caller from its Backend. The copies are synchronous with respect to the compute
// stream: to_host sees every kernel launched before it, and kernels launched after to_device
// see its bytes. The struct must outlive the group.
typedef struct PgMemory {
    const char *name; // "cuda", "fake", ...: named in errors
    // CUDA memory of device cuda_device, written by kernels on stream (a cudaStream_t; NULL:
    // the legacy default stream). NCCL needs it (it runs on that device, on the pointers
    // themselves, ordered after stream's work by an event); Gloo ignores it.
    bool cuda;
    int cuda_device;
    void *stream;
    void (*to_host)(void *dst, const void *src, size_t bytes);   // device -> host
    void (*to_device)(void *dst, const void *src, size_t bytes); // host -> device
    // Staging memory for Gloo (page-locked on CUDA, so that the copies run at full speed);
    // NULL: malloc and free.
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
} PgMemory;

struct Backend; // kernels/backend.h

// The PgMemory of backend b's tensor memory, filled into *out: NULL for the CPU (host arrays),
// else out with b's copies (the fake device; CUDA, on cuda_device, its kernels on stream). The
// staging is malloc'd until the Backend table has page-locked host memory of its own.
const PgMemory *pg_memory_of_backend(const struct Backend *b, int cuda_device, void *stream,
                                     PgMemory *out);

// The knobs of a group, as PyTorch's init_process_group takes them.
typedef struct PgOptions {
    // Bounds the join and every collective: PyTorch's timeout= (pg_default_timeout_ms when the
    // user gives none).
    int timeout_ms;
    // NULL: tensors are host arrays, and the _device variants are the plain ones.
    const PgMemory *memory;
    // NCCL only, test-only: each rank claims a host of its own (NCCL_HOSTID=<host>:ddpdbg-rank
    // <r>), so that ranks sharing one GPU pass NCCL's "Duplicate GPU detected" check; they then
    // talk over the network transport, not shared memory. Also on when DDPDBG_NCCL_HOSTID is
    // "rank" (pg_parse_nccl_hostid). Off by default, as in PyTorch.
    bool nccl_hostid_per_rank;
} PgOptions;

// PyTorch's default collective timeout for backend: 600 s for NCCL
// (kProcessGroupNCCLDefaultTimeout), 1800 s for Gloo (default_pg_timeout).
int pg_default_timeout_ms(const char *backend);
// The value of the train argument nccl_hostid= or of DDPDBG_NCCL_HOSTID: "rank" -> true,
// "off" or "" -> false; anything else is -1 with "<what>=<value>: expected rank or off" in err.
int pg_parse_nccl_hostid(const char *what, const char *value, bool *per_rank, char *err,
                         size_t errlen);

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
// pg_new with every option (PgOptions). NCCL with opts->memory needs CUDA memory (anything
// else: NULL with "backend=nccl: tensors on <name> memory: NCCL needs CUDA memory"), and
// takes the device from it rather than from LOCAL_RANK. NCCL's joining deadline (timeout_ms)
// starts once the communicator's id is in hand (pg_share_id), not before the store wait.
ProcessGroup *pg_open(const char *backend, Store *store, int rank, int world,
                      const PgOptions *opts, char *err, size_t errlen);
// "gloo" or "nccl".
const char *pg_backend(const ProcessGroup *pg);
int pg_rank(const ProcessGroup *pg);
int pg_world(const ProcessGroup *pg);
// Number of collectives launched on pg so far; equal across ranks that launched the same ones.
uint64_t pg_seq(const ProcessGroup *pg);

// Launches an in-place sum of data[0..n) across ranks. data must stay valid and untouched
// until the work completes. Returns a handle the caller waits on and frees.
PgWork *pg_allreduce_sum(ProcessGroup *pg, float *data, int64_t n);
// The same for tensor data in the group's PgMemory (host arrays without one). Gloo: data is
// copied to a host staging buffer now and back when a wait or a successful test finds the work
// done (on the caller's thread), so data must not be read before. NCCL: the collective runs on
// data itself once the compute stream's work before this call is done.
PgWork *pg_allreduce_sum_device(ProcessGroup *pg, float *data, int64_t n);
// Blocks until the work completes: 0, or -1 with the reason in err.
int pg_work_wait(PgWork *w, char *err, size_t errlen);
// True once the work has completed (successfully or not); never blocks.
bool pg_work_test(PgWork *w);
// Waits for the work if it is still running, then frees it. A work of the _device variants
// must be freed before its group (it holds the group's staging buffer).
void pg_work_free(PgWork *w);

// Blocking collectives, queued behind any running allreduce: 0 or -1 with err.
// data[0..n) on every rank becomes root's.
int pg_broadcast(ProcessGroup *pg, float *data, int64_t n, int root, char *err, size_t errlen);
// The same for tensor data in the group's PgMemory (as pg_allreduce_sum_device).
int pg_broadcast_device(ProcessGroup *pg, float *data, int64_t n, int root, char *err,
                        size_t errlen);
// out[r*bytes .. (r+1)*bytes) becomes rank r's in[0..bytes); out holds world*bytes.
int pg_allgather(ProcessGroup *pg, const void *in, size_t bytes, void *out, char *err,
                 size_t errlen);
int pg_barrier(ProcessGroup *pg, char *err, size_t errlen);

// Waits for queued collectives, then disconnects and frees pg.
void pg_free(ProcessGroup *pg);

// NCCL's id exchange, in every build so that it is tested on the CPU: rank 0 stores blob under
// key, the others wait for it (bounded by the store's own timeout) and read it. *ready_ms
// (CLOCK_MONOTONIC ms) is when the blob is in hand: the joining deadline is ready_ms +
// timeout_ms, so a slow store wait (a rank starting late) never eats the join's time, as in
// PyTorch, whose NCCL init timeout starts after the store's get. 0, or -1 with err.
int pg_share_id(Store *store, const char *key, int rank, void *blob, size_t bytes,
                double *ready_ms, char *err, size_t errlen);
double pg_now_ms(void); // CLOCK_MONOTONIC in ms, the clock of ready_ms

// ---- the backend interface: comm.c and the backends only ------------------------------------
// comm.c validates arguments, owns rank, world, the group numbering and the sequence counter,
// then calls the backend's table. A backend's group and work are its own (void * here). seq is
// the collective's number, 1-based (pg_seq just after its launch), equal across ranks; Gloo
// tags its messages with seq - 1, NCCL names it in errors (PyTorch's SeqNum). Arguments reach
// the table already checked: 0 <= rank < world, timeout_ms > 0, n >= 0, 0 <= root < world.
// A backend without the _device entries gets device data staged by comm.c through host
// memory (PgMemory's copies).
typedef struct PgOps {
    const char *name; // what pg_backend answers
    // group_id numbers this process's groups (for store keys); NULL with one line in err.
    void *(*open)(Store *store, int rank, int world, const PgOptions *opts, int group_id,
                  char *err, size_t errlen);
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
    // On the group's PgMemory itself; NULL: comm.c stages. Only called when opts->memory was set.
    void *(*allreduce_sum_device)(void *group, float *data, int64_t n, uint64_t seq);
    int (*broadcast_device)(void *group, float *data, int64_t n, int root, uint64_t seq,
                            char *err, size_t errlen);
} PgOps;

extern const PgOps pg_gloo_ops; // comm_gloo.cc
extern const PgOps pg_nccl_ops; // comm_nccl.c; without NCCL its open says so and fails

#ifdef __cplusplus
}
#endif

#endif
