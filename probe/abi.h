/* abi.h -- the probe's C ABI for foreign processes (libddpdbg_probe.so; the Python package
 * python/ddpdbg calls it through ctypes). The same ring, writer thread, drain and live phase as
 * the C trainer's (probe.h): this file only flattens probe.h's calls into plain C types, and
 * batches the hot ones, because a foreign call costs microseconds (ctypes: 4-5 us) against
 * tens of nanoseconds in C: one ddpdbg_emit_many per bucket or phase, not one call per event.
 *
 * Contract: every function takes the handle ddpdbg_open returned; a NULL handle makes every
 * call a no-op (a probe that failed is off and never stops the caller). Versioned:
 * ddpdbg_abi_version() returns DDPDBG_ABI_VERSION; a caller built for another version must not
 * call anything else. New functions are appended with a new version; existing ones keep their
 * signatures forever. Kinds, phases, ops and flags are probe.h's enum values (fixed forever). */
#ifndef PROBE_ABI_H
#define PROBE_ABI_H

#include <stdint.h>

#define DDPDBG_ABI_VERSION 1
// int64 words per event in ddpdbg_emit_many's array: t_ns (0: now), kind, flags, iter, a, b, c, d.
#define DDPDBG_EVENT_WORDS 8

typedef struct Probe DdpdbgProbe;

int ddpdbg_abi_version(void);
// probe_open: dir/rank<R>.ring and dir/rank<R>.db; heartbeat_ms and flush_ms as ProbeConfig's
// (0: none / 5 ms). NULL after one warning on stderr when the probe cannot start.
DdpdbgProbe *ddpdbg_open(const char *dir, int rank, int heartbeat_ms, int flush_ms);
// probe_close: stores everything, closes the database, removes the ring. NULL: no-op.
void ddpdbg_close(DdpdbgProbe *p);
// One META "key=value" record (also in table meta).
void ddpdbg_meta(DdpdbgProbe *p, const char *key, const char *value);
// n PARAM records: parameter first + i is names[i] (PyTorch's name), ndims[i] dimensions
// whose sizes follow one another in shapes (sum of ndims entries), numels[i] elements.
void ddpdbg_params(DdpdbgProbe *p, int first, int n, const char *const *names,
                   const int32_t *ndims, const int64_t *shapes, const int64_t *numels);
// n LAYOUT records of one generation (0: at construction, 1..: each rebuild), made at
// iteration iter (-1: before the first): parameter
// params[i] sits in bucket buckets[i] at element offset offsets[i]; the records' order is the
// parameters' order in their buckets.
void ddpdbg_layout(DdpdbgProbe *p, int64_t iter, int generation, int n, const int32_t *buckets,
                   const int32_t *params, const int64_t *offsets);
// n events without text, DDPDBG_EVENT_WORDS int64 each (see above), in the order given.
void ddpdbg_emit_many(DdpdbgProbe *p, int n, const int64_t *events);
// One event with a text of len bytes (no NUL needed; any length: errors' full text).
void ddpdbg_emit_text(DdpdbgProbe *p, int kind, int flags, int64_t iter, int32_t a, int32_t b,
                      int64_t c, int64_t d, const char *text, int64_t len);
// Optionally a phase event (kind 0: none), then the live phase the watchdog reads.
void ddpdbg_phase(DdpdbgProbe *p, int kind, int phase, int64_t iter);
// probe_now_ns: the records' clock (CLOCK_REALTIME, ns), for events recorded later (t_ns).
int64_t ddpdbg_now_ns(void);
// 1 while the probe is on; 0 once it failed (or for NULL).
int ddpdbg_on(DdpdbgProbe *p);

#endif
