/* probe.c -- the trainer's probe: opens a rank's ring and database, runs the writer thread
 * that moves committed events from the ring into SQLite (and emits heartbeats), turns itself
 * off with one warning when anything fails, and drains a dead rank's ring. The hot path is
 * probe_record -> probe_ring_emit (ring.c); nothing here runs per event on the trainer's side
 * but one relaxed load. */
#include "probe/probe.h"

#include "kernels/base.h" // LOG_WARN, xmalloc, MIN
#include "probe/ring.h"
#include "probe/tracedb.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_FLUSH_MS 5
#define BATCH_EVENTS 16384 // events per transaction, at most: bounds the time a commit holds up

struct Probe {
    ProbeRing *ring;
    TraceDb *db;
    pthread_t writer;
    int rank, flush_ms, heartbeat_ms;
    uint64_t half_capacity; // ring records: an emit beyond this many unstored nudges the writer
    bool keep_ring;
    int stop;                 // atomic: probe_close asks the writer to finish
    pthread_mutex_t wake_mu;  // with wake: probe_close, or an emit that finds the ring half
    pthread_cond_t wake;      // full, wakes the writer from its wait
    int nudged;               // atomic: an emit has woken the writer since its last flush
    int off;                  // atomic: the probe failed; emits are no-ops
    uint64_t events;          // writer's: events stored
    uint64_t overruns_stored; // writer's: the overrun count last written to meta
    TextBuf text;             // writer's: the event being stored
};

static const char *const kind_names[PROBE_KIND_END] = {
    [PROBE_META] = "META",
    [PROBE_PARAM] = "PARAM",
    [PROBE_LAYOUT] = "LAYOUT",
    [PROBE_FORWARD_BEGIN] = "FORWARD_BEGIN",
    [PROBE_FORWARD_END] = "FORWARD_END",
    [PROBE_BACKWARD_BEGIN] = "BACKWARD_BEGIN",
    [PROBE_BACKWARD_END] = "BACKWARD_END",
    [PROBE_GRAD_READY] = "GRAD_READY",
    [PROBE_MARK_READY] = "MARK_READY",
    [PROBE_BUCKET_READY] = "BUCKET_READY",
    [PROBE_COLL_LAUNCH] = "COLL_LAUNCH",
    [PROBE_COLL_DONE] = "COLL_DONE",
    [PROBE_FINALIZE] = "FINALIZE",
    [PROBE_OPTIM_STEP] = "OPTIM_STEP",
    [PROBE_BATCH] = "BATCH",
    [PROBE_ERROR] = "ERROR",
    [PROBE_HEARTBEAT] = "HEARTBEAT",
    [PROBE_HANG] = "HANG",
    [PROBE_TEXT] = "TEXT",
    [PROBE_GPU_KERNEL] = "GPU_KERNEL",
    [PROBE_GPU_MEMCPY] = "GPU_MEMCPY",
    [PROBE_GPU_MEMSET] = "GPU_MEMSET",
    [PROBE_GPU_CORRELATION] = "GPU_CORRELATION",
};

const char *probe_kind_name(int kind) {
    return kind > 0 && kind < PROBE_KIND_END ? kind_names[kind] : NULL;
}

static int64_t mono_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// Wakes the writer now, once per flush, when the ring is half full: a burst between two of
// its flushes (a second apart) must not overrun the ring. Costs an emit two loads otherwise.
static void nudge_writer(Probe *p) {
    if (ring_unstored(p->ring) < p->half_capacity ||
        __atomic_load_n(&p->nudged, __ATOMIC_RELAXED) ||
        __atomic_exchange_n(&p->nudged, 1, __ATOMIC_ACQ_REL))
        return;
    pthread_mutex_lock(&p->wake_mu);
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->wake_mu);
}

// Waits ms, or until probe_close sets stop, or an emit nudges (then at once).
static void wait_ms(Probe *p, int ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_mutex_lock(&p->wake_mu);
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&p->nudged, __ATOMIC_ACQUIRE) &&
           pthread_cond_timedwait(&p->wake, &p->wake_mu, &until) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&p->wake_mu);
}

// The one warning of a failing probe; later failures are silent since the probe is off.
static void probe_fail(Probe *p, const char *why) {
    if (__atomic_exchange_n(&p->off, 1, __ATOMIC_ACQ_REL)) return;
    LOG_WARN(
        "probe: rank %d: %s; the probe is off, training continues (unstored records stay in %s)",
        p->rank, why, ring_path(p->ring));
}

// ---- the writer thread ---------------------------------------------------------------------

