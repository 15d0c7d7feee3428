/* comm_nccl.c -- the NCCL backend of comm.h (its PgOps table, pg_nccl_ops), built with
 * -DDDPDBG_HAVE_NCCL where the Makefile finds CUDA's nccl.h and libraries; elsewhere only a
 * stub whose open fails, naming the missing build.
 *
 * One group: a nonblocking NCCL communicator (so that joining and every collective can be
 * bounded by the timeout), one CUDA stream (the communication stream), a device staging buffer
 * and pinned host slabs. Tensor data in CUDA memory (the _device entries, PgMemory) is reduced
 * in place with no copy: an event recorded on the compute stream at launch, which the
 * communication stream waits for, orders the collective after the kernels that wrote the data,
 * and the work's own event after it tells a wait when the data is final. Host arrays (the
 * other entries: flags, indices, tests) are staged: host data -> pinned slab -> device
 * buffer, the NCCL call, device -> slab, then the event; the result reaches the caller's array
 * when a wait or test finds the event done. Everything is stream-ordered, so one device buffer
 * serves every collective in flight (it grows with cudaMallocAsync / cudaFreeAsync, never a
 * host sync); each work in flight has its own slab.
 *
 * No watchdog thread: whoever polls (wait, test, a launch, pg_free) plays PyTorch's watchdog.
 * The oldest unfinished collective past timeout_ms, or an error NCCL reports asynchronously
 * (ncclCommGetAsyncError: a peer gone), aborts the communicator (ncclCommAbort) and breaks the
 * group; every unfinished and later collective then fails with that one line. Not NCCL in
 * general: float sum, float broadcast, byte allgather, barrier; one device per rank.
 * Each launch (its copies in, the NCCL call, the copy back) runs between
 * probe_cupti_correlate_push(seq) and pop, so that a trace recording GPU activity ties its
 * kernels and copies to the collective's COLL_LAUNCH (probe/cupti.h; seq 0: joining's barrier),
 * and once NCCL has the call on its stream, probe_cupti_collective(stream, seq) names the
 * collective whose kernel comes next on it: a nonblocking communicator may launch the kernel
 * from a thread of its own, which no correlation reaches. */
#include "trainer/dist/comm.h"

#include "kernels/base.h"

#ifndef DDPDBG_HAVE_NCCL

static void *nccl_open(Store *store, int rank, int world, const PgOptions *opts, int group_id,
                       char *err, size_t errlen) {
    if (err && errlen > 0)
        snprintf(err, errlen, "backend=nccl: this build has no NCCL (built without CUDA; "
                              "rebuild where /usr/local/cuda has nccl.h)");
    return NULL;
}

// open never succeeds, so comm.c never reaches the other entries.
const PgOps pg_nccl_ops = {.name = "nccl", .open = nccl_open};

#else

#include "probe/cupti.h" // probe_cupti_correlate_*: no-ops unless GPU activity is recorded

#include <cuda_runtime.h>
#include <nccl.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

enum { ERR_MAX = 512 };
enum { WORK_RUNNING, WORK_OK, WORK_FAILED };

// PyTorch's OpType names. A barrier is an allreduce of one element there, and here.
typedef enum { OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER } OpType;
static const char *const op_names[] = {"ALLREDUCE", "BROADCAST", "ALLGATHER"};

typedef struct Slab {
    void *host; // pinned (cudaHostAlloc), kept until pg_free
    size_t bytes;
    bool busy;
} Slab;

typedef struct NcclWork NcclWork;

typedef struct NcclGroup {
    int rank, world, device, timeout_ms;
    ncclComm_t comm; // NULL once aborted
    cudaStream_t stream;
    // Tensor data in CUDA memory: the stream its kernels run on, and the event that orders a
    // collective after them (recorded anew at each launch).
    cudaStream_t compute;
    cudaEvent_t compute_ready;
    void *dev; // the device staging buffer, dev_bytes long
    size_t dev_bytes;
    Slab *slabs;
    int n_slabs;
    NcclWork *pending;    // launched and not yet final, oldest first
    pthread_mutex_t mu;   // guards all of the above and every pending work
    char broken[ERR_MAX]; // the first failure; empty while the group works
} NcclGroup;

