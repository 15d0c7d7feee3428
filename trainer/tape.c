/* tape.c -- node recording and the backward engine (see tape.h for the contract).
 *
 * The engine mirrors torch/csrc/autograd/engine.cpp on one CPU thread:
 *   compute_dependencies  -> count_dependencies(): edges from every node reachable from root
 *   ReadyQueue            -> a binary max-heap keyed by sequence number, with libstdc++'s exact
 *                            push_heap/pop_heap so that ties pop in the same order as in PyTorch
 *   evaluate_function     -> run backward, then for each edge in order decrement the target's
 *                            dependencies and push it when they reach zero
 *   AccumulateGrad        -> a leaf task with key UINT64_MAX; popping it fires the ready hook.
 * Consumers are always created after their producers, so this processes reachable nodes in
 * decreasing sequence order, and a leaf fires right after the lowest-sequence node using it. */
#include "trainer/tape.h"

#include "kernels/base.h"

void tape_init(Tape *t, Arena *arena, int n_threads) {
    memset(t, 0, sizeof *t);
    t->arena = arena;
    t->kc.n_threads = n_threads > 0 ? n_threads : 1;
    t->grad_enabled = true;
    t->training = true;
    t->next_seq = 1;
}

void tape_free(Tape *t) {
    free(t->nodes);
    t->nodes = NULL;
    t->n_nodes = t->cap_nodes = 0;
}

void tape_reset(Tape *t) {
    t->n_nodes = 0;
    t->n_callbacks = 0;
    arena_reset(t->arena);
}

bool tape_needs_grad(const Tape *t, Tensor *const *in, int n_in) {
    if (!t->grad_enabled) return false;
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->requires_grad) return true;
    return false;
}

void *tape_alloc(Tape *t, size_t nbytes) { return arena_alloc_host(t->arena, nbytes); }

void *tape_alloc_data(Tape *t, size_t nbytes) { return arena_alloc_data(t->arena, nbytes); }

Node *tape_record(Tape *t, const OpInfo *info, Tensor *const *in, int n_in, Tensor *const *out,
                  int n_out) {
    if (!tape_needs_grad(t, in, n_in)) return NULL;
    CHECK(info && info->backward, "op without backward recorded");
    Node *n = arena_alloc_host(t->arena, sizeof *n);
    memset(n, 0, sizeof *n);
    n->info = info;
    n->seq = t->next_seq++;
    n->n_in = n_in;
    n->n_out = n_out;
    n->in = arena_alloc_host(t->arena, sizeof(Tensor *) * (size_t)MAX(n_in, 1));
    n->out = arena_alloc_host(t->arena, sizeof(Tensor *) * (size_t)MAX(n_out, 1));
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    // A view (an output without data of its own) aliases the node's inputs: none of them may
    // be dropped on its own any more (tape_drop).
    for (int k = 0; k < n_out; k++)
        if (!out[k]->owns_data)
            for (int i = 0; i < n_in; i++)
                if (in[i]) in[i]->n_aliases++;
    for (int k = 0; k < n_out; k++) {
        CHECK(out[k]->grad_fn == NULL && !out[k]->requires_grad, "%s: output %d already in a graph",
              info->name, k);
        n->out[k] = out[k];
        out[k]->requires_grad = true;
        out[k]->grad_fn = n;
        out[k]->out_index = k;
    }
    if (t->n_nodes == t->cap_nodes) {
        t->cap_nodes = t->cap_nodes ? 2 * t->cap_nodes : 1024;
        t->nodes = xrealloc(t->nodes, sizeof(Node *) * (size_t)t->cap_nodes);
    }
    t->nodes[t->n_nodes++] = n;
    return n;
}

float *tape_take(Tape *t, int64_t n) {
    return arena_alloc_data(t->arena, (size_t)MAX(n, 1) * sizeof(float));
}

void tape_give(Tape *t, float *buf, int64_t n) {
    arena_give_data(t->arena, buf, (size_t)MAX(n, 1) * sizeof(float));
}

