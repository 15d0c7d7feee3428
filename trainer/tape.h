/* tape.h -- the eager autograd tape and its backward engine.
 *
 * Forward: every op runs immediately and, when some input requires grad (and grad mode is on),
 * records one Node: its inputs (the graph's edges, in the order PyTorch's ATen function lists
 * them), its outputs, an op-specific saved context, and a sequence number (creation order,
 * PyTorch's sequence_nr).
 *
 * Backward (tape_backward) reproduces PyTorch's CPU engine exactly (torch/csrc/autograd/engine.cpp):
 * - only nodes reachable from the root run; dependencies are counted per edge;
 * - ready nodes wait in a max-heap on sequence number (libstdc++ push_heap/pop_heap, the same
 *   std::priority_queue PyTorch uses), AccumulateGrad (a leaf that requires grad) having the
 *   largest key, so a leaf's gradient is complete, and its ready hook fires, right after the
 *   last node that uses it has run;
 * - a leaf the root does not depend on never fires, even if it was used in forward.
 * A leaf's ready hook is PyTorch's AccumulateGrad post hook, what DDP's reducer listens to. */
#ifndef TRAINER_TAPE_H
#define TRAINER_TAPE_H

#include "trainer/tensor.h"

typedef struct Tape Tape;

typedef struct OpInfo {
    const char *name;
    // Reads n->out[k]->grad (always allocated by the engine before the call) and ACCUMULATES
    // into tape_grad(tape, n->in[i]) for every input with requires_grad.
    void (*backward)(Tape *tape, Node *n);
    // Optional: recomputes n->out[k]'s data from n->in[] bit for bit as the forward made it,
    // for the outputs tape_drop dropped. Called with every input's data present and each
    // dropped output's buffer allocated (the engine's ensure step, tape.c); it writes every
    // output whose data is present (an op with several outputs may refill them all).
    void (*recompute)(Tape *tape, Node *n);
    // recompute works in place: out[0] is a view of in[0] that the forward overwrote (relu_).
    bool in_place;
} OpInfo;

struct Node {
    const OpInfo *info;
    uint64_t seq;      // creation order on this tape, from 1
    int n_in, n_out;
    Tensor **in;       // edges, in PyTorch's next_edges order; entries may not require grad
    Tensor **out;
    void *ctx;         // op-specific saved state, from tape_alloc
    // engine scratch
    int64_t deps;
    uint64_t mark;
};

// Called once per leaf per backward, right after its gradient is complete. Returns 0, or
// non-zero to stop the backward there (PyTorch: an exception raised in a post hook); then
// tape_backward returns -1 and no end-of-backward callback runs.
typedef int (*GradReadyFn)(void *user, Tensor *leaf);
// An end-of-backward callback (PyTorch's Engine::queue_callback): 0, or non-zero on error.
typedef int (*BackwardCallbackFn)(void *user);
#define TAPE_MAX_CALLBACKS 4

struct Tape {
    Arena *arena;          // step arena: nodes, activations, activation grads
    KernelCtx kc;          // passed to every kernel
    Node **nodes;          // in creation order
    int64_t n_nodes, cap_nodes;
    uint64_t next_seq;
    uint64_t epoch;        // bumped by every graph walk (marks)
    bool grad_enabled;     // false: ops record nothing (torch.no_grad)
    bool training;         // module mode (dropout, batchnorm statistics)
    GradReadyFn on_grad_ready;
    void *hook_user;
    // Backward releases a node's output gradients once the node has run (PyTorch frees them
    // too), and tape_grad reuses released buffers (the arena's given-back blocks, tensor.h):
    // peak memory holds the live gradients only. keep_grads = true keeps every non-leaf gradient (tests, tools).
    bool keep_grads;
    Tensor *root; // the root of the running (or last) tape_backward: its gradient is the caller's
    // release_activations (PyTorch's backward without retain_graph, which frees what each
    // node saved once it has run): once a node's backward has run, the data of its outputs
    // that own their data (tensor_new's, not views) goes to the same pool, so the gradients
    // allocated later in the backward reuse the activations' memory and the step's peak is
    // the forward's. Then host code must not read any recorded output but the root after
    // tape_backward (its `data` is NULL). The engine's order makes it safe for the graph:
    // a node runs after every node that reads its outputs (or views of them, which op_reshape
    // records as nodes; op_detach copies). Off by default; the training loop turns it on.
    bool release_activations;
    // Queued end-of-backward callbacks, run in order once the next backward has drained its
    // graph, then forgotten (also by tape_reset).
    BackwardCallbackFn callbacks[TAPE_MAX_CALLBACKS];
    void *callback_user[TAPE_MAX_CALLBACKS];
    int n_callbacks;
};

// The tape borrows `arena`; n_threads >= 1.
void tape_init(Tape *t, Arena *arena, int n_threads);
void tape_free(Tape *t);
// Forgets all nodes and resets the arena (everything recorded or allocated is gone).
void tape_reset(Tape *t);