// Stores every committed event after the tail, BATCH_EVENTS per transaction, then advances the
// tail. Stops at the first slot that is not committed yet (an event still being written).
static int flush(Probe *p) {
    for (;;) {
        ProbeRingState st = probe_ring_state(p->ring);
        uint64_t next = st.tail + 1, n = 0, span = 1;
        ProbeRecord rec;
        RingRead rd = ring_read(p->ring, next, &rec, &p->text, &span);
        if (rd == RING_READ_IN_FLIGHT && st.overruns == p->overruns_stored) return 0;
        if (tracedb_begin(p->db) < 0) return -1;
        for (; rd == RING_READ_OK; rd = ring_read(p->ring, next, &rec, &p->text, &span)) {
            if (tracedb_insert(p->db, &rec, p->text.data, p->text.len) < 0) return -1;
            next += span;
            if (++n == BATCH_EVENTS) break;
        }
        if (n < BATCH_EVENTS && rd != RING_READ_IN_FLIGHT) {
            char why[4300];
            snprintf(why, sizeof why, "ring %s: the record at seq %llu is inconsistent",
                     ring_path(p->ring), (unsigned long long)next);
            probe_fail(p, why);
            return -1;
        }
        if (st.overruns != p->overruns_stored &&
            tracedb_set_meta_int(p->db, "overruns", (int64_t)st.overruns) < 0)
            return -1;
        if (tracedb_commit(p->db) < 0) return -1;
        p->overruns_stored = st.overruns;
        p->events += n;
        ring_set_tail(p->ring, next - 1);
        if (n < BATCH_EVENTS) return 0;
    }
}

static void *writer_main(void *arg) {
    Probe *p = arg;
    pthread_setname_np(pthread_self(), "ddpdbg-probe"); // what top -H and perf show
    int64_t next_heartbeat = mono_ms();
    for (;;) {
        bool stopping = __atomic_load_n(&p->stop, __ATOMIC_ACQUIRE);
        if (p->heartbeat_ms > 0 && !stopping && mono_ms() >= next_heartbeat) {
            ProbeRingState st = probe_ring_state(p->ring);
            probe_ring_emit(p->ring, PROBE_HEARTBEAT, 0, st.phase_iter, (int32_t)st.phase, 0,
                            (int64_t)st.head - 1, st.phase_t_ns, NULL, 0);
            next_heartbeat = mono_ms() + p->heartbeat_ms; // no burst to catch up after a stall
        }
        __atomic_store_n(&p->nudged, 0, __ATOMIC_RELEASE); // before: a later nudge wakes us
        if (flush(p) < 0) {
            probe_fail(p, tracedb_error(p->db));
            return NULL;
        }
        if (stopping) return NULL;
        wait_ms(p, p->flush_ms);
    }
}

// ---- open and close ------------------------------------------------------------------------

static int write_open_meta(Probe *p, const ProbeConfig *cfg) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    ProbeRingState st = probe_ring_state(p->ring);
    TraceDb *db = p->db;
    if (tracedb_begin(db) < 0 || tracedb_set_meta_int(db, "rank", cfg->rank) < 0 ||
        tracedb_set_meta_int(db, "pid", st.pid) < 0 || tracedb_set_meta(db, "host", host) < 0 ||
        tracedb_set_meta(db, "ring", ring_path(p->ring)) < 0 ||
        tracedb_set_meta_int(db, "ring_capacity", (int64_t)st.capacity) < 0 ||
        tracedb_set_meta_int(db, "created_ns", st.created_ns) < 0 ||
        tracedb_set_meta(db, "closed", "no") < 0 || tracedb_commit(db) < 0)
        return -1;
    return 0;
}

Probe *probe_open(const ProbeConfig *cfg) {
    const char *dir = cfg->dir && cfg->dir[0] ? cfg->dir : ".";
    char ring_file[4096], db_file[4096], why[4600];
    int e = mkdir_p(dir, NULL, 0);
    if (e) {
        LOG_WARN(
            "probe: rank %d: cannot write traces to %s: %s; the probe is off, training continues",
            cfg->rank, dir, strerror(e));
        return NULL;
    }
    snprintf(ring_file, sizeof ring_file, "%s/rank%d.ring", dir, cfg->rank);
    snprintf(db_file, sizeof db_file, "%s/rank%d.db", dir, cfg->rank);
    ProbeRing *ring =
        probe_ring_create(ring_file, cfg->capacity ? cfg->capacity : PROBE_DEFAULT_CAPACITY,
                          cfg->rank, why, sizeof why);
    if (!ring) {
        LOG_WARN(
            "probe: rank %d: cannot write traces to %s: %s; the probe is off, training continues",
            cfg->rank, dir, why);
        return NULL;
    }
    Probe *p = xcalloc(1, sizeof *p);
    p->ring = ring;
    p->rank = cfg->rank;
    p->flush_ms = cfg->flush_ms > 0 ? cfg->flush_ms : DEFAULT_FLUSH_MS;
    p->heartbeat_ms = cfg->heartbeat_ms;
    p->keep_ring = cfg->keep_ring;
    p->half_capacity = probe_ring_state(ring).capacity / 2;
    pthread_mutex_init(&p->wake_mu, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&p->wake, &monotonic);
    pthread_condattr_destroy(&monotonic);
    p->db = tracedb_create(db_file, why, sizeof why);
    if (p->db && write_open_meta(p, cfg) < 0)
        snprintf(why, sizeof why, "%s", tracedb_error(p->db));
    else if (p->db && (e = pthread_create(&p->writer, NULL, writer_main, p)) != 0)
        snprintf(why, sizeof why, "cannot start the writer thread: %s", strerror(e));
    else if (p->db)
        return p;
    LOG_WARN("probe: rank %d: cannot write traces to %s: %s; the probe is off, training continues",
             cfg->rank, dir, why);
    tracedb_close(p->db, false);
    probe_ring_close(ring);
    unlink(ring_file);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->wake_mu);
    free(p);
    return NULL;
}