// ---- dropping activations in the forward, recomputing them in backward ----
bool tape_drop(Tape *t, Tensor *x) {
    if (!t->release_activations || !x->data || x->n_aliases || !x->grad_fn ||
        !x->grad_fn->info->recompute)
        return false;
    Node *p = x->grad_fn;
    if (p->info->in_place) { // x aliases its input: the base goes, x with it
        Tensor *base = p->in[0];
        if (base->n_aliases != 1 || !base->owns_data || !base->grad_fn ||
            !base->grad_fn->info->recompute)
            return false;
        tape_give(t, base->data, base->n);
        base->data = NULL;
        base->dropped = true;
    } else {
        if (!x->owns_data) return false;
        tape_give(t, x->data, x->n);
    }
    x->data = NULL;
    x->dropped = true;
    return true;
}

void tape_drop_since(Tape *t, int64_t first_node, const Tensor *keep) {
    for (int64_t i = first_node; i < t->n_nodes; i++)
        for (int k = 0; k < t->nodes[i]->n_out; k++)
            if (t->nodes[i]->out[k] != keep) tape_drop(t, t->nodes[i]->out[k]);
}

// Gives x its data back if it was dropped: first its producer's inputs, then x by the
// producer's recompute (in place over the base's data, or into a buffer of its own).
static void ensure_data(Tape *t, Tensor *x) {
    if (!x || !x->dropped) return;
    Node *p = x->grad_fn;
    for (int i = 0; i < p->n_in; i++) ensure_data(t, p->in[i]);
    x->data = p->info->in_place ? p->in[0]->data : tape_take(t, x->n);
    x->dropped = false;
    p->info->recompute(t, p);
}

float *tape_grad(Tape *t, Tensor *x) {
    bool fresh;
    float *g = tape_grad_fresh(t, x, &fresh);
    if (fresh) backend_need(x->dev)->fill(&t->kc, g, 0.0f, x->n);
    return g;
}

float *tape_grad_fresh(Tape *t, Tensor *x, bool *fresh) {
    CHECK(x->requires_grad, "tape_grad on a tensor that does not require grad");
    *fresh = !x->grad || (x->grad_fn == NULL && !x->grad_defined);
    if (!*fresh) return x->grad;
    if (!x->grad) x->grad = tape_take(t, x->n);
    x->grad_defined = true;
    return x->grad;
}

bool tape_grad_take(Tape *t, Tensor *x, Tensor *y) {
    if (x->grad || !x->grad_fn || !x->requires_grad || x->n != y->n || x->dev != y->dev ||
        !y->grad || y == t->root || t->keep_grads)
        return false;
    x->grad = y->grad, x->grad_defined = true;
    y->grad = NULL, y->grad_defined = false;
    return true;
}

void tape_grad_add(Tape *t, Tensor *x, const float *g, float alpha) {
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, copy);
    KERNEL_CHECK(be, scale_fwd);
    KERNEL_CHECK(be, axpy);
    bool fresh;
    float *dx = tape_grad_fresh(t, x, &fresh);
    if (!fresh) be->axpy(&t->kc, dx, alpha, g, x->n);
    else if (alpha == 1.0f) be->copy(&t->kc, dx, g, x->n);
    else be->scale_fwd(&t->kc, dx, g, alpha, x->n);
}

float *tape_grad_to_write(Tape *t, Tensor *x) {
    bool fresh;
    float *g = tape_grad_fresh(t, x, &fresh);
    return fresh ? g : tape_take(t, x->n);
}

void tape_grad_written(Tape *t, Tensor *x, float *written) {
    if (written == x->grad) return;
    const Backend *be = backend_need(x->dev);
    KERNEL_CHECK(be, axpy);
    be->axpy(&t->kc, x->grad, 1.0f, written, x->n);
    tape_give(t, written, x->n);
}

