/* comm.c -- the public process group of comm.h, written once over the backends' tables
 * (PgOps): it checks arguments, holds rank, world and the sequence counter, numbers the groups
 * and dispatches. What a collective does on the wire is the backend's (comm_gloo.cc,
 * comm_nccl.c); nothing here knows Gloo or NCCL. */
#include "trainer/dist/comm.h"

#include "kernels/backend.h"
#include "kernels/base.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

// A host buffer that stages device data for a backend that reads host memory (Gloo).
typedef struct Staging {
    void *host;
    size_t bytes;
    bool busy;
} Staging;

struct ProcessGroup {
    const PgOps *ops;
    void *group; // the backend's
    int rank, world;
    // Collectives launched so far. Atomic: pg_seq may be read from another thread (a probe).
    atomic_uint_fast64_t seq;
    const PgMemory *memory; // NULL: tensors are host arrays
    // Staging buffers, reused (page-locked allocations cost milliseconds): one per collective
    // in flight, so a handful. Guarded by mu (a work may be freed on another thread).
    Staging *staging;
    int n_staging;
    pthread_mutex_t mu;
};

struct PgWork {
    const PgOps *ops;
    void *work; // the backend's
    // Staged device data: the result goes from staging[slot] to device_data once the work is
    // found done (slot -1: none, or already copied back).
    ProcessGroup *pg;
    int slot;
    float *device_data;
    size_t bytes;
};

static const PgOps *const backends[] = {&pg_gloo_ops, &pg_nccl_ops};

// Groups numbered per process, across both backends, so that store keys never collide.
static atomic_int groups_created;

