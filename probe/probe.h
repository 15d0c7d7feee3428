/* probe.h -- the per-rank flight recorder: fixed 64-byte records appended lock-free to a ring
 * in a memory-mapped file (rank<R>.ring), and a writer thread that batches them into the
 * rank's SQLite trace (rank<R>.db, schema traces/schema.sql, documented in traces/README.md).
 * The ring's header says what is committed, so the launcher can drain a rank that died, even
 * by SIGKILL, and lose nothing it had committed. A failing probe never stops training: it
 * prints one warning and every later call is a no-op. No tensors here: the trainer says what
 * happened in plain integers (which kinds it emits, and where, is the trainer's business). */
#ifndef PROBE_PROBE_H
#define PROBE_PROBE_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// The trace schema version this build writes and the newest it reads (PRAGMA user_version).
#define PROBE_SCHEMA_VERSION 2
// Ring records a ProbeConfig with capacity 0 gets: 8 MiB of ring, ~200 iterations of rtdetr-l
// (the writer empties it once a second).
#define PROBE_DEFAULT_CAPACITY (1u << 17)
#define PROBE_TEXT_BYTES 12 // text bytes a record holds; longer text continues in TEXT records

// What a record says. The values go into every trace (table kinds): fixed forever, new kinds
// are appended. Column meanings per kind (a, b, c, d, text): traces/README.md.
typedef enum ProbeKind {
    PROBE_META = 1,   // text "key=value": run and rank metadata (also in table meta)
    PROBE_PARAM = 2,  // a index, b ndim, c numel, text "name d0xd1x..." (table params)
    PROBE_LAYOUT = 3, // a generation (0 initial, 1.. rebuilt), b bucket, c param,
                      // d offset in the bucket (table layouts)
    PROBE_FORWARD_BEGIN = 4,
    PROBE_FORWARD_END = 5,
    PROBE_BACKWARD_BEGIN = 6,
    PROBE_BACKWARD_END = 7,
    PROBE_GRAD_READY = 8,    // a param, b order within this backward, c grad defined 0/1;
                             // flags PROBE_FLAG_MARKED: the hook marked it ready in bucket d
    PROBE_MARK_READY = 9,    // a param, b bucket, c 1 if marked as unused: a mark not in its
                             // hook's row (find_unused_parameters' unused parameters, and the
                             // first hook's own mark that follows them)
    PROBE_BUCKET_READY = 10, // b bucket
    PROBE_COLL_LAUNCH = 11,  // a ProbeOp, b bucket or -1, c group sequence number, d numel,
                             // text what ("bucket", "local_used_map", "buffers", ...)
    PROBE_COLL_DONE = 12,    // as COLL_LAUNCH; flags PROBE_FLAG_OK when it succeeded
    PROBE_FINALIZE = 13,
    PROBE_OPTIM_STEP = 14,
    PROBE_BATCH = 15,     // a image index in the dataset, b ground-truth boxes in it, c position in the batch
    PROBE_ERROR = 16,     // text: the full error
    PROBE_HEARTBEAT = 17, // a ProbePhase, c records claimed so far, d phase entered (ns)
    PROBE_HANG = 18,      // text: the launcher's watchdog summary
    PROBE_TEXT = 19,      // continuation of the record before it (never a row of its own)
    // GPU activity from CUPTI (probe/cupti.h). iter: CUPTI's correlation id, not an iteration;
    // c, d: start and end on this clock (0: CUPTI had none).
    PROBE_GPU_KERNEL = 20,      // a device, b stream, text the kernel's name
    PROBE_GPU_MEMCPY = 21,      // a CUPTI copy kind (1 HtoD, 2 DtoH, 8 DtoD, ...), b stream,
                                // text bytes (decimal)
    PROBE_GPU_MEMSET = 22,      // a device, b stream, text bytes (decimal)
    PROBE_GPU_CORRELATION = 23, // a correlation id, c the collective's sequence number
    PROBE_KIND_END              // one past the last kind
} ProbeKind;