// ---- the ready queue: std::priority_queue<NodeTask, vector, CompareNodeTaskTime> ----
typedef struct Task {
    uint64_t key;  // sequence number; UINT64_MAX for AccumulateGrad
    Node *node;    // exactly one of node / leaf is set
    Tensor *leaf;
} Task;

typedef struct Heap {
    Task *v;
    int64_t n, cap;
} Heap;

static bool task_less(const Task *a, const Task *b) { return a->key < b->key; }

// libstdc++ std::__push_heap
static void sift_up(Task *v, int64_t hole, int64_t top, Task value) {
    int64_t parent = (hole - 1) / 2;
    while (hole > top && task_less(&v[parent], &value)) {
        v[hole] = v[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    v[hole] = value;
}

static void heap_push(Heap *h, Task task) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 256;
        h->v = xrealloc(h->v, sizeof(Task) * (size_t)h->cap);
    }
    h->v[h->n++] = task;
    sift_up(h->v, h->n - 1, 0, task);
}

// libstdc++ std::__adjust_heap
static void adjust_heap(Task *v, int64_t hole, int64_t len, Task value) {
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (task_less(&v[child], &v[child - 1])) child--;
        v[hole] = v[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        hole = child - 1;
    }
    sift_up(v, hole, top, value);
}

// top() then pop(): std::pop_heap moves the front to the back, then the vector shrinks.
static Task heap_pop(Heap *h) {
    Task top = h->v[0];
    if (h->n > 1) {
        Task value = h->v[h->n - 1];
        h->v[h->n - 1] = h->v[0];
        adjust_heap(h->v, 0, h->n - 1, value);
    }
    h->n--;
    return top;
}

// ---- graph walks ----
// Marks are compared with an epoch that is unique across every tape of the process, because
// leaves (parameters) outlive tapes: a fresh tape must never see a stale mark as current.
static uint64_t last_epoch;

static void next_epoch(Tape *t) { t->epoch = ++last_epoch; }

// The edge from a node's input x: its producer node, its AccumulateGrad (a leaf that requires
// grad), or nothing.
static bool edge_of(Tensor *x, Node **node, Tensor **leaf) {
    *node = NULL;
    *leaf = NULL;
    if (!x || !x->requires_grad) return false;
    if (x->grad_fn) *node = x->grad_fn;
    else *leaf = x;
    return true;
}

// Marks every node and leaf reachable from `start` with t->epoch. When count is set, also
// counts incoming edges into ->deps (compute_dependencies).
static void walk(Tape *t, Node **stack, Node *start, bool count) {
    int64_t top = 0;
    if (start->mark != t->epoch) {
        start->mark = t->epoch;
        start->deps = 0;
        stack[top++] = start;
    }
    while (top > 0) {
        Node *n = stack[--top];
        for (int i = 0; i < n->n_in; i++) {
            Node *next;
            Tensor *leaf;
            if (!edge_of(n->in[i], &next, &leaf)) continue;
            if (leaf) {
                if (leaf->mark != t->epoch) {
                    leaf->mark = t->epoch;
                    leaf->deps = 0;
                }
                if (count) leaf->deps++;
                continue;
            }
            if (next->mark != t->epoch) {
                next->mark = t->epoch;
                next->deps = 0;
                CHECK(top < t->n_nodes, "graph walk overflow: a node outside this tape?");
                stack[top++] = next;
            }
            if (count) next->deps++;
        }
    }
}

