/* cupti.c -- GPU activity into the probe (cupti.h). CUPTI's Activity API fills buffers we hand
 * it with kernel, memcpy, memset, API and external-correlation records and gives them back,
 * on its threads or ours, when one fills or is flushed (a thread of ours flushes every
 * FLUSH_MS, so that a rank that dies loses at most that much). Each record of interest becomes
 * one probe event from whichever thread got the buffer (the ring takes any thread); the API
 * records are only there because CUPTI emits an external correlation per API record.
 *
 * Clocks: CUPTI puts GPU times on its host clock itself (a linear fit of the GPU's timer;
 * CLOCK_REALTIME on Linux by default, another clock on WSL). We move them onto the probe's
 * CLOCK_REALTIME with one offset measured at start: the tightest of CLOCK_SAMPLES brackets
 * realtime <= cuptiGetTimestamp <= realtime, the offset from its midpoint, so the move errs by
 * at most half that bracket (cupti_clock_bound_ns, typically tens of ns). CUPTI's own GPU-to-
 * host fit comes on top of that and is not ours to measure, and a host clock stepped during the
 * run (NTP) moves both clocks alike only where they are the same clock.
 *
 * Built with -DDDPDBG_HAVE_CUPTI where the Makefile finds CUPTI; otherwise only the stubs. */
#include "probe/cupti.h"

#include "kernels/base.h" // LOG_WARN, MIN
#include "probe/gpu_activity.h"

#include <stdio.h>
#include <string.h>

#ifndef DDPDBG_HAVE_CUPTI

int probe_cupti_start(Probe *p, char *err, size_t errlen) {
    if (!p) return 0;
    if (err && errlen > 0) snprintf(err, errlen, "%s", PROBE_CUPTI_NO_CUPTI_LINE);
    LOG_WARN("probe: GPU activity is off: %s; training continues", PROBE_CUPTI_NO_CUPTI_LINE);
    return -1;
}

void probe_cupti_stop(Probe *p) {}
void probe_cupti_correlate_push(uint64_t seq) {}
void probe_cupti_correlate_pop(void) {}
void probe_cupti_collective(void *cuda_stream, uint64_t seq) {}
void probe_cupti_step(int64_t iter) {}

#else

#include <cuda_runtime.h>
#include <cupti.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

enum {
    BUFFER_BYTES = 1 << 20, // one activity buffer: ~10k records
    CLOCK_SAMPLES = 16,
    FLUSH_MS = 500,
    NAME_BYTES = 256, // a kernel's name is cut here (long template names would fill the ring)
    NAME_CACHE = 512, // distinct kernels whose demangled names are kept
    ERR_MAX = 512,
};

// Ours, so that another CUPTI user in the process (Kineto takes CUSTOM0 and CUSTOM1) never
// reads our ids as theirs.
#define CORRELATION_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2

// The record versions read here. CUPTI writes its newest version of each; every version keeps
// the fields read here where the first of these put them (checked against the newest one this
// header has), so these read records from any CUPTI of CUDA 12 or 13.
typedef CUpti_ActivityKernel4 KernelRecord;
typedef CUpti_ActivityMemcpy MemcpyRecord;
typedef CUpti_ActivityMemset MemsetRecord;
#if CUPTI_API_VERSION >= 130000
#define SAME_FIELD(old, new, f) static_assert(offsetof(old, f) == offsetof(new, f), #f)
SAME_FIELD(KernelRecord, CUpti_ActivityKernel10, start);
SAME_FIELD(KernelRecord, CUpti_ActivityKernel10, end);
SAME_FIELD(KernelRecord, CUpti_ActivityKernel10, deviceId);
SAME_FIELD(KernelRecord, CUpti_ActivityKernel10, streamId);
SAME_FIELD(KernelRecord, CUpti_ActivityKernel10, correlationId);
SAME_FIELD(KernelRecord, CUpti_ActivityKernel10, name);
SAME_FIELD(MemcpyRecord, CUpti_ActivityMemcpy6, copyKind);
SAME_FIELD(MemcpyRecord, CUpti_ActivityMemcpy6, bytes);
SAME_FIELD(MemcpyRecord, CUpti_ActivityMemcpy6, start);
SAME_FIELD(MemcpyRecord, CUpti_ActivityMemcpy6, end);
SAME_FIELD(MemcpyRecord, CUpti_ActivityMemcpy6, streamId);
SAME_FIELD(MemcpyRecord, CUpti_ActivityMemcpy6, deviceId);
SAME_FIELD(MemcpyRecord, CUpti_ActivityMemcpy6, correlationId);
SAME_FIELD(MemsetRecord, CUpti_ActivityMemset4, bytes);
SAME_FIELD(MemsetRecord, CUpti_ActivityMemset4, start);
SAME_FIELD(MemsetRecord, CUpti_ActivityMemset4, end);
SAME_FIELD(MemsetRecord, CUpti_ActivityMemset4, deviceId);
SAME_FIELD(MemsetRecord, CUpti_ActivityMemset4, streamId);
SAME_FIELD(MemsetRecord, CUpti_ActivityMemset4, correlationId);
#endif