struct NcclWork {
    NcclGroup *group;
    NcclWork *next; // in group->pending
    uint64_t seq;
    OpType op;
    int64_t numel_in, numel_out;
    double launched_ms;
    cudaEvent_t done; // recorded after the copy back; NULL until then
    int slab;         // index in group->slabs, -1 for none
    void *out;        // receives out_bytes from the slab on completion
    size_t out_bytes;
    char error[ERR_MAX];
    // WORK_*; once final it never changes and the work no longer touches its group, so a
    // work outlives pg_free (which finishes every pending one first).
    atomic_int status;
};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static const char *result_name(ncclResult_t r) {
    static const char *const names[] = {
        "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
        "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "ncclResult?";
}

// NCCL's last-error text may span lines; our errors are one line.
static void flatten(char *s) {
    for (; *s; s++)
        if (*s == '\n' || *s == '\r') *s = ' ';
}

// "WorkNCCL(SeqNum=.., OpType=.., NumelIn=.., NumelOut=.., Timeout(ms)=..)", as PyTorch prints it.
static void describe(const NcclWork *w, char *out, size_t len) {
    snprintf(out, len, "WorkNCCL(SeqNum=%llu, OpType=%s, NumelIn=%lld, NumelOut=%lld, "
                       "Timeout(ms)=%d)",
             (unsigned long long)w->seq, op_names[w->op], (long long)w->numel_in,
             (long long)w->numel_out, w->group->timeout_ms);
}

// ---- works: final states --------------------------------------------------------------------

static void work_fail(NcclWork *w, const char *reason) {
    snprintf(w->error, sizeof w->error, "%s", reason);
    // Its slab stays busy: after an abort a copy may still be landing in it.
    if (w->done) cudaEventDestroy(w->done);
    w->done = NULL;
    atomic_store(&w->status, WORK_FAILED);
}

static void work_complete(NcclWork *w) {
    NcclGroup *g = w->group;
    if (w->out_bytes > 0) memcpy(w->out, g->slabs[w->slab].host, w->out_bytes);
    if (w->slab >= 0) g->slabs[w->slab].busy = false;
    cudaEventDestroy(w->done);
    w->done = NULL;
    atomic_store(&w->status, WORK_OK);
}

// The first failure aborts the communicator (unblocking its kernels) and fails every pending
// work with the same line; later launches fail with it too.
static void group_break(NcclGroup *g, const char *reason) {
    if (g->broken[0]) return;
    snprintf(g->broken, sizeof g->broken, "%s", reason);
    flatten(g->broken);
    if (g->comm) ncclCommAbort(g->comm);
    g->comm = NULL;
    while (g->pending) {
        NcclWork *w = g->pending;
        g->pending = w->next;
        work_fail(w, g->broken);
    }
}

static void break_nccl(NcclGroup *g, const NcclWork *w, const char *call, ncclResult_t r) {
    char what[200], reason[ERR_MAX];
    describe(w, what, sizeof what);
    const char *last = g->comm ? ncclGetLastError(g->comm) : NULL;
    snprintf(reason, sizeof reason,
             "[Rank %d] NCCL error on %s: %s: %s: %s%s%s; the communicator was aborted",
             g->rank, what, call, result_name(r), ncclGetErrorString(r),
             last && *last ? ": " : "", last && *last ? last : "");
    group_break(g, reason);
}

static void break_cuda(NcclGroup *g, const NcclWork *w, const char *call, cudaError_t e) {
    char what[200], reason[ERR_MAX];
    describe(w, what, sizeof what);
    snprintf(reason, sizeof reason,
             "[Rank %d] CUDA error on %s: %s: %s: %s; the communicator was aborted", g->rank,
             what, call, cudaGetErrorName(e), cudaGetErrorString(e));
    group_break(g, reason);
}

static bool cuda_ok(NcclGroup *g, const NcclWork *w, const char *call, cudaError_t e) {
    if (e != cudaSuccess) break_cuda(g, w, call, e);
    return e == cudaSuccess;
}

// ---- the watchdog: run by every poll, under the group's lock ----------------------------------

// Completes, oldest first, the pending works whose copies back are done (stream order: a done
// work has only done works before it). Stops at a work still being launched (no event yet).
static void sweep(NcclGroup *g) {
    while (g->pending && g->pending->done && !g->broken[0]) {
        NcclWork *w = g->pending;
        cudaError_t e = cudaEventQuery(w->done);
        if (e == cudaErrorNotReady) return;
        if (!cuda_ok(g, w, "cudaEventQuery", e)) return;
        g->pending = w->next;
        work_complete(w);
    }
}

// Sweeps, then breaks the group if NCCL reports an asynchronous error (a peer gone, a network
// error) or the oldest unfinished work has run past the timeout, as PyTorch's watchdog does.
static void watch(NcclGroup *g) {
    sweep(g);
    NcclWork *oldest = g->pending;
    if (g->broken[0] || !oldest) return;
    ncclResult_t state = ncclSuccess, r = ncclCommGetAsyncError(g->comm, &state);
    if (r != ncclSuccess) state = r;
    if (state != ncclSuccess && state != ncclInProgress) {
        break_nccl(g, oldest, "asynchronous error", state);
        return;
    }
    double ran = now_ms() - oldest->launched_ms;
    if (ran >= g->timeout_ms) {
        char what[200], reason[ERR_MAX];
        describe(oldest, what, sizeof what);
        snprintf(reason, sizeof reason,
                 "[Rank %d] Watchdog caught collective operation timeout: %s ran for %lld "
                 "milliseconds before timing out.",
                 g->rank, what, (long long)ran);
        group_break(g, reason);
    }
}

static void group_lock(NcclGroup *g) {
    pthread_mutex_lock(&g->mu);
    cudaSetDevice(g->device); // the calling thread's current device is per thread
}

static void group_unlock(NcclGroup *g) { pthread_mutex_unlock(&g->mu); }

// Polls between checks: short at first (most collectives finish in microseconds), then 1 ms.
static void backoff(int *us) {
    usleep((useconds_t)*us);
    *us = MIN(2 * *us, 1000);
}

// ---- launching ---------------------------------------------------------------------------------

// A new pending work (the newest), or an already failed one when the group is broken.
static NcclWork *work_new(NcclGroup *g, OpType op, uint64_t seq, int64_t numel_in,
                          int64_t numel_out) {
    NcclWork *w = xcalloc(1, sizeof *w);
    w->group = g, w->op = op, w->seq = seq;
    w->numel_in = numel_in, w->numel_out = numel_out;
    w->launched_ms = now_ms();
    w->slab = -1;
    atomic_init(&w->status, WORK_RUNNING);
    if (g->broken[0]) {
        work_fail(w, g->broken);
        return w;
    }
    NcclWork **tail = &g->pending;
    while (*tail) tail = &(*tail)->next;
    *tail = w;
    return w;
}

static size_t round_up_pow2(size_t n, size_t at_least) {
    size_t p = at_least;
    while (p < n) p *= 2;
    return p;
}

// Makes the device buffer hold dev_bytes and gives w a free slab of host_bytes (0: none).
// The old buffer is freed in stream order, after the collectives still using it.
static bool stage(NcclGroup *g, NcclWork *w, size_t dev_bytes, size_t host_bytes) {
    if (g->dev_bytes < dev_bytes) {
        size_t want = round_up_pow2(dev_bytes, 4096);
        if (g->dev && !cuda_ok(g, w, "cudaFreeAsync", cudaFreeAsync(g->dev, g->stream)))
            return false;
        g->dev = NULL, g->dev_bytes = 0;
        if (!cuda_ok(g, w, "cudaMallocAsync", cudaMallocAsync(&g->dev, want, g->stream)))
            return false;
        g->dev_bytes = want;
    }
    if (host_bytes == 0) return true;
    for (int i = 0; i < g->n_slabs; i++)
        if (!g->slabs[i].busy && g->slabs[i].bytes >= host_bytes) {
            g->slabs[i].busy = true, w->slab = i;
            return true;
        }
    Slab s = {.bytes = round_up_pow2(host_bytes, 64 << 10), .busy = true};
    if (!cuda_ok(g, w, "cudaHostAlloc", cudaHostAlloc(&s.host, s.bytes, cudaHostAllocDefault)))
        return false;
    g->slabs = xrealloc(g->slabs, (size_t)(g->n_slabs + 1) * sizeof *g->slabs);
    g->slabs[g->n_slabs] = s;
    w->slab = g->n_slabs++;
    return true;
}

static void *slab_of(const NcclWork *w) { return w->group->slabs[w->slab].host; }

// A nonblocking communicator may answer ncclInProgress before the call is on the stream: waits
// (watching the timeout) until it is, so that the copy back lands after it.
static bool nccl_ok(NcclGroup *g, NcclWork *w, const char *call, ncclResult_t r) {
    for (int us = 10; r == ncclInProgress; backoff(&us)) {
        watch(g);
        if (g->broken[0]) return false;
        ncclResult_t q = ncclCommGetAsyncError(g->comm, &r);
        if (q != ncclSuccess) r = q;
    }
    if (r != ncclSuccess) break_nccl(g, w, call, r);
    if (r == ncclSuccess) probe_cupti_collective(g->stream, w->seq); // its kernel is next there
    return r == ncclSuccess;
}

// Queues the copy of out_bytes from the device buffer into w's slab, then w's event; on
// completion the slab's bytes go to out.
static void copy_back(NcclGroup *g, NcclWork *w, void *out, size_t out_bytes) {
    w->out = out, w->out_bytes = out_bytes;
    if (out_bytes > 0 &&
        !cuda_ok(g, w, "cudaMemcpyAsync",
                 cudaMemcpyAsync(slab_of(w), g->dev, out_bytes, cudaMemcpyDeviceToHost,
                                 g->stream)))
        return;
    cudaEvent_t done;
    if (!cuda_ok(g, w, "cudaEventCreate", cudaEventCreateWithFlags(&done, cudaEventDisableTiming)))
        return;
    if (!cuda_ok(g, w, "cudaEventRecord", cudaEventRecord(done, g->stream))) {
        cudaEventDestroy(done);
        return;
    }
    w->done = done;
}

// Copies bytes of host data into w's slab at offset, then to the device buffer at offset.
static bool copy_in(NcclGroup *g, NcclWork *w, const void *data, size_t bytes, size_t offset) {
    uint8_t *slab = slab_of(w);
    memcpy(slab + offset, data, bytes);
    return cuda_ok(g, w, "cudaMemcpyAsync",
                   cudaMemcpyAsync((uint8_t *)g->dev + offset, slab + offset, bytes,
                                   cudaMemcpyHostToDevice, g->stream));
}

// ---- waiting -----------------------------------------------------------------------------------

// One look at w without blocking (an abort aside): true once it is final.
static bool work_poll(NcclWork *w) {
    if (atomic_load(&w->status) != WORK_RUNNING) return true;
    NcclGroup *g = w->group;
    group_lock(g);
    watch(g);
    group_unlock(g);
    return atomic_load(&w->status) != WORK_RUNNING;
}

static int nccl_work_wait(void *work, char *err, size_t errlen) {
    NcclWork *w = work;
    for (int us = 10; !work_poll(w); backoff(&us)) {
    }
    if (atomic_load(&w->status) == WORK_OK) return 0;
    if (err && errlen > 0) snprintf(err, errlen, "%s", w->error);
    return -1;
}

static bool nccl_work_test(void *work) { return work_poll(work); }

static void nccl_work_free(void *work) {
    nccl_work_wait(work, NULL, 0);
    free(work);
}

static int wait_and_free(NcclWork *w, char *err, size_t errlen) {
    int rc = nccl_work_wait(w, err, errlen);
    free(w);
    return rc;
}

// ---- the collectives ---------------------------------------------------------------------------

static void *nccl_allreduce_sum(void *group, float *data, int64_t n, uint64_t seq) {
    NcclGroup *g = group;
    size_t bytes = (size_t)n * sizeof(float);
    group_lock(g);
    NcclWork *w = work_new(g, OP_ALLREDUCE, seq, n, n);
    probe_cupti_correlate_push(seq);
    if (atomic_load(&w->status) == WORK_RUNNING) {
        if (n == 0) {
            copy_back(g, w, NULL, 0); // only the event: it completes in launch order
        } else if (stage(g, w, bytes, bytes) && copy_in(g, w, data, bytes, 0) &&
                   nccl_ok(g, w, "ncclAllReduce",
                           ncclAllReduce(g->dev, g->dev, (size_t)n, ncclFloat, ncclSum, g->comm,
                                         g->stream))) {
            copy_back(g, w, data, bytes);
        }
    }
    probe_cupti_correlate_pop();
    group_unlock(g);
    return w;
}

static int nccl_broadcast(void *group, float *data, int64_t n, int root, uint64_t seq, char *err,
                          size_t errlen) {
    NcclGroup *g = group;
    size_t bytes = (size_t)n * sizeof(float);
    group_lock(g);
    NcclWork *w = work_new(g, OP_BROADCAST, seq, n, n);
    probe_cupti_correlate_push(seq);
    if (atomic_load(&w->status) == WORK_RUNNING) {
        if (n == 0) {
            copy_back(g, w, NULL, 0);
        } else if (stage(g, w, bytes, bytes) &&
                   (g->rank != root || copy_in(g, w, data, bytes, 0)) &&
                   nccl_ok(g, w, "ncclBroadcast",
                           ncclBroadcast(g->dev, g->dev, (size_t)n, ncclFloat, root, g->comm,
                                         g->stream))) {
            copy_back(g, w, data, bytes);
        }
    }
    probe_cupti_correlate_pop();
    group_unlock(g);
    return wait_and_free(w, err, errlen);
}

static int nccl_allgather(void *group, const void *in, size_t bytes, void *out, uint64_t seq,
                          char *err, size_t errlen) {
    NcclGroup *g = group;
    size_t total = bytes * (size_t)g->world, mine = bytes * (size_t)g->rank;
    group_lock(g);
    NcclWork *w = work_new(g, OP_ALLGATHER, seq, (int64_t)bytes, (int64_t)total);
    probe_cupti_correlate_push(seq);
    if (atomic_load(&w->status) == WORK_RUNNING) {
        // In place: this rank's slot of the device buffer is the send buffer.
        if (bytes == 0) {
            copy_back(g, w, NULL, 0);
        } else if (stage(g, w, total, total) && copy_in(g, w, in, bytes, mine) &&
                   nccl_ok(g, w, "ncclAllGather",
                           ncclAllGather((uint8_t *)g->dev + mine, g->dev, bytes, ncclChar,
                                         g->comm, g->stream))) {
            copy_back(g, w, out, total);
        }
    }
    probe_cupti_correlate_pop();
    group_unlock(g);
    return wait_and_free(w, err, errlen);
}

static int nccl_barrier(void *group, uint64_t seq, char *err, size_t errlen) {
    NcclGroup *g = group;
    group_lock(g);
    NcclWork *w = work_new(g, OP_ALLREDUCE, seq, 1, 1);
    probe_cupti_correlate_push(seq);
    if (atomic_load(&w->status) == WORK_RUNNING && stage(g, w, sizeof(float), 0) &&
        cuda_ok(g, w, "cudaMemsetAsync", cudaMemsetAsync(g->dev, 0, sizeof(float), g->stream)) &&
        nccl_ok(g, w, "ncclAllReduce",
                ncclAllReduce(g->dev, g->dev, 1, ncclFloat, ncclSum, g->comm, g->stream)))
        copy_back(g, w, NULL, 0);
    probe_cupti_correlate_pop();
    group_unlock(g);
    return wait_and_free(w, err, errlen);
}

// ---- tensor data in CUDA memory: in place, no copies -------------------------------------------

// Makes the communication stream wait for the compute stream's work launched so far.
static bool after_compute(NcclGroup *g, NcclWork *w) {
    return cuda_ok(g, w, "cudaEventRecord", cudaEventRecord(g->compute_ready, g->compute)) &&
           cuda_ok(g, w, "cudaStreamWaitEvent",
                   cudaStreamWaitEvent(g->stream, g->compute_ready, 0));
}

static void *nccl_allreduce_sum_device(void *group, float *data, int64_t n, uint64_t seq) {
    NcclGroup *g = group;
    group_lock(g);
    NcclWork *w = work_new(g, OP_ALLREDUCE, seq, n, n);
    probe_cupti_correlate_push(seq);
    if (atomic_load(&w->status) == WORK_RUNNING &&
        (n == 0 || (after_compute(g, w) &&
                    nccl_ok(g, w, "ncclAllReduce",
                            ncclAllReduce(data, data, (size_t)n, ncclFloat, ncclSum, g->comm,
                                          g->stream)))))
        copy_back(g, w, NULL, 0); // only the event: the result is data itself
    probe_cupti_correlate_pop();
    group_unlock(g);
    return w;
}

static int nccl_broadcast_device(void *group, float *data, int64_t n, int root, uint64_t seq,
                                 char *err, size_t errlen) {
    NcclGroup *g = group;
    group_lock(g);
    NcclWork *w = work_new(g, OP_BROADCAST, seq, n, n);
    probe_cupti_correlate_push(seq);
    if (atomic_load(&w->status) == WORK_RUNNING &&
        (n == 0 || (after_compute(g, w) &&
                    nccl_ok(g, w, "ncclBroadcast",
                            ncclBroadcast(data, data, (size_t)n, ncclFloat, root, g->comm,
                                          g->stream)))))
        copy_back(g, w, NULL, 0);
    probe_cupti_correlate_pop();
    group_unlock(g);
    return wait_and_free(w, err, errlen);
}

// ---- joining and leaving -----------------------------------------------------------------------

// Waits for a nonblocking communicator to leave ncclInProgress, at most until deadline_ms.
static ncclResult_t settle(ncclComm_t comm, ncclResult_t r, double deadline_ms) {
    for (int us = 10; r == ncclInProgress; backoff(&us)) {
        if (now_ms() > deadline_ms) return ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(comm, &r);
        if (q != ncclSuccess) r = q;
    }
    return r;
}

// Frees what the group holds on the device, unless a collective aborted mid-copy may still be
// writing there (then it is left to the process's exit).
static void release_device(NcclGroup *g) {
    if (cudaStreamQuery(g->stream) != cudaSuccess) return;
    if (g->dev) cudaFreeAsync(g->dev, g->stream);
    cudaStreamSynchronize(g->stream);
    for (int i = 0; i < g->n_slabs; i++) cudaFreeHost(g->slabs[i].host);
    cudaStreamDestroy(g->stream);
    if (g->compute_ready) cudaEventDestroy(g->compute_ready);
}

static void nccl_free(void *group) {
    NcclGroup *g = group;
    group_lock(g);
    // Waits for every pending work (each final afterwards: a timeout fails the rest).
    for (int us = 10;;) {
        watch(g);
        if (!g->pending) break;
        group_unlock(g);
        backoff(&us);
        group_lock(g);
    }
    if (g->comm) {
        ncclResult_t r = settle(g->comm, ncclCommFinalize(g->comm), now_ms() + g->timeout_ms);
        if (r == ncclSuccess)
            ncclCommDestroy(g->comm);
        else
            ncclCommAbort(g->comm);
        g->comm = NULL;
    }
    if (g->stream) release_device(g);
    group_unlock(g);
    pthread_mutex_destroy(&g->mu);
    free(g->slabs);
    free(g);
}

static void open_error(char *err, size_t errlen, int rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void open_error(char *err, size_t errlen, int rank, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    int n = snprintf(err, errlen, "rank %d joining the NCCL group: ", rank);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < errlen) vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    flatten(err);
}

// The CUDA device this rank drives: LOCAL_RANK (else rank) modulo the visible devices; -1 with
// the reason in err when none is visible or LOCAL_RANK is not a number.
static int pick_device(int rank, char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        if (e != cudaSuccess)
            snprintf(err, errlen,
                     "backend=nccl: no CUDA device visible (cudaGetDeviceCount: %s: %s)",
                     cudaGetErrorName(e), cudaGetErrorString(e));
        else
            snprintf(err, errlen, "backend=nccl: no CUDA device visible (cudaGetDeviceCount: 0)");
        return -1;
    }
    int local = rank;
    const char *env = getenv("LOCAL_RANK");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 0 || v > 1 << 20) {
            snprintf(err, errlen, "backend=nccl: LOCAL_RANK=%s: expected an integer >= 0", env);
            return -1;
        }
        local = (int)v;
    }
    return local % count;
}