int tape_backward(Tape *t, Tensor *root, const float *root_grad) {
    if (!root->requires_grad) {
        LOG_ERROR("element 0 of tensors does not require grad and does not have a grad_fn");
        return -1;
    }
    t->root = root;
    CHECK(root_grad || root->n == 1,
          "grad can be implicitly created only for scalar outputs (root has %lld elements)",
          (long long)root->n);
    const Backend *be = backend_need(root->dev);
    next_epoch(t);

    // Seed the root's gradient.
    // root_grad is a host array: staged to the root's device before the kernel reads it.
    float *g = tape_grad(t, root);
    float *seed = tape_alloc_data(t, sizeof(float) * (size_t)MAX(root->n, 1));
    float one = 1.0f;
    be->to_device(seed, root_grad ? root_grad : &one, sizeof(float) * (size_t)root->n);
    be->axpy(&t->kc, g, 1.0f, seed, root->n);

    Heap heap = {0};
    if (!root->grad_fn) { // the root is itself a leaf: only its AccumulateGrad runs
        root->mark = t->epoch;
        heap_push(&heap, (Task){.key = UINT64_MAX, .leaf = root});
    } else {
        Node **stack = xmalloc(sizeof(Node *) * (size_t)MAX(t->n_nodes, 1));
        walk(t, stack, root->grad_fn, true);
        free(stack);
        heap_push(&heap, (Task){.key = root->grad_fn->seq, .node = root->grad_fn});
    }

    while (heap.n > 0) {
        Task task = heap_pop(&heap);
        if (task.leaf) {
            if (t->on_grad_ready && t->on_grad_ready(t->hook_user, task.leaf)) {
                free(heap.v);
                t->n_callbacks = 0;
                return -1;
            }
            continue;
        }
        Node *n = task.node;
        for (int i = 0; i < n->n_in; i++) ensure_data(t, n->in[i]);
        for (int k = 0; k < n->n_out; k++) ensure_data(t, n->out[k]);
        for (int k = 0; k < n->n_out; k++) tape_grad(t, n->out[k]);
        n->info->backward(t, n);
        for (int k = 0; k < n->n_out; k++) {
            Tensor *y = n->out[k];
            if (y == root) continue; // the caller may read root and d(root)
            if (!t->keep_grads) {
                if (y->grad) tape_give(t, y->grad, y->n); // NULL: taken (tape_grad_take)
                y->grad = NULL;
                y->grad_defined = false;
            }
            if (t->release_activations && y->owns_data) {
                tape_give(t, y->data, y->n);
                y->data = NULL;
                y->owns_data = false;
            }
        }
        for (int i = 0; i < n->n_in; i++) {
            Node *next;
            Tensor *leaf;
            if (!edge_of(n->in[i], &next, &leaf)) continue;
            if (leaf) {
                CHECK(leaf->grad_defined, "%s: backward wrote no gradient for input %d",
                      n->info->name, i);
                if (--leaf->deps == 0) heap_push(&heap, (Task){.key = UINT64_MAX, .leaf = leaf});
            } else if (--next->deps == 0) {
                heap_push(&heap, (Task){.key = next->seq, .node = next});
            }
        }
    }
    free(heap.v);
    // End-of-backward callbacks; one may queue another (PyTorch runs those too).
    int rc = 0;
    for (int k = 0; k < t->n_callbacks && rc == 0; k++)
        rc = t->callbacks[k](t->callback_user[k]);
    t->n_callbacks = 0;
    return rc ? -1 : 0;
}

void tape_queue_callback(Tape *t, BackwardCallbackFn fn, void *user) {
    CHECK(t->n_callbacks < TAPE_MAX_CALLBACKS, "tape_queue_callback: more than %d callbacks",
          TAPE_MAX_CALLBACKS);
    t->callbacks[t->n_callbacks] = fn;
    t->callback_user[t->n_callbacks++] = user;
}

void tape_find_unreachable(Tape *t, Tensor *const *roots, int n_roots, Tensor *const *leaves,
                           int n_leaves, bool *unused) {
    next_epoch(t);
    Node **stack = xmalloc(sizeof(Node *) * (size_t)MAX(t->n_nodes, 1));
    for (int r = 0; r < n_roots; r++) {
        Tensor *root = roots[r];
        if (!root || !root->requires_grad) continue;
        if (root->grad_fn) walk(t, stack, root->grad_fn, false);
        else root->mark = t->epoch;
    }
    free(stack);
    for (int i = 0; i < n_leaves; i++) unused[i] = leaves[i]->mark != t->epoch;
}