// What is enabled, in order (disabled in reverse). CONCURRENT_KERNEL, not KERNEL: KERNEL
// serialises every kernel of the process. DRIVER: NCCL launches with cuLaunchKernelEx.
static const struct {
    CUpti_ActivityKind kind;
    const char *name;
} kinds[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"},
    {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, "EXTERNAL_CORRELATION"},
    {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER"},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME"},
};
enum { N_KINDS = sizeof kinds / sizeof kinds[0] };

typedef struct CachedName {
    const char *raw; // CUPTI's: one string per kernel, alive as long as CUPTI
    char *shown;     // demangled and cut to NAME_BYTES, malloc'd
} CachedName;

// The process's one recorder (CUPTI is process-wide).
static struct {
    _Atomic(Probe *) probe; // where records go; NULL when not recording
    GpuActivity *activity;  // the rows' way in (ties, bound); set while probe is
    atomic_int off;         // a CUPTI call failed while recording: warned, records dropped
    atomic_int in_callback; // buffer callbacks running now (stop waits for none)
    atomic_uint_fast64_t events, dropped;
    int64_t offset_ns; // probe clock = CUPTI clock + offset_ns
    bool registered;   // the buffer callbacks, once per process
    pthread_t flusher;
    pthread_mutex_t mu; // guards names and stop_flusher (never held into CUPTI)
    pthread_cond_t wake;
    bool stop_flusher;
    CachedName names[NAME_CACHE];
} rec = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static _Thread_local int pushed; // this thread's correlation pushes not yet popped

static const char *result_text(CUptiResult r) {
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) return "CUPTI_ERROR_?";
    return s;
}

// The one warning of a recording that failed; later failures are silent, records dropped.
static void recording_failed(const char *call, CUptiResult r) {
    if (atomic_exchange(&rec.off, 1)) return;
    LOG_WARN("probe: GPU activity is off: CUPTI: %s: %s; training continues", call, result_text(r));
}

// ---- records --------------------------------------------------------------------------------

static int64_t to_probe_clock(uint64_t cupti_ns) {
    return cupti_ns ? (int64_t)cupti_ns + rec.offset_ns : 0; // 0: CUPTI has no time for it
}

// The C++ runtime's demangler where the binary has it (the trainer links as C++), else none.
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status)
    __attribute__((weak));

static char *shown_name(const char *raw) {
    char *demangled = NULL;
    int status = -1;
    if (__cxa_demangle && raw[0] == '_' && raw[1] == 'Z')
        demangled = __cxa_demangle(raw, NULL, NULL, &status);
    const char *name = demangled && status == 0 ? demangled : raw;
    size_t n = MIN(strlen(name), (size_t)NAME_BYTES);
    char *shown = malloc(n + 1);
    if (shown) memcpy(shown, name, n), shown[n] = 0;
    free(demangled);
    return shown;
}