static void set_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_error(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// The next collective's number (1-based), counted at launch: see PgOps in comm.h.
static uint64_t next_seq(ProcessGroup *pg) { return atomic_fetch_add(&pg->seq, 1) + 1; }

int pg_default_timeout_ms(const char *backend) {
    return backend && !strcmp(backend, "nccl") ? 600 * 1000 : 1800 * 1000;
}

int pg_parse_nccl_hostid(const char *what, const char *value, bool *per_rank, char *err,
                         size_t errlen) {
    if (!value || !*value || !strcmp(value, "off")) {
        *per_rank = false;
        return 0;
    }
    if (!strcmp(value, "rank")) {
        *per_rank = true;
        return 0;
    }
    set_error(err, errlen, "%s=%s: expected rank or off", what, value);
    return -1;
}

double pg_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

int pg_share_id(Store *store, const char *key, int rank, void *blob, size_t bytes,
                double *ready_ms, char *err, size_t errlen) {
    if (rank == 0) {
        if (store_set(store, key, blob, bytes) != 0) {
            set_error(err, errlen, "store set %s: %s", key, store_error(store));
            return -1;
        }
    } else {
        void *value = NULL;
        size_t len = 0;
        if (store_get(store, key, &value, &len) != 0) {
            set_error(err, errlen, "store get %s: %s", key, store_error(store));
            return -1;
        }
        bool fits = len == bytes;
        if (fits) memcpy(blob, value, bytes);
        free(value);
        if (!fits) {
            set_error(err, errlen, "store key %s holds %zu bytes: expected %zu", key, len, bytes);
            return -1;
        }
    }
    *ready_ms = pg_now_ms();
    return 0;
}

const PgMemory *pg_memory_of_backend(const Backend *b, int cuda_device, void *stream,
                                     PgMemory *out) {
    if (b->dev == DEV_CPU) return NULL;
    *out = (PgMemory){.name = b->name, .to_host = b->to_host, .to_device = b->to_device};
    if (b->dev == DEV_CUDA) out->cuda = true, out->cuda_device = cuda_device, out->stream = stream;
    return out;
}

ProcessGroup *pg_new(const char *backend, Store *store, int rank, int world, int timeout_ms,
                     char *err, size_t errlen) {
    PgOptions opts = {.timeout_ms = timeout_ms};
    return pg_open(backend, store, rank, world, &opts, err, errlen);
}

ProcessGroup *pg_open(const char *backend, Store *store, int rank, int world,
                      const PgOptions *opts, char *err, size_t errlen) {
    int timeout_ms = opts->timeout_ms;
    const PgOps *ops = NULL;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (backend && !strcmp(backend, backends[i]->name)) ops = backends[i];
    if (!ops) {
        set_error(err, errlen, "backend=%s: expected gloo or nccl", backend ? backend : "(null)");
        return NULL;
    }
    if (world < 1 || rank < 0 || rank >= world || timeout_ms <= 0) {
        set_error(err, errlen,
                  "backend=%s: rank %d of world %d with timeout %d ms: expected 0 <= rank < "
                  "world and a positive timeout",
                  ops->name, rank, world, timeout_ms);
        return NULL;
    }
    int group_id = atomic_fetch_add(&groups_created, 1);
    const PgMemory *m = opts->memory;
    CHECK(!m || (m->name && m->to_host && m->to_device && !m->host_alloc == !m->host_free),
          "pg_open: a PgMemory needs a name, both copies, and host_alloc with host_free");
    void *group = ops->open(store, rank, world, opts, group_id, err, errlen);
    if (!group) return NULL;
    ProcessGroup *pg = xcalloc(1, sizeof *pg);
    pg->ops = ops, pg->group = group;
    pg->rank = rank, pg->world = world;
    pg->memory = m;
    pthread_mutex_init(&pg->mu, NULL);
    atomic_init(&pg->seq, 0);
    return pg;
}

ProcessGroup *pg_new_gloo(Store *store, int rank, int world, int timeout_ms, char *err,
                          size_t errlen) {
    return pg_new("gloo", store, rank, world, timeout_ms, err, errlen);
}

const char *pg_backend(const ProcessGroup *pg) { return pg->ops->name; }
int pg_rank(const ProcessGroup *pg) { return pg->rank; }
int pg_world(const ProcessGroup *pg) { return pg->world; }
uint64_t pg_seq(const ProcessGroup *pg) { return atomic_load(&pg->seq); }

PgWork *pg_allreduce_sum(ProcessGroup *pg, float *data, int64_t n) {
    CHECK(n >= 0, "pg_allreduce_sum: negative count %lld", (long long)n);
    PgWork *w = xcalloc(1, sizeof *w);
    w->ops = pg->ops, w->pg = pg, w->slot = -1;
    w->work = pg->ops->allreduce_sum(pg->group, data, n, next_seq(pg));
    return w;
}

// ---- staging device data through host memory (backends without _device entries) -------------

// A free staging buffer of at least bytes (the smallest that fits, else a new one), busy now.
static int staging_take(ProcessGroup *pg, size_t bytes) {
    const PgMemory *m = pg->memory;
    pthread_mutex_lock(&pg->mu);
    int best = -1;
    for (int i = 0; i < pg->n_staging; i++)
        if (!pg->staging[i].busy && pg->staging[i].bytes >= bytes &&
            (best < 0 || pg->staging[i].bytes < pg->staging[best].bytes))
            best = i;
    if (best < 0) {
        Staging s = {.bytes = MAX(bytes, (size_t)4096)};
        s.host = m->host_alloc ? m->host_alloc(s.bytes) : xmalloc(s.bytes);
        CHECK(s.host, "pg: cannot allocate %zu bytes of %s staging memory", s.bytes, m->name);
        pg->staging = xrealloc(pg->staging, (size_t)(pg->n_staging + 1) * sizeof *pg->staging);
        pg->staging[pg->n_staging] = s;
        best = pg->n_staging++;
    }
    pg->staging[best].busy = true;
    pthread_mutex_unlock(&pg->mu);
    return best;
}

static void *staging_host(ProcessGroup *pg, int slot) {
    pthread_mutex_lock(&pg->mu); // the array moves when it grows
    void *host = pg->staging[slot].host;
    pthread_mutex_unlock(&pg->mu);
    return host;
}

static void staging_give_back(ProcessGroup *pg, int slot) {
    pthread_mutex_lock(&pg->mu);
    pg->staging[slot].busy = false;
    pthread_mutex_unlock(&pg->mu);
}

// A staged work found done: on success its result goes back to the device, and either way its
// staging buffer is free again. Once per work.
static void staged_finish(PgWork *w, bool ok) {
    if (w->slot < 0) return;
    if (ok) w->pg->memory->to_device(w->device_data, staging_host(w->pg, w->slot), w->bytes);
    staging_give_back(w->pg, w->slot);
    w->slot = -1;
}

static bool staged(const ProcessGroup *pg, const void *device_entry) {
    return pg->memory && !device_entry;
}

PgWork *pg_allreduce_sum_device(ProcessGroup *pg, float *data, int64_t n) {
    CHECK(n >= 0, "pg_allreduce_sum_device: negative count %lld", (long long)n);
    if (!pg->memory) return pg_allreduce_sum(pg, data, n);
    PgWork *w = xcalloc(1, sizeof *w);
    w->ops = pg->ops, w->pg = pg, w->slot = -1;
    uint64_t seq = next_seq(pg);
    if (!staged(pg, pg->ops->allreduce_sum_device)) {
        w->work = pg->ops->allreduce_sum_device(pg->group, data, n, seq);
        return w;
    }
    float *host = NULL;
    if (n > 0) { // as PyTorch's gloo for CUDA tensors: device -> host, the collective, back
        w->bytes = (size_t)n * sizeof(float);
        w->slot = staging_take(pg, w->bytes);
        w->device_data = data;
        host = staging_host(pg, w->slot);
        pg->memory->to_host(host, data, w->bytes);
    }
    w->work = pg->ops->allreduce_sum(pg->group, host, n, seq);
    return w;
}

int pg_work_wait(PgWork *w, char *err, size_t errlen) {
    int rc = w->ops->work_wait(w->work, err, errlen);
    staged_finish(w, rc == 0);
    return rc;
}

bool pg_work_test(PgWork *w) {
    bool done = w->ops->work_test(w->work);
    // Done: the wait returns at once, with the outcome the copy back needs.
    if (done && w->slot >= 0) staged_finish(w, w->ops->work_wait(w->work, NULL, 0) == 0);
    return done;
}

void pg_work_free(PgWork *w) {
    if (!w) return;
    if (w->slot >= 0) staged_finish(w, w->ops->work_wait(w->work, NULL, 0) == 0);
    w->ops->work_free(w->work);
    free(w);
}

int pg_broadcast(ProcessGroup *pg, float *data, int64_t n, int root, char *err, size_t errlen) {
    // A rejected call launches nothing, so it is not counted.
    if (root < 0 || root >= pg->world || n < 0) {
        set_error(err, errlen,
                  "pg_broadcast: root %d, count %lld: expected 0 <= root < %d and a count >= 0",
                  root, (long long)n, pg->world);
        return -1;
    }
    return pg->ops->broadcast(pg->group, data, n, root, next_seq(pg), err, errlen);
}

int pg_broadcast_device(ProcessGroup *pg, float *data, int64_t n, int root, char *err,
                        size_t errlen) {
    if (!pg->memory || root < 0 || root >= pg->world || n < 0)
        return pg_broadcast(pg, data, n, root, err, errlen);
    if (!staged(pg, pg->ops->broadcast_device))
        return pg->ops->broadcast_device(pg->group, data, n, root, next_seq(pg), err, errlen);
    size_t bytes = (size_t)n * sizeof(float);
    int slot = n > 0 ? staging_take(pg, bytes) : -1;
    float *host = slot >= 0 ? staging_host(pg, slot) : NULL;
    // Only the root's data matters; the others' staging is overwritten by the broadcast.
    if (pg->rank == root && n > 0) pg->memory->to_host(host, data, bytes);
    int rc = pg->ops->broadcast(pg->group, host, n, root, next_seq(pg), err, errlen);
    if (rc == 0 && n > 0) pg->memory->to_device(data, host, bytes);
    if (slot >= 0) staging_give_back(pg, slot);
    return rc;
}

int pg_allgather(ProcessGroup *pg, const void *in, size_t bytes, void *out, char *err,
                 size_t errlen) {
    return pg->ops->allgather(pg->group, in, bytes, out, next_seq(pg), err, errlen);
}

int pg_barrier(ProcessGroup *pg, char *err, size_t errlen) {
    return pg->ops->barrier(pg->group, next_seq(pg), err, errlen);
}

void pg_free(ProcessGroup *pg) {
    if (!pg) return;
    pg->ops->free(pg->group);
    for (int i = 0; i < pg->n_staging; i++)
        pg->memory->host_free ? pg->memory->host_free(pg->staging[i].host)
                              : free(pg->staging[i].host);
    free(pg->staging);
    pthread_mutex_destroy(&pg->mu);
    free(pg);
}
