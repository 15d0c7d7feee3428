/* reducer.h -- PyTorch's DDP Reducer (torch/csrc/distributed/c10d/reducer.cpp), in C: the
 * parameter index space, gradient buckets, the gradient-ready hook, strict in-order bucket
 * allreduce, finalize at the end of backward, the one bucket rebuild, find_unused_parameters'
 * graph search and used-bitmap allreduce, static_graph, gradient_as_bucket_view, and every
 * error with PyTorch's exact text (../shared/docs/ddp-reducer.md §1-§5). The Python half of
 * DDP (construction checks, buffer broadcasts, no_sync, the forward pre/post steps) is ddp.h.
 *
 * Life of an iteration, as in PyTorch:
 *   reducer_prepare_for_forward     DDP._pre_forward: counts the iteration
 *   reducer_rebuild_buckets         raises "Expected to have finished reduction ..." when the
 *                                   prior backward did not finalize; rebuilds once
 *   (forward)
 *   reducer_prepare_for_backward    DDP._post_forward: arms the hooks, searches unused params
 *   tape_backward                   the tape's ready hook calls reducer_autograd_hook per
 *                                   parameter; buckets launch in index order; once the last
 *                                   has launched, finalize runs as the tape's end-of-backward
 *                                   callback and waits for every bucket (Gloo: blocks here)
 * Errors are returned (-1) with the text in reducer_error(); a hook error stops the backward
 * (tape_backward returns -1), as PyTorch's exception does.
 *
 * Scope: fp32 dense parameters on one device (one (dtype, device) key), no comm hooks, no Join,
 * no sparse gradients, no mixed precision: what the RT-DETR trainer uses. */
#ifndef TRAINER_DIST_REDUCER_H
#define TRAINER_DIST_REDUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/dist/comm.h"
#include "trainer/tape.h"

// PyTorch's kDefaultFirstBucketBytes and kDefaultBucketBytesCap (reducer.hpp).
#define REDUCER_FIRST_BUCKET_BYTES (1024 * 1024)
#define REDUCER_BUCKET_BYTES_CAP (25 * 1024 * 1024)

// TORCH_DISTRIBUTED_DEBUG: OFF (errors show indices only), INFO and DETAIL (names too).
typedef enum { DEBUG_OFF, DEBUG_INFO, DEBUG_DETAIL } DebugLevel;
// Parses OFF/INFO/DETAIL (NULL or "" is OFF); -1 for anything else.
int debug_level_parse(const char *text, DebugLevel *out);

// One bucket layout: bucket b holds vars[start[b] .. start[b+1]) (parameter indices, in
// bucket order); limit[b] is the size limit it was cut with (bytes, logging only).
typedef struct BucketLayout {
    int n_buckets, n_vars;
    int *start; // n_buckets + 1
    int *vars;  // n_vars
    int64_t *limit;
} BucketLayout;
void bucket_layout_free(BucketLayout *l);

// compute_bucket_assignment_by_size for one (dtype, device) key: walks the tensors in order
// (tensor k is parameter order[k], or k when order is NULL), appends each to the open bucket
// and closes it once its bytes reach the current limit (limits[0], then limits[1], ... the
// last repeating). With order NULL the buckets are sorted by their smallest index (first
// construction); with an order they keep emission order (rebuild). bytes[i] is parameter
// i's size in bytes.
void bucket_assign_by_size(const int64_t *bytes, int n, const int *order, const int64_t *limits,
                           int n_limits, BucketLayout *out);

typedef struct ReducerConfig {
    bool find_unused_parameters;
    bool static_graph;
    bool gradient_as_bucket_view;
    int64_t bucket_bytes_cap;       // REDUCER_BUCKET_BYTES_CAP by default
    int64_t first_bucket_bytes_cap; // REDUCER_FIRST_BUCKET_BYTES by default
    DebugLevel debug;
} ReducerConfig;

// What the reducer does, for observers (the probe, the teaching mode). Every event carries
// the iteration (num_iterations, 1-based once training started).
typedef enum {
    REDUCER_EV_HOOK,          // param's gradient-ready hook fired (grad_defined says if it has one)
    REDUCER_EV_HOOK_DONE,     // that hook returned (whatever it marked, launched or raised)
    REDUCER_EV_MARK_READY,    // param marked ready in its bucket (unused ones too: unused = true)
    REDUCER_EV_BUCKET_READY,  // bucket's pending count reached 0
    REDUCER_EV_COLLECTIVE,    // a collective was launched: op, bucket (-1 if none), numel, seq
    REDUCER_EV_COLLECTIVE_WAIT, // the rank starts waiting for it (finalize; blocking ops)
    REDUCER_EV_COLLECTIVE_DONE, // its wait returned (ok or not)
    REDUCER_EV_FINALIZE,      // finalize_backward finished: the iteration is reduced
    REDUCER_EV_LAYOUT,        // a bucket layout was installed (rebuilt = false: the initial one)
    REDUCER_EV_ERROR,         // an error was raised: text
} ReducerEventKind;