// The name a kernel is recorded under, demangled once per kernel (CUPTI keeps one raw string
// per kernel, so its address is the key). The raw name when the cache is full or memory is out.
static const char *kernel_name(const char *raw) {
    if (!raw) return "?";
    size_t h = ((uintptr_t)raw >> 3) % NAME_CACHE;
    const char *name = raw;
    pthread_mutex_lock(&rec.mu);
    for (size_t i = 0; i < NAME_CACHE; i++) {
        CachedName *c = &rec.names[(h + i) % NAME_CACHE];
        if (c->raw == raw) {
            name = c->shown;
            break;
        }
        if (!c->raw) {
            char *shown = shown_name(raw);
            if (shown) c->raw = raw, c->shown = shown, name = shown;
            break;
        }
    }
    pthread_mutex_unlock(&rec.mu);
    return name;
}

// One CUPTI record into the trace through gpu_activity (ties, the per-step bound; columns:
// traces/README.md); API records and kinds we did not ask for give none.
static void emit(Probe *p, const CUpti_Activity *r) {
    GpuRecord g = {0};
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const KernelRecord *k = (const void *)r;
        g = (GpuRecord){.kind = GPU_RECORD_KERNEL, .correlation = k->correlationId,
                        .device = (int32_t)k->deviceId, .stream = k->streamId,
                        .start_ns = to_probe_clock(k->start), .end_ns = to_probe_clock(k->end),
                        .name = kernel_name(k->name)};
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const MemcpyRecord *m = (const void *)r;
        g = (GpuRecord){.kind = GPU_RECORD_MEMCPY, .correlation = m->correlationId,
                        .device = (int32_t)m->deviceId, .stream = m->streamId,
                        .copy_kind = m->copyKind, .start_ns = to_probe_clock(m->start),
                        .end_ns = to_probe_clock(m->end), .bytes = m->bytes};
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const MemsetRecord *m = (const void *)r;
        g = (GpuRecord){.kind = GPU_RECORD_MEMSET, .correlation = m->correlationId,
                        .device = (int32_t)m->deviceId, .stream = m->streamId,
                        .start_ns = to_probe_clock(m->start), .end_ns = to_probe_clock(m->end),
                        .bytes = m->bytes};
        break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const CUpti_ActivityExternalCorrelation *x = (const void *)r;
        if (x->externalKind != CORRELATION_KIND) return;
        probe_emit(p, PROBE_GPU_CORRELATION, x->correlationId, (int32_t)x->correlationId, 0,
                   (int64_t)x->externalId, 0, NULL);
        atomic_fetch_add_explicit(&rec.events, 1, memory_order_relaxed);
        return;
    }
    default:
        return;
    }
    gpu_activity_record(rec.activity, &g);
}

// CUPTI asks for a buffer: 8-byte aligned, as its records are. NULL makes CUPTI drop (and
// count) the records it would have held.
static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0; // as many as fit
}

// CUPTI gives a buffer back (ctx and stream are NULL and 0 since CUDA 6).
static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    atomic_fetch_add(&rec.in_callback, 1); // before the load of probe: see probe_cupti_stop
    Probe *p = atomic_load(&rec.probe);
    CUpti_Activity *r = NULL;
    while (p && buffer && !atomic_load_explicit(&rec.off, memory_order_relaxed)) {
        CUptiResult e = cuptiActivityGetNextRecord(buffer, valid, &r);
        if (e == CUPTI_ERROR_MAX_LIMIT_REACHED) break; // the end of the valid records
        if (e != CUPTI_SUCCESS) {
            recording_failed("cuptiActivityGetNextRecord", e);
            break;
        }
        emit(p, r);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        atomic_fetch_add(&rec.dropped, dropped);
    free(buffer);
    atomic_fetch_sub(&rec.in_callback, 1);
}

// Hands CUPTI's finished buffers to the probe every FLUSH_MS (an unforced flush: it returns
// only buffers whose records are complete and never synchronises the device).
static void *flusher_main(void *arg) {
    pthread_mutex_lock(&rec.mu);
    while (!rec.stop_flusher) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)FLUSH_MS * 1000000;
        until.tv_sec += until.tv_nsec / 1000000000, until.tv_nsec %= 1000000000;
        if (pthread_cond_timedwait(&rec.wake, &rec.mu, &until) != ETIMEDOUT) continue;
        pthread_mutex_unlock(&rec.mu); // never held into CUPTI: the callbacks take it
        CUptiResult e = cuptiActivityFlushAll(0);
        if (e != CUPTI_SUCCESS) recording_failed("cuptiActivityFlushAll", e);
        pthread_mutex_lock(&rec.mu);
    }
    pthread_mutex_unlock(&rec.mu);
    return NULL;
}

