/* abi.c -- the foreign-process ABI (abi.h) over the trainer's probe (probe.h). */
#include "probe/abi.h"

#include "probe/probe.h"

int ddpdbg_abi_version(void) { return DDPDBG_ABI_VERSION; }

DdpdbgProbe *ddpdbg_open(const char *dir, int rank, int heartbeat_ms, int flush_ms) {
    ProbeConfig cfg = {.dir = dir, .rank = rank, .heartbeat_ms = heartbeat_ms,
                       .flush_ms = flush_ms};
    return probe_open(&cfg);
}

void ddpdbg_close(DdpdbgProbe *p) { probe_close(p); }

void ddpdbg_meta(DdpdbgProbe *p, const char *key, const char *value) {
    probe_meta(p, key, "%s", value ? value : "");
}

void ddpdbg_params(DdpdbgProbe *p, int first, int n, const char *const *names,
                   const int32_t *ndims, const int64_t *shapes, const int64_t *numels) {
    const int64_t *shape = shapes;
    for (int i = 0; p && i < n; i++) {
        probe_param(p, first + i, names[i], ndims[i], shape, numels[i]);
        shape += ndims[i] > 0 ? ndims[i] : 0;
    }
}

void ddpdbg_layout(DdpdbgProbe *p, int64_t iter, int generation, int n, const int32_t *buckets,
                   const int32_t *params, const int64_t *offsets) {
    for (int i = 0; p && i < n; i++)
        probe_emit(p, PROBE_LAYOUT, iter, generation, buckets[i], params[i], offsets[i], NULL);
}

void ddpdbg_emit_many(DdpdbgProbe *p, int n, const int64_t *events) {
    for (int i = 0; p && i < n; i++) {
        const int64_t *e = events + (int64_t)i * DDPDBG_EVENT_WORDS;
        if (e[1] <= 0 || e[1] >= PROBE_KIND_END || e[1] == PROBE_TEXT) continue; // not a kind
        probe_emit_at(p, e[0], (ProbeKind)e[1], (uint16_t)(e[2] & ~PROBE_FLAG_CONTINUED), e[3],
                      (int32_t)e[4], (int32_t)e[5], e[6], e[7]);
    }
}

void ddpdbg_emit_text(DdpdbgProbe *p, int kind, int flags, int64_t iter, int32_t a, int32_t b,
                      int64_t c, int64_t d, const char *text, int64_t len) {
    if (kind <= 0 || kind >= PROBE_KIND_END || kind == PROBE_TEXT) return;
    probe_emit_text(p, (ProbeKind)kind, (uint16_t)(flags & ~PROBE_FLAG_CONTINUED), iter, a, b, c,
                    d, len > 0 ? text : NULL, len > 0 ? (size_t)len : 0);
}

void ddpdbg_phase(DdpdbgProbe *p, int kind, int phase, int64_t iter) {
    if (!p) return;
    if (kind > 0 && kind < PROBE_KIND_END && kind != PROBE_TEXT)
        probe_emit(p, (ProbeKind)kind, iter, 0, 0, 0, 0, NULL);
    probe_set_phase(p, (ProbePhase)phase, iter);
}

int64_t ddpdbg_now_ns(void) { return probe_now_ns(); }

int ddpdbg_on(DdpdbgProbe *p) { return probe_stats(p).on; }