void probe_close(Probe *p) {
    if (!p) return;
    pthread_mutex_lock(&p->wake_mu);
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->wake_mu);
    pthread_join(p->writer, NULL); // its last flush runs after it saw stop
    ProbeRingState st = probe_ring_state(p->ring);
    bool ok = !__atomic_load_n(&p->off, __ATOMIC_ACQUIRE);
    if (ok) {
        TraceDb *db = p->db;
        if (tracedb_begin(db) < 0 || tracedb_set_meta_int(db, "events", (int64_t)p->events) < 0 ||
            tracedb_set_meta_int(db, "records", (int64_t)st.tail) < 0 ||
            tracedb_set_meta_int(db, "overruns", (int64_t)st.overruns) < 0 ||
            tracedb_set_meta(db, "closed", "clean") < 0 || tracedb_commit(db) < 0) {
            probe_fail(p, tracedb_error(db));
            ok = false;
        }
    }
    if (ok && st.overruns) // a failed probe said its one warning already
        LOG_WARN(
            "probe: rank %d: %llu events were dropped because the ring (%llu records) was full;"
            " %s lacks them (raise the ring capacity)",
            p->rank, (unsigned long long)st.overruns, (unsigned long long)st.capacity,
            tracedb_path(p->db));
    tracedb_close(p->db, ok);
    char ring_file[4096];
    snprintf(ring_file, sizeof ring_file, "%s", ring_path(p->ring));
    if (ok) ring_mark_closed(p->ring);
    probe_ring_close(p->ring);
    if (ok && !p->keep_ring) unlink(ring_file);
    textbuf_free(&p->text);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->wake_mu);
    free(p);
}

// ---- emits ---------------------------------------------------------------------------------

// Every emit of a probe: into the ring (t_ns 0: now), then wake the writer if it must.
static void record(Probe *p, int64_t t_ns, ProbeKind kind, uint16_t flags, int64_t iter, int32_t a,
                   int32_t b, int64_t c, int64_t d, const char *text, size_t len) {
    if (__atomic_load_n(&p->off, __ATOMIC_RELAXED)) return;
    probe_ring_emit_at(p->ring, t_ns, kind, flags, iter, a, b, c, d, text, len);
    nudge_writer(p);
}

void probe_record(Probe *p, ProbeKind kind, uint16_t flags, int64_t iter, int32_t a, int32_t b,
                  int64_t c, int64_t d, const char *text, size_t len) {
    record(p, 0, kind, flags, iter, a, b, c, d, text, len);
}

void probe_emit_at(Probe *p, int64_t t_ns, ProbeKind kind, uint16_t flags, int64_t iter, int32_t a,
                   int32_t b, int64_t c, int64_t d) {
    if (p) record(p, t_ns, kind, flags, iter, a, b, c, d, NULL, 0);
}

// Formats into buf (n bytes) or, when longer, a malloc'd string that *heap owns.
static const char *vformat(char *buf, size_t n, char **heap, const char *fmt, va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    int len = vsnprintf(buf, n, fmt, ap);
    *heap = NULL;
    if (len >= (int)n) {
        *heap = xmalloc((size_t)len + 1);
        vsnprintf(*heap, (size_t)len + 1, fmt, copy);
    }
    va_end(copy);
    return *heap ? *heap : len < 0 ? "" : buf;
}

void probe_emitf(Probe *p, ProbeKind kind, int64_t iter, int32_t a, int32_t b, int64_t c, int64_t d,
                 const char *fmt, ...) {
    if (!p) return;
    char buf[512], *heap;
    va_list ap;
    va_start(ap, fmt);
    const char *text = vformat(buf, sizeof buf, &heap, fmt, ap);
    va_end(ap);
    probe_record(p, kind, 0, iter, a, b, c, d, text, strlen(text));
    free(heap);
}