// COLL_LAUNCH / COLL_DONE column a (table ops).
typedef enum ProbeOp {
    PROBE_OP_ALLREDUCE = 1,
    PROBE_OP_BROADCAST,
    PROBE_OP_ALLGATHER,
    PROBE_OP_BARRIER
} ProbeOp;

// What a rank is doing, for HEARTBEAT records and the ring header's live state (table phases).
typedef enum ProbePhase {
    PROBE_PHASE_IDLE = 0,
    PROBE_PHASE_STARTUP,
    PROBE_PHASE_DATA,
    PROBE_PHASE_FORWARD,
    PROBE_PHASE_BACKWARD,
    PROBE_PHASE_COLLECTIVE, // waiting in a collective
    PROBE_PHASE_OPTIM,
    PROBE_PHASE_VALIDATE,
    PROBE_PHASE_CHECKPOINT,
    PROBE_PHASE_DONE
} ProbePhase;

#define PROBE_FLAG_OK 0x0001u        // COLL_DONE: the collective succeeded
#define PROBE_FLAG_MARKED 0x0002u    // GRAD_READY: the hook marked its parameter ready (in bucket
                                     // d) before anything else happened; no MARK_READY row
#define PROBE_FLAG_CONTINUED 0x8000u // reserved: TEXT records follow (set by the ring, not callers)

// One ring slot. seq is the rank's 1-based record number, stored last with release semantics:
// a slot whose seq is not the one expected there is not committed (claimed and being written,
// or never claimed). t_ns is CLOCK_REALTIME. Fields are ordered so that there is no padding.
// A TEXT continuation record: a part number (1..b), b parts, c total text length in bytes,
// d the seq of the record it continues, text the part's bytes; t_ns and iter copy the head's.
typedef struct ProbeRecord {
    uint64_t seq;
    int64_t t_ns;
    int64_t iter;
    int64_t c, d;
    uint16_t kind, flags;
    int32_t a, b;
    char text[PROBE_TEXT_BYTES]; // NUL-padded; not NUL-terminated when full
} ProbeRecord;
static_assert(sizeof(ProbeRecord) == 64, "a ring record is 64 bytes: the ring file's layout");

// Name of a kind ("GRAD_READY"), or NULL for a value that is no kind.
const char *probe_kind_name(int kind);

// ---- the ring ------------------------------------------------------------------------------
// A memory-mapped file: a 4 KiB header (magic "DDPDBGR1", version, record size, capacity,
// rank, pid, created time, head = next seq to claim, tail = highest seq the writer stored,
// overrun count, the rank's live phase) then capacity records. Any thread of any process that
// maps it may emit: lock-free, no syscall, never blocks.
typedef struct ProbeRing ProbeRing;

// Creates (replacing) the ring file at path with room for capacity records (rounded up to a
// power of two, at least 64), its disk blocks reserved so that a full disk fails here and not
// on a later store. NULL with one line in err on failure.
ProbeRing *probe_ring_create(const char *path, uint64_t capacity, int rank, char *err,
                             size_t errlen);
// Maps an existing ring read-write (the launcher: to drain it, to add a HANG record, to read
// its live state). Checks magic, version, record size and that the file holds every record
// its header promises (a truncated ring is an error, not a SIGBUS). NULL with err on failure.
ProbeRing *probe_ring_attach(const char *path, char *err, size_t errlen);
// Unmaps; the file stays. NULL is a no-op.
void probe_ring_close(ProbeRing *ring);

// Appends one event: a record, plus ceil((len - 12) / 12) TEXT records when len > 12, all
// claimed at once (consecutive seqs) and the head committed last, so that a reader that sees
// the head sees its whole text. Returns false and counts one overrun when the ring has no
// room: a slot is reused only once the writer has stored its record (no overwrite, no wait).
// flags must not contain PROBE_FLAG_CONTINUED. text needs no NUL; NULL when len is 0.
bool probe_ring_emit(ProbeRing *ring, ProbeKind kind, uint16_t flags, int64_t iter, int32_t a,
                     int32_t b, int64_t c, int64_t d, const char *text, size_t len);
