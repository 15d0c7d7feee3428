/* comm.c -- the public process group of comm.h, written once over the backends' tables
 * (PgOps): it checks arguments, holds rank, world and the sequence counter, numbers the groups
 * and dispatches. What a collective does on the wire is the backend's (comm_gloo.cc,
 * comm_nccl.c); nothing here knows Gloo or NCCL. */
#include "trainer/dist/comm.h"

#include "kernels/base.h"

#include <stdatomic.h>

struct ProcessGroup {
    const PgOps *ops;
    void *group; // the backend's
    int rank, world;
    // Collectives launched so far. Atomic: pg_seq may be read from another thread (a probe).
    atomic_uint_fast64_t seq;
};

struct PgWork {
    const PgOps *ops;
    void *work; // the backend's
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

ProcessGroup *pg_new(const char *backend, Store *store, int rank, int world, int timeout_ms,
                     char *err, size_t errlen) {
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
    void *group = ops->open(store, rank, world, timeout_ms, group_id, err, errlen);
    if (!group) return NULL;
    ProcessGroup *pg = xcalloc(1, sizeof *pg);
    pg->ops = ops, pg->group = group;
    pg->rank = rank, pg->world = world;
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
    PgWork *w = xmalloc(sizeof *w);
    w->ops = pg->ops;
    w->work = pg->ops->allreduce_sum(pg->group, data, n, next_seq(pg));
    return w;
}

int pg_work_wait(PgWork *w, char *err, size_t errlen) {
    return w->ops->work_wait(w->work, err, errlen);
}

bool pg_work_test(PgWork *w) { return w->ops->work_test(w->work); }

void pg_work_free(PgWork *w) {
    if (!w) return;
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
    free(pg);
}