// ---- start and stop -------------------------------------------------------------------------

static int64_t realtime_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

// offset (probe clock = CUPTI clock + offset) and its error bound, from the tightest bracket.
static CUptiResult calibrate(int64_t *offset, int64_t *bound) {
    int64_t best = INT64_MAX;
    for (int i = 0; i < CLOCK_SAMPLES; i++) {
        uint64_t cupti = 0;
        int64_t before = realtime_ns();
        CUptiResult e = cuptiGetTimestamp(&cupti);
        int64_t after = realtime_ns();
        if (e != CUPTI_SUCCESS) return e;
        if (after - before < best) {
            best = after - before;
            *offset = before + best / 2 - (int64_t)cupti;
            *bound = (best + 1) / 2;
        }
    }
    return CUPTI_SUCCESS;
}

// Turns off the first n kinds, newest first, and hands every buffer back (forced: with the
// records still incomplete). Then no callback will find a probe.
static void disable_and_flush(int n) {
    for (int i = n - 1; i >= 0; i--)
        cuptiActivityDisable(kinds[i].kind);
    CUptiResult e = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (e != CUPTI_SUCCESS) recording_failed("cuptiActivityFlushAll", e);
    // A callback that counted itself in before this store may still be emitting: wait for it.
    // One that counts itself in after it sees NULL (both are sequentially consistent).
    atomic_store(&rec.probe, NULL);
    while (atomic_load(&rec.in_callback)) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
}

static int start_failed(char *err, size_t errlen, const char *why) {
    if (err && errlen > 0) snprintf(err, errlen, "%s", why);
    LOG_WARN("probe: GPU activity is off: %s; training continues", why);
    return -1;
}

int probe_cupti_start(Probe *p, char *err, size_t errlen) {
    if (!p) return 0;
    char why[ERR_MAX];
    if (atomic_load(&rec.probe))
        return start_failed(err, errlen, "already recording (one probe per process)");
    int devices = 0;
    cudaError_t ce = cudaGetDeviceCount(&devices);
    if (ce != cudaSuccess || devices < 1) {
        if (ce != cudaSuccess)
            snprintf(why, sizeof why, PROBE_CUPTI_NO_DEVICE_PREFIX "%s: %s)", cudaGetErrorName(ce),
                     cudaGetErrorString(ce));
        else
            snprintf(why, sizeof why, PROBE_CUPTI_NO_DEVICE_PREFIX "0)");
        return start_failed(err, errlen, why);
    }
    uint32_t version = 0;
    int64_t offset = 0, bound = 0;
    const char *call = "cuptiGetVersion";
    CUptiResult e = cuptiGetVersion(&version);
    if (e == CUPTI_SUCCESS && !rec.registered) {
        call = "cuptiActivityRegisterCallbacks";
        e = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
        rec.registered = e == CUPTI_SUCCESS;
    }
    if (e == CUPTI_SUCCESS) call = "cuptiGetTimestamp", e = calibrate(&offset, &bound);
    if (e != CUPTI_SUCCESS) {
        snprintf(why, sizeof why, "CUPTI: %s: %s", call, result_text(e));
        return start_failed(err, errlen, why);
    }
    rec.offset_ns = offset;
    int rows_per_step = gpu_activity_rows_per_step_from_env();
    rec.activity = gpu_activity_new(p, rows_per_step);
    atomic_store(&rec.off, 0);
    atomic_store(&rec.events, 0);
    atomic_store(&rec.dropped, 0);
    atomic_store(&rec.probe, p); // before enabling: a buffer may come back at once
    for (int i = 0; i < N_KINDS; i++) {
        e = cuptiActivityEnable(kinds[i].kind);
        if (e != CUPTI_SUCCESS) {
            atomic_store(&rec.off, 1); // the warning below is the one
            disable_and_flush(i);
            gpu_activity_free(rec.activity), rec.activity = NULL;
            snprintf(why, sizeof why, "CUPTI: cuptiActivityEnable(%s): %s", kinds[i].name,
                     result_text(e));
            return start_failed(err, errlen, why);
        }
    }
    rec.stop_flusher = false;
    int pe = pthread_create(&rec.flusher, NULL, flusher_main, NULL);
    if (pe != 0) {
        atomic_store(&rec.off, 1);
        disable_and_flush(N_KINDS);
        gpu_activity_free(rec.activity), rec.activity = NULL;
        snprintf(why, sizeof why, "cannot start the CUPTI flush thread: %s", strerror(pe));
        return start_failed(err, errlen, why);
    }
    probe_meta(p, "cupti_version", "%u", version);
    probe_meta(p, "cupti_clock_offset_ns", "%lld", (long long)offset);
    probe_meta(p, "cupti_clock_bound_ns", "%lld", (long long)bound);
    probe_meta(p, "cupti_rows_per_step", "%d", rows_per_step);
    return 0;
}

