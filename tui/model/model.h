/* model.h -- a trace directory as the views, the diagnosis and the report see it: built from
 * the rank<R>.db files (traces/schema.sql) by model_load, read-only (the trace is opened with
 * SQLITE_OPEN_READONLY and never written), and refreshed incrementally while a run is live.
 * Per rank: metadata, state, parameter-level facts per iteration (which parameters reported a
 * gradient, which were marked ready and how), bucket launches and completions, the collective
 * sequence, phases and times, the batch's box counts, errors and hangs. Everything the UI
 * needs is here as plain arrays; no view runs SQL. A Model can also be built by hand (tests,
 * benchmarks): every field is documented with its invariants. */
#ifndef TUI_MODEL_H
#define TUI_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    RANK_RUNNING,  // recording, last phase not a collective wait
    RANK_WAITING,  // waiting in a collective (ModelRank.wait_seq) since ModelRank.phase_t_ns
    RANK_FINISHED, // probe closed cleanly (meta closed=clean) without an error
    RANK_ERRORED,  // an ERROR event
    RANK_DEAD,     // ring drained by the launcher (killed or crashed) and no error recorded
} RankState;

// One collective as a rank issued it (COLL_LAUNCH and, if seen, its COLL_DONE).
typedef struct ModelCollective {
    int64_t seq;       // the group's sequence number, 1-based, equal across ranks in a healthy run
    int64_t iter;      // trainer iteration it was launched in (-1: construction)
    int op;            // ProbeOp: 1 allreduce, 2 broadcast, 3 allgather, 4 barrier
    int bucket;        // bucket index, -1 if not a bucket
    int64_t numel;
    char what[24];     // "bucket", "local_used_map", "buffers", "module_states", ...
    int64_t t_launch_ns, t_done_ns; // t_done_ns 0: never completed
    bool ok;           // completed successfully
} ModelCollective;

// One bucket layout: bucket b holds vars[start[b] .. start[b+1]).
typedef struct ModelLayout {
    int generation;     // 0 initial, 1.. rebuilt
    int64_t first_iter; // the iteration of its LAYOUT records (-1: construction)
    int n_buckets;
    int *start;         // n_buckets + 1
    int *vars;          // n_params
    int64_t *numel;     // per bucket
} ModelLayout;

// One GPU activity record from CUPTI (GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET; added by model.c).
typedef struct ModelGpu {
    int kind;                     // PROBE_GPU_KERNEL, PROBE_GPU_MEMCPY or PROBE_GPU_MEMSET
    int device;                   // kernel, memset: the device; memcpy: CUPTI's copy kind
    int stream;
    int64_t t_start_ns, t_end_ns; // on the trace's clock; 0: CUPTI had none
    int64_t correlation;          // CUPTI's correlation id
    int name;                     // kernel: index into ModelRank.gpu_names; else -1
    int64_t bytes;                // memcpy, memset: bytes; kernel: 0
    int64_t coll_seq;             // the collective it ran for (GPU_CORRELATION seen before it), 0
} ModelGpu;

// What one rank did in one iteration. Bitmaps have one bit per parameter (n_params bits,
// bit i of byte i / 8); words are allocated by the model.
typedef struct ModelIter {
    int64_t iter;
    int64_t t_forward_ns, t_backward_ns, t_backward_end_ns, t_optim_ns; // 0: did not happen
    bool finalized;          // FINALIZE seen
    int n_images, n_boxes;   // BATCH events: images and ground-truth boxes in them
    uint8_t *grad_ready;     // GRAD_READY with a defined gradient
    uint8_t *marked;         // MARK_READY (used or unused)
    uint8_t *marked_unused;  // MARK_READY as unused (find_unused_parameters)
    int n_grad_ready, n_marked;
    int layout;              // index into ModelRank.layouts in effect
    // per bucket of that layout (n_buckets entries each); times 0 when not happened
    int *bucket_ready;       // parameters of the bucket marked ready
    int64_t *bucket_launch_ns, *bucket_done_ns;
    int64_t *bucket_seq;     // its collective's seq, 0 if not launched
    // Added by model.c. layout is -1 and the bucket arrays NULL while no layout is recorded.
    int64_t t_forward_end_ns, t_finalize_ns; // 0: did not happen
    int64_t t_first_ns, t_last_ns; // the iteration's first and last event (any kind but
                                   // HEARTBEAT and HANG): the optimiser step ends at the next
                                   // iteration's t_first_ns
    int64_t seq_first;       // the seq of that first event: its rows come after it
    int64_t seq_forward;     // the seq of its FORWARD_BEGIN, 0 if none: the previous
                             // iteration's hooks (training thread) all come before it
    int n_marked_unused;     // bits in marked_unused
    int n_grad_undefined;    // GRAD_READY hooks that fired with an undefined gradient
    int64_t *bucket_ready_ns; // per bucket: its BUCKET_READY, 0 if never
} ModelIter;