// The opt-in of PgOptions.nccl_hostid_per_rank: this process poses as a host of its own.
// NCCL reads NCCL_HOSTID when the communicator is made (its host hash); the hostname keeps two
// machines' ranks apart.
static void claim_host_of_own(int rank) {
    char host[128] = "", id[200];
    gethostname(host, sizeof host - 1);
    snprintf(id, sizeof id, "%s:ddpdbg-rank%d", host, rank);
    setenv("NCCL_HOSTID", id, 1);
    LOG_WARN("rank %d: NCCL_HOSTID=%s (nccl_hostid=rank: a test-only opt-in that lets ranks share "
             "a GPU; they talk over the network transport)", rank, id);
}

static void *nccl_open(Store *store, int rank, int world, const PgOptions *opts, int group_id,
                       char *err, size_t errlen) {
    char scratch[ERR_MAX];
    if (!err || errlen == 0) err = scratch, errlen = sizeof scratch;
    int timeout_ms = opts->timeout_ms;
    const PgMemory *m = opts->memory;
    if (m && !m->cuda) {
        snprintf(err, errlen, "backend=nccl: tensors on %s memory: NCCL needs CUDA memory",
                 m->name);
        return NULL;
    }
    bool per_rank = opts->nccl_hostid_per_rank;
    if (!per_rank && pg_parse_nccl_hostid("DDPDBG_NCCL_HOSTID", getenv("DDPDBG_NCCL_HOSTID"),
                                          &per_rank, err, errlen) != 0)
        return NULL;
    int device = m ? m->cuda_device : pick_device(rank, err, errlen);
    if (device < 0) return NULL;
    if (per_rank) claim_host_of_own(rank);
    cudaError_t e = cudaSetDevice(device);
    int pools = 0;
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
    if (e != cudaSuccess || !pools) {
        open_error(err, errlen, rank, "CUDA device %d: %s", device,
                   e != cudaSuccess ? cudaGetErrorString(e)
                                    : "no stream-ordered allocator (cudaMallocAsync)");
        return NULL;
    }

    NcclGroup *g = xcalloc(1, sizeof *g);
    g->rank = rank, g->world = world, g->device = device, g->timeout_ms = timeout_ms;
    g->compute = m ? (cudaStream_t)m->stream : NULL;
    pthread_mutex_init(&g->mu, NULL);
    e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        g->stream = NULL;
        open_error(err, errlen, rank, "cudaStreamCreate: %s", cudaGetErrorString(e));
        goto fail;
    }
    e = cudaEventCreateWithFlags(&g->compute_ready, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        g->compute_ready = NULL;
        open_error(err, errlen, rank, "cudaEventCreate: %s", cudaGetErrorString(e));
        goto fail;
    }

    // Rank 0 makes the communicator's id; the others read it from the store (bounded by the
    // store's own timeout). The joining deadline starts once the id is in hand.
    char key[64], why[ERR_MAX];
    snprintf(key, sizeof key, "pg%d/nccl_unique_id", group_id);
    ncclUniqueId id;
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            open_error(err, errlen, rank, "ncclGetUniqueId: %s: %s", result_name(r),
                       ncclGetLastError(NULL));
            goto fail;
        }
    }
    double ready = 0;
    if (pg_share_id(store, key, rank, &id, sizeof id, &ready, why, sizeof why) != 0) {
        open_error(err, errlen, rank, "%s", why);
        goto fail;
    }
    double deadline = ready + timeout_ms;

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; // every wait below is ours, and bounded
    ncclResult_t r = ncclCommInitRankConfig(&g->comm, world, id, rank, &config);
    if (g->comm) r = settle(g->comm, r, deadline);
    if (r != ncclSuccess) {
        if (r == ncclInProgress)
            open_error(err, errlen, rank,
                       "ncclCommInitRankConfig did not finish within %d ms (a rank missing?)",
                       timeout_ms);
        else
            open_error(err, errlen, rank, "ncclCommInitRankConfig: %s: %s: %s", result_name(r),
                       ncclGetErrorString(r), ncclGetLastError(g->comm));
        goto fail;
    }
    // One allreduce, uncounted (SeqNum=0), so that NCCL connects the ranks now rather than
    // inside the first collective the caller launches.
    if (nccl_barrier(g, 0, why, sizeof why) != 0) {
        open_error(err, errlen, rank, "%s", why);
        goto fail;
    }
    return g;

fail:
    if (g->comm) ncclCommAbort(g->comm);
    if (g->stream) release_device(g);
    pthread_mutex_destroy(&g->mu);
    free(g->slabs);
    free(g);
    return NULL;
}

const PgOps pg_nccl_ops = {
    .name = "nccl",
    .open = nccl_open,
    .allreduce_sum = nccl_allreduce_sum,
    .work_wait = nccl_work_wait,
    .work_test = nccl_work_test,
    .work_free = nccl_work_free,
    .broadcast = nccl_broadcast,
    .allgather = nccl_allgather,
    .barrier = nccl_barrier,
    .free = nccl_free,
    .allreduce_sum_device = nccl_allreduce_sum_device,
    .broadcast_device = nccl_broadcast_device,
};

#endif