typedef struct ReducerEvent {
    ReducerEventKind kind;
    int64_t iteration;
    int param;          // HOOK, HOOK_DONE, MARK_READY; else -1
    int bucket;         // MARK_READY, BUCKET_READY, COLLECTIVE(_DONE) of a bucket; else -1
    bool grad_defined;  // HOOK
    bool unused;        // MARK_READY: marked as unused by find_unused_parameters
    bool rebuilt;       // LAYOUT
    // COLLECTIVE, _WAIT, _DONE:
    const char *op;     // "allreduce", "broadcast", "allgather"
    const char *what;   // "bucket", "local_used_map", "bucket_indices", "buffers", ...
    int64_t numel;      // elements
    uint64_t seq;       // its number on the group, 1-based (pg_seq after it)
    bool ok;            // DONE: it succeeded
    const char *text;   // ERROR: the full message
    const BucketLayout *layout; // LAYOUT
} ReducerEvent;
typedef void (*ReducerObserver)(void *user, const ReducerEvent *e);

typedef struct Bucket {
    int n_vars;
    int *vars;        // parameter indices, bucket order
    int64_t *offset;  // per var, into flat
    float *flat;      // the bucket's contiguous gradients (numel floats), on the params' device
    float *host;      // off the CPU: the host staging copy the process group reduces (Gloo
                      // stages device tensors through host memory); NULL on the CPU
    int64_t numel;
    int pending;      // vars not yet marked ready this iteration
    PgWork *work;     // the launched allreduce, or NULL
    uint64_t seq;     // its collective number
} Bucket;

typedef struct Reducer {
    ProcessGroup *pg;
    Tape *tape;            // whose end-of-backward callbacks run finalize; its kc runs the kernels
    const Backend *be;     // the parameters' device: buckets and gradients live there
    ReducerConfig cfg;
    int n_params;
    Tensor **params;       // borrowed, index space order
    const char **names;    // borrowed; shown only when cfg.debug != OFF (PyTorch's param_names_)
    float **own_grad;      // each parameter's own grad buffer (gradient_as_bucket_view repoints)

    Bucket *buckets;
    int n_buckets;
    BucketLayout layout;   // the installed layout
    int *locator_bucket, *locator_pos; // per param

    int next_bucket, num_buckets_ready;
    bool expect_autograd_hooks, require_finalize, has_marked_unused_parameters;
    bool first_autograd_hook_called, finalize_queued;
    int64_t num_iterations, num_bwd_calls;
    bool *ready;           // perIterationReadyParams_
    int *unused;           // unused_parameters_, ascending
    int n_unused;
    float *local_used, *local_used_dev; // local_used_map_ and the copy the allreduce sums
    bool local_used_reduced;
    PgWork *local_used_work;
    uint64_t local_used_seq;
    double div_factor;     // < 0: unset
    int *rebuilt;          // rebuilt_param_indices_ (gradient-ready order)
    int n_rebuilt, cap_rebuilt;
    bool has_rebuilt;
    int *hook_count, *hook_budget; // static graph: numGradHooksTriggeredMap(_PerIteration)_
    bool delay_all_reduce_enqueued;

    char *error;           // the last error's full text (malloc'd) or NULL
    ReducerObserver observer;
    void *observer_user;
} Reducer;

// Builds the reducer over params[0..n) (the index space: every parameter that requires grad,
// in model.parameters() order). The initial layout: one bucket for everything when
// static_graph or !find_unused_parameters, else [first_cap, cap] buckets over the parameters
// in definition order, reversed (bucket 0 holds the last-defined). No collective is issued.
// The tape's ready hook is pointed at the reducer. Observer may be NULL.
void reducer_init(Reducer *r, ProcessGroup *pg, Tape *tape, Tensor **params, const char **names,
                  int n, const ReducerConfig *cfg, ReducerObserver observer, void *user);
// Restores each parameter's own grad buffer (copying a bucket view back) and frees everything.
void reducer_free(Reducer *r);

void reducer_prepare_for_forward(Reducer *r);
// ensure_prior_reduction_finished, then the one rebuild (two broadcasts from rank 0). Returns
// 1 when the buckets were rebuilt, 0 when not, -1 on error (text in reducer_error).
int reducer_rebuild_buckets(Reducer *r);
// Arms the hooks for the coming backward. outputs: the forward's outputs, searched for unused
// parameters when find_unused_parameters and not static_graph (else ignored).
void reducer_prepare_for_backward(Reducer *r, Tensor *const *outputs, int n_outputs);
// The gradient-ready hook of parameter index (after its gradient is accumulated). 0, or -1
// with the error set ("marked ready twice", "graph has changed", a failed collective).
int reducer_autograd_hook(Reducer *r, int index);
// Static graph, first iteration: queue the delayed allreduce of every bucket at the end of the
// coming backward (DDP's _DDPSink does this in PyTorch).
void reducer_queue_delay_all_reduce(Reducer *r);
// The parameter indices not marked ready this iteration (ascending), into out (n_params ints);
// returns how many.
int reducer_unmarked(const Reducer *r, int *out);

const char *reducer_error(const Reducer *r);
// Sets the error text (printf format) and emits it as an ERROR event; returns -1.
int reducer_fail(Reducer *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Emits the events of a blocking collective the DDP layer or the trainer issues itself
// (buffer broadcasts, the stop flag): done false gives COLLECTIVE then COLLECTIVE_WAIT (call
// it just before the collective), done true gives COLLECTIVE_DONE.
void reducer_note_collective(Reducer *r, const char *op, const char *what, int64_t numel,
                             uint64_t seq, bool done, bool ok);

#endif