typedef struct ModelRank {
    int rank;
    bool present;            // rank<R>.db exists and loaded
    char load_error[256];    // why it did not load ("" when present)
    int pid;
    char host[64];
    char args[1024];
    RankState state;
    int phase;               // ProbePhase of the last HEARTBEAT / phase event (best effort)
    int64_t phase_t_ns;
    int64_t last_event_ns;   // time of the newest event
    int64_t wait_seq;        // RANK_WAITING: the collective's seq
    char *error;             // full ERROR text, or NULL
    int64_t error_iter;
    char *hang;              // HANG summary text (from the launcher), or NULL
    ModelLayout *layouts;
    int n_layouts;
    ModelIter *iters;        // ascending iter, one per iteration that has any event
    int n_iters;
    ModelCollective *colls;  // in launch order
    int n_colls;
    int64_t n_events;
    // Added by model.c.
    char closed[16];         // meta closed: "clean", "drained", "no" ("" when absent)
    char exit[96];           // meta exit, when the launcher recorded how the rank ended
                             // ("exitcode 1", "signal 15 (SIGTERM, sent by ddpdbg)"); "" if not
    bool failed_first;       // meta failed_first: the launcher saw this rank fail first
    int64_t overruns;        // meta overruns: events the rank's ring dropped (trace incomplete)
    bool snapshot;           // meta source=flight_recorder (ddpdbg import-fr): the trace is what
                             // a dump held when it was taken; the rank issues nothing after it
    int64_t bucket_cap_bytes, first_bucket_bytes; // meta: the reducer's bucket caps; 0 when
                                                  // the trace did not record them
    int64_t pending_seq;     // in any state: the first collective launched and never completed
                             // (0: none); where a dead rank was when it stopped
    int hang_rank;           // from the HANG record: the rank the watchdog found stuck; -1: none
    int64_t hang_iter;
    int n_errors;            // ERROR events (error holds the first)
    int n_params;            // rows of its params table (!= Model.n_params: different models)
    int64_t last_heartbeat_ns; // newest HEARTBEAT (the probe's writer: alive, not progressing)
    int64_t last_seq;        // highest seq loaded: model_refresh reads the events above it
    ModelGpu *gpu;           // in record order (empty without CUPTI)
    int n_gpu;
    char **gpu_names;        // distinct kernel names
    int n_gpu_names;
    struct RankLoader *loader; // model.c's private state (the open database); NULL when absent
} ModelRank;

typedef struct Model {
    char dir[4096];
    int world;               // from meta (max over ranks); ranks[] has world entries
    ModelRank *ranks;
    int n_params;
    char **param_names;      // PyTorch's names, index order
    char **param_shapes;     // "256x256"
    int64_t *param_numel;
    int64_t t0_ns, t1_ns;    // earliest and latest event over all ranks
    int64_t min_iter, max_iter; // over all ranks' iters; 0 and -1 when there is none
    int n_present;           // ranks with present = true
} Model;

// Loads every rank<R>.db of dir. Ranks missing or unreadable are present = false with a
// reason. Returns 0, or -1 with one line in err when nothing usable is there (no database, a
// newer schema, a foreign or corrupt file for every rank).
int model_load(Model *m, const char *dir, char *err, size_t errlen);
// Re-reads what the live databases gained since the last load (cheap when nothing changed):
// per rank only the events with seq above last_seq, and meta; a rank whose file appeared
// since is loaded. Pointers into the Model (iters, colls, layouts) are valid until the next
// model_refresh or model_free. Returns 0, or -1 with one line in err (the model keeps what it
// had).
int model_refresh(Model *m, char *err, size_t errlen);
void model_free(Model *m);

static inline bool model_bit(const uint8_t *bits, int i) { return bits && (bits[i >> 3] >> (i & 7)) & 1; }

// The ModelIter of rank r at iteration iter, or NULL.
const ModelIter *model_iter(const Model *m, int r, int64_t iter);
// The same lookups on one rank (binary searches: iters ascend by iteration, colls by seq):
// its iteration iter, its collective number seq, the layout in effect at it; NULL when none.
const ModelIter *model_rank_iter(const ModelRank *rk, int64_t iter);
const ModelCollective *model_rank_coll(const ModelRank *rk, int64_t seq);
const ModelLayout *model_rank_layout(const ModelRank *rk, const ModelIter *it);

// Names for reports and views: "allreduce", "forward", "waiting"; "?" for an unknown value.
const char *model_op_name(int op);
const char *model_phase_name(int phase);
const char *model_state_name(RankState state);

#endif