// Whether an op over these inputs must record a node: grad mode on and any input requires grad.
bool tape_needs_grad(const Tape *t, Tensor *const *in, int n_in);
// Records a node if tape_needs_grad; marks the outputs requires_grad with grad_fn set.
// Returns NULL (and marks nothing) when no node is needed. Copies the in/out arrays.
Node *tape_record(Tape *t, const OpInfo *info, Tensor *const *in, int n_in, Tensor *const *out,
                  int n_out);
// Op-saved state on the host (contexts, index lists the host reads), freed with the step arena.
void *tape_alloc(Tape *t, size_t nbytes);
// Backend memory from the step arena (what a kernel reads or writes: saved activations,
// device copies of indices and masks); host code must not dereference it.
void *tape_alloc_data(Tape *t, size_t nbytes);
// A temporary of n floats of backend memory (uninitialised) from the step arena: a released
// buffer when one fits (arena_give_data). tape_give releases it for later tensors,
// gradients and temporaries of this step.
float *tape_take(Tape *t, int64_t n);
void tape_give(Tape *t, float *buf, int64_t n);
// Activation checkpointing without a change to the graph: with release_activations on, drops
// x's data now (it goes back to the arena for the rest of the forward), and backward
// recomputes it, by its producer's OpInfo.recompute, before the first node that reads it
// (or writes its gradient) runs. The caller promises that the forward reads x no more. Drops
// nothing, and returns false, when x has no producer with a recompute, has views (a view
// would keep the old address), or does not own its data (except the output of an in-place
// op, which drops the base it aliases with it). Recomputation is exact (the same kernels on
// the same inputs), so a dropped tensor changes no bit of any result.
bool tape_drop(Tape *t, Tensor *x);
// tape_drop on every output of the nodes recorded since t->n_nodes was first_node, but keep:
// for a module whose intermediate tensors nothing outside it reads.
void tape_drop_since(Tape *t, int64_t first_node, const Tensor *keep);
// The gradient buffer of x, allocated and zeroed on first use. For a leaf it sets
// grad_defined (zeroing a stale buffer first), like AccumulateGrad's "grad was None" path.
float *tape_grad(Tape *t, Tensor *x);
// The same buffer for a caller that can write x's first gradient instead of adding it: when x
// has no gradient yet (*fresh set), it comes without the zero fill and the caller must write
// every element (a copy, a kernel that WRITES); otherwise (*fresh cleared) it holds the
// gradient so far and the caller adds to it. As PyTorch's engine takes a first gradient as it
// is: rtdetr-l's step zero-filled 857 MB of activation gradients before they were added to.
float *tape_grad_fresh(Tape *t, Tensor *x, bool *fresh);
// x's gradient += alpha * g (x->n floats), the sum as an accumulating kernel's; a first
// gradient is written (g copied, or alpha * g), never added to zeros.
void tape_grad_add(Tape *t, Tensor *x, const float *g, float alpha);
// x's first gradient as y's own gradient buffer, handed over without a copy (as PyTorch's
// engine passes an add's or a reshape's incoming gradient on): true when x is a non-leaf with
// no gradient yet and y's count, and y's gradient would be released after this node anyway
// (y is not the root, keep_grads is off); y then has no gradient buffer. Else false, nothing
// changed. A leaf's gradient stays in its own (model) arena.
bool tape_grad_take(Tape *t, Tensor *x, Tensor *y);
// For a kernel that WRITES x's gradient contribution: the buffer to give it (x's own when
// fresh, else a step-arena temporary), then tape_grad_written adds a temporary in and gives
// it back. Bit for bit what an accumulating kernel would leave (g + 1 * c = g + c).
float *tape_grad_to_write(Tape *t, Tensor *x);
void tape_grad_written(Tape *t, Tensor *x, float *written);

// Queues fn(user) to run when the current (or next) tape_backward has run every node, as
// DDP's reducer queues finalize_backward. A callback may queue another; it runs too.
void tape_queue_callback(Tape *t, BackwardCallbackFn fn, void *user);

// Runs backward from `root`. root_grad: d(root), root->n floats; NULL means 1 and then root
// must have exactly one element (PyTorch: "grad can be implicitly created only for scalar
// outputs"). Returns 0; -1 with a message when root does not require grad; -1 when a ready
// hook or an end-of-backward callback failed (the hook's owner holds the reason).
int tape_backward(Tape *t, Tensor *root, const float *root_grad);

// find_unused_parameters' graph search: walks from every root's grad_fn along the edges and
// sets unused[i] = true for each leaves[i] that is not reached (a leaf that is itself a root
// counts as reached). Roots that do not require grad reach nothing.
void tape_find_unreachable(Tape *t, Tensor *const *roots, int n_roots, Tensor *const *leaves,
                           int n_leaves, bool *unused);

#endif