// probe_ring_emit for an event that happened at t_ns (probe_now_ns) and is recorded later.
bool probe_ring_emit_at(ProbeRing *ring, int64_t t_ns, ProbeKind kind, uint16_t flags, int64_t iter,
                        int32_t a, int32_t b, int64_t c, int64_t d, const char *text, size_t len);
// The probe's clock: CLOCK_REALTIME in ns (the records' t_ns).
int64_t probe_now_ns(void);
// Sets the live state in the header (relaxed stores, no record): what the launcher's watchdog
// reads while the rank runs. The three fields may be read a moment apart.
void probe_ring_set_phase(ProbeRing *ring, ProbePhase phase, int64_t iter);

// A snapshot of a ring's header.
typedef struct ProbeRingState {
    int rank, pid;
    uint64_t capacity;
    int64_t created_ns;
    uint64_t head;     // next seq to claim: head - 1 records were claimed
    uint64_t tail;     // every record up to this seq is in the database
    uint64_t overruns; // events dropped because the ring was full
    bool closed;       // the writer stored everything and closed cleanly
    ProbePhase phase;
    int64_t phase_iter, phase_t_ns;
} ProbeRingState;
ProbeRingState probe_ring_state(const ProbeRing *ring);

// ---- the trainer's probe -------------------------------------------------------------------
typedef struct ProbeConfig {
    const char *dir;   // trace directory, created with its parents if missing
    int rank;          // the files are dir/rank<R>.ring and dir/rank<R>.db (replaced if present)
    uint64_t capacity; // ring records; 0: PROBE_DEFAULT_CAPACITY
    int flush_ms;      // how often the writer polls the ring and commits; 0: 5 ms. An emit
                       // that finds the ring half full wakes it at once.
    int heartbeat_ms;  // the writer thread emits HEARTBEAT this often; 0: never
    bool keep_ring;    // keep rank<R>.ring after a clean close (removed by default)
} ProbeConfig;

typedef struct Probe Probe;

// Creates the directory, the ring and the database, and starts the writer thread. On any
// failure prints one warning naming the path and the reason ("the probe is off, training
// continues") and returns NULL: a NULL Probe makes every call below a no-op.
Probe *probe_open(const ProbeConfig *cfg);
// Stops the writer after it has stored every committed record, records the probe's counts in
// table meta (overruns, events, records, closed), leaves the database as one self-contained
// file, and removes the ring (unless keep_ring, or the probe failed: then the ring keeps what
// the database could not take). Warns once if events were dropped. No emit may run during or
// after it. NULL is a no-op.
void probe_close(Probe *p);

// The out-of-line half of the emits below, for a non-NULL probe: a no-op once the probe is off.
void probe_record(Probe *p, ProbeKind kind, uint16_t flags, int64_t iter, int32_t a, int32_t b,
                  int64_t c, int64_t d, const char *text, size_t len);

// One event from any thread. text: NULL, or a NUL-terminated string of any length (beyond 12
// bytes it continues in TEXT records). With the probe off this is one branch.
static inline void probe_emit(Probe *p, ProbeKind kind, int64_t iter, int32_t a, int32_t b,
                              int64_t c, int64_t d, const char *text) {
    if (p) probe_record(p, kind, 0, iter, a, b, c, d, text, text ? strlen(text) : 0);
}
// The same with flags and a text of explicit length (no NUL needed): full errors, summaries.
static inline void probe_emit_text(Probe *p, ProbeKind kind, uint16_t flags, int64_t iter,
                                   int32_t a, int32_t b, int64_t c, int64_t d, const char *text,
                                   size_t len) {
    if (p) probe_record(p, kind, flags, iter, a, b, c, d, text, len);
}
// An event without text that happened at t_ns (probe_now_ns), recorded now: the trainer's
// hook row, which it writes once the mark that follows the hook is known.
void probe_emit_at(Probe *p, int64_t t_ns, ProbeKind kind, uint16_t flags, int64_t iter, int32_t a,
                   int32_t b, int64_t c, int64_t d);