void probe_meta(Probe *p, const char *key, const char *fmt, ...) {
    if (!p) return;
    char buf[512], *heap;
    va_list ap;
    va_start(ap, fmt);
    const char *value = vformat(buf, sizeof buf, &heap, fmt, ap);
    va_end(ap);
    probe_emitf(p, PROBE_META, -1, 0, 0, 0, 0, "%s=%s", key, value);
    free(heap);
}

void probe_param(Probe *p, int32_t index, const char *name, int32_t ndim, const int64_t *shape,
                 int64_t numel) {
    if (!p) return;
    size_t cap = strlen(name) + 2 + (size_t)MAX(ndim, 0) * 21, n;
    char *text = xmalloc(cap);
    n = (size_t)snprintf(text, cap, "%s ", name);
    for (int i = 0; i < ndim; i++)
        n += (size_t)snprintf(text + n, cap - n, i ? "x%lld" : "%lld", (long long)shape[i]);
    probe_record(p, PROBE_PARAM, 0, -1, index, ndim, numel, 0, text, n);
    free(text);
}

void probe_set_phase(Probe *p, ProbePhase phase, int64_t iter) {
    if (p) probe_ring_set_phase(p->ring, phase, iter);
}

ProbeStats probe_stats(const Probe *p) {
    if (!p) return (ProbeStats){0};
    ProbeRingState st = probe_ring_state(p->ring);
    return (ProbeStats){
        .on = !__atomic_load_n(&p->off, __ATOMIC_ACQUIRE),
        .claimed = st.head - 1,
        .stored = st.tail,
        .overruns = st.overruns,
    };
}

// ---- the drain -----------------------------------------------------------------------------

int probe_drain(const char *ring_file, const char *db_path, ProbeDrainReport *report, char *err,
                size_t errlen) {
    ProbeDrainReport rep = {0};
    ProbeRing *ring = probe_ring_attach(ring_file, err, errlen);
    if (!ring) return -1;
    TraceDb *db = tracedb_open(db_path, err, errlen);
    if (!db) {
        probe_ring_close(ring);
        return -1;
    }
    ProbeRingState st = probe_ring_state(ring);
    if (st.head == 0 || st.tail >= st.head) { // head counts from 1; the tail never passes it
        snprintf(err, errlen, "ring %s is damaged: its header says head %llu, tail %llu", ring_file,
                 (unsigned long long)st.head, (unsigned long long)st.tail);
        tracedb_close(db, true);
        probe_ring_close(ring);
        return -1;
    }
    rep.ring_last = st.head - 1;
    rep.overruns = st.overruns;
    TextBuf text = {0};
    int rc = -1;
    if (tracedb_max_seq(db, &rep.db_max_seq) < 0 || tracedb_begin(db) < 0) goto db_failed;
    // The ring still holds its last `capacity` records; anything older than those that the
    // database lacks is gone (the writer had stored it, so the database lost it).
    uint64_t seq = rep.db_max_seq + 1;
    if (rep.ring_last >= st.capacity && seq + st.capacity <= rep.ring_last) {
        rep.lost = rep.ring_last - st.capacity + 1 - seq;
        seq = rep.ring_last - st.capacity + 1;
    }
    while (seq <= rep.ring_last) {
        ProbeRecord rec;
        uint64_t span;
        RingRead rd = ring_read(ring, seq, &rec, &text, &span);
        if (rd == RING_READ_CORRUPT) {
            if (err && errlen)
                snprintf(err, errlen,
                         "ring %s: the record at seq %llu promises text records that are not there",
                         ring_file, (unsigned long long)seq);
            goto done;
        }
        if (rd == RING_READ_OK) {
            if (tracedb_insert(db, &rec, text.data, text.len) < 0) goto db_failed;
            rep.inserted++;
        } else if (rd == RING_READ_IN_FLIGHT || (uint64_t)rec.d > rep.db_max_seq) {
            rep.in_flight++; // not committed, or a TEXT part of an event that is not
        }
        seq += span;
    }
    if (tracedb_set_meta_int(db, "drain_inserted", (int64_t)rep.inserted) < 0 ||
        tracedb_set_meta_int(db, "drain_in_flight", (int64_t)rep.in_flight) < 0 ||
        tracedb_set_meta_int(db, "drain_lost", (int64_t)rep.lost) < 0 ||
        tracedb_set_meta_int(db, "overruns", (int64_t)rep.overruns) < 0 ||
        tracedb_set_meta(db, "closed", "drained") < 0 || tracedb_commit(db) < 0)
        goto db_failed;
    rc = 0;
    goto done;
db_failed:
    if (err && errlen) snprintf(err, errlen, "%s", tracedb_error(db));
done:
    tracedb_close(db, rc == 0);
    probe_ring_close(ring);
    textbuf_free(&text);
    if (report) *report = rep;
    return rc;
}