void probe_cupti_stop(Probe *p) {
    if (!p || atomic_load(&rec.probe) != p) return;
    pthread_mutex_lock(&rec.mu);
    rec.stop_flusher = true;
    pthread_cond_signal(&rec.wake);
    pthread_mutex_unlock(&rec.mu);
    pthread_join(rec.flusher, NULL);
    disable_and_flush(N_KINDS);
    GpuActivityStats st = gpu_activity_stats(rec.activity);
    gpu_activity_free(rec.activity), rec.activity = NULL;
    uint64_t events = atomic_load(&rec.events) + st.rows + st.tied, dropped = atomic_load(&rec.dropped);
    probe_meta(p, "cupti_events", "%llu", (unsigned long long)events);
    probe_meta(p, "cupti_dropped", "%llu", (unsigned long long)dropped);
    probe_meta(p, "cupti_filtered", "%llu", (unsigned long long)st.filtered);
    probe_meta(p, "cupti_nccl_tied", "%llu", (unsigned long long)st.tied);
    probe_meta(p, "cupti_nccl_untied", "%llu", (unsigned long long)st.nccl_untied);
    if (dropped)
        LOG_WARN("probe: CUPTI dropped %llu GPU activity records (no buffer to put them in); "
                 "the trace lacks them",
                 (unsigned long long)dropped);
    for (int i = 0; i < NAME_CACHE; i++) {
        free(rec.names[i].shown);
        rec.names[i] = (CachedName){0};
    }
}

void probe_cupti_correlate_push(uint64_t seq) {
    if (!atomic_load_explicit(&rec.probe, memory_order_relaxed) ||
        atomic_load_explicit(&rec.off, memory_order_relaxed))
        return;
    CUptiResult e = cuptiActivityPushExternalCorrelationId(CORRELATION_KIND, seq);
    if (e == CUPTI_SUCCESS)
        pushed++;
    else
        recording_failed("cuptiActivityPushExternalCorrelationId", e);
}

void probe_cupti_collective(void *cuda_stream, uint64_t seq) {
    if (!atomic_load_explicit(&rec.probe, memory_order_relaxed) ||
        atomic_load_explicit(&rec.off, memory_order_relaxed))
        return;
    uint32_t id = 0;
    CUptiResult e = cuptiGetStreamIdEx(NULL, (CUstream)cuda_stream, 0, &id);
    if (e != CUPTI_SUCCESS) {
        recording_failed("cuptiGetStreamIdEx", e);
        return;
    }
    gpu_activity_collective(rec.activity, id, seq);
}

void probe_cupti_step(int64_t iter) {
    if (!atomic_load_explicit(&rec.probe, memory_order_relaxed) ||
        atomic_load_explicit(&rec.off, memory_order_relaxed))
        return;
    gpu_activity_step(rec.activity, iter, probe_now_ns());
}

void probe_cupti_correlate_pop(void) {
    if (pushed == 0) return; // its push found CUPTI off: nothing to pop
    pushed--;
    uint64_t seq;
    CUptiResult e = cuptiActivityPopExternalCorrelationId(CORRELATION_KIND, &seq);
    if (e != CUPTI_SUCCESS) recording_failed("cuptiActivityPopExternalCorrelationId", e);
}

#endif