// printf-style text; formats nothing when p is NULL.
void probe_emitf(Probe *p, ProbeKind kind, int64_t iter, int32_t a, int32_t b, int64_t c, int64_t d,
                 const char *fmt, ...) __attribute__((format(printf, 8, 9)));
// A META record "key=value" (iter -1): lands in table meta as well.
void probe_meta(Probe *p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// A PARAM record (iter -1): index, PyTorch's name, shape (ndim dims), numel.
void probe_param(Probe *p, int32_t index, const char *name, int32_t ndim, const int64_t *shape,
                 int64_t numel);
// The rank's live phase, read by the watchdog from the ring header and by HEARTBEAT records.
void probe_set_phase(Probe *p, ProbePhase phase, int64_t iter);

typedef struct ProbeStats {
    bool on;           // false once the probe failed
    uint64_t claimed;  // ring records claimed (TEXT parts included)
    uint64_t stored;   // ring records the writer has stored (its tail)
    uint64_t overruns; // events dropped because the ring was full
} ProbeStats;
ProbeStats probe_stats(const Probe *p); // all zero for NULL

// ---- after the run -------------------------------------------------------------------------
typedef struct ProbeDrainReport {
    uint64_t db_max_seq; // the database's last seq before the drain
    uint64_t ring_last;  // the ring's last claimed seq
    uint64_t inserted;   // events the drain added
    uint64_t in_flight;  // records claimed but never committed (the rank died writing them)
    uint64_t lost;       // records neither in the database nor still in the ring (0 unless
                         // the database lost rows the writer had stored)
    uint64_t overruns;   // events the rank dropped because its ring was full
} ProbeDrainReport;

// For a rank that died: inserts into db_path (created if missing) every committed event of
// the ring whose seq is above the database's last one, and records what it did in table meta
// (drain_inserted, drain_in_flight, overruns). Only for a ring whose process has exited.
// report may be NULL. Returns 0, or -1 with one line in err (truncated or foreign ring,
// corrupt or newer database, or one whose indexes disagree with their tables).
int probe_drain(const char *ring_path, const char *db_path, ProbeDrainReport *report, char *err,
                size_t errlen);
// Checks that path is a readable trace this build understands: a SQLite database (opened
// read-only) with user_version between 1 and PROBE_SCHEMA_VERSION, the schema's tables, and
// a file as long as its pages say, and (up to 64 MB; a bigger trace's damaged page is reported
// when a reader reaches it) a clean quick_check. A hot journal (a writer killed inside a
// transaction) is rolled back first, through a read-write connection: the one write a reader
// makes. Returns 0, or -1 with one line in err naming the path and the problem.
int probe_db_check(const char *path, char *err, size_t errlen);
// Sets meta(keys[i]) = values[i], i < n, in one transaction, in an existing trace whose rank
// has exited (the launcher: how each rank ended, keys "exit" and "failed_first"). The trace is
// opened, and checked, once for all of them. Returns 0, or -1 with one line in err.
int probe_db_set_meta(const char *path, const char *const *keys, const char *const *values, int n,
                      char *err, size_t errlen);
// Writes a new trace at path (replacing any file there), self-contained, from records made
// elsewhere than in a rank (ddpdbg import-fr: PyTorch's Flight Recorder dumps): recs[i] with
// its text texts[i] (NULL: none; the record's own text field is not read), stored as the
// writer stores a ring's records (META also into table meta, PARAM into params, ...). seq must
// ascend from 1. Returns 0, or -1 with one line in err.
int probe_db_write(const char *path, const ProbeRecord *recs, const char *const *texts, size_t n,
                   char *err, size_t errlen);

#endif
