/* test_tape.c -- the backward engine on its own: which leaves fire, how often, in which order,
 * and find_unused_parameters' reachability, with two tiny ops defined here (elementwise mul
 * and add) so that the engine is tested apart from the real op library. Expected orders are
 * PyTorch's (torch 1.13 and 2.x engine: max-heap on sequence_nr, AccumulateGrad first);
 * tests/test_hooks_torch.c checks the same against orders recorded from PyTorch itself. */
#include <math.h>
#include <string.h>

#include "tests/expect.h"
#include "trainer/tape.h"

#include "kernels/base.h"

// ---- two local ops ----
static void mul_backward(Tape *t, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    if (a->requires_grad) {
        float *ga = tape_grad(t, a);
        for (int64_t i = 0; i < y->n; i++) ga[i] += y->grad[i] * b->data[i];
    }
    if (b->requires_grad) {
        float *gb = tape_grad(t, b);
        for (int64_t i = 0; i < y->n; i++) gb[i] += y->grad[i] * a->data[i];
    }
}
static const OpInfo mul_info = {.name = "mul", .backward = mul_backward};

static Tensor *mul(Tape *t, Tensor *a, Tensor *b) {
    Tensor *y = tensor_like(t->arena, a);
    for (int64_t i = 0; i < y->n; i++) y->data[i] = a->data[i] * b->data[i];
    tape_record(t, &mul_info, (Tensor *[]){a, b}, 2, &y, 1);
    return y;
}

static void add_backward(Tape *t, Node *n) {
    for (int k = 0; k < 2; k++) {
        if (!n->in[k]->requires_grad) continue;
        float *g = tape_grad(t, n->in[k]);
        for (int64_t i = 0; i < n->out[0]->n; i++) g[i] += n->out[0]->grad[i];
    }
}
static const OpInfo add_info = {.name = "add", .backward = add_backward};

static Tensor *add(Tape *t, Tensor *a, Tensor *b) {
    Tensor *y = tensor_like(t->arena, a);
    for (int64_t i = 0; i < y->n; i++) y->data[i] = a->data[i] + b->data[i];
    tape_record(t, &add_info, (Tensor *[]){a, b}, 2, &y, 1);
    return y;
}

// Sum of all elements into a scalar, recorded (the loss).
static void sum_backward(Tape *t, Node *n) {
    float *g = tape_grad(t, n->in[0]);
    for (int64_t i = 0; i < n->in[0]->n; i++) g[i] += n->out[0]->grad[0];
}
static const OpInfo sum_info = {.name = "sum", .backward = sum_backward};

static Tensor *sum(Tape *t, Tensor *x) {
    Tensor *y = tensor_scalar(t->arena, 0);
    for (int64_t i = 0; i < x->n; i++) y->data[0] += x->data[i];
    tape_record(t, &sum_info, &x, 1, &y, 1);
    return y;
}

// ---- hook recorder ----
typedef struct Rec {
    int order[64];
    int n;
} Rec;

static int on_ready(void *user, Tensor *leaf) {
    Rec *r = user;
    CHECK(r->n < 64, "too many hooks");
    // The hook runs after accumulation: the gradient must already be defined.
    EXPECT(leaf->grad_defined, "hook of leaf %d before its grad was defined", leaf->param_index);
    r->order[r->n++] = leaf->param_index;
    return 0;
}

typedef struct Fixture {
    Arena params, step;
    Tape tape;
    Tensor *p[8];
    Rec rec;
} Fixture;

static void setup(Fixture *f) {
    memset(f, 0, sizeof *f);
    arena_init(&f->params, DEV_CPU, 1 << 16);
    arena_init(&f->step, DEV_CPU, 1 << 16);
    tape_init(&f->tape, &f->step, 1);
    f->tape.on_grad_ready = on_ready;
    f->tape.hook_user = &f->rec;
    for (int i = 0; i < 8; i++) {
        f->p[i] = tensor_leaf(&f->params, 1, (int64_t[]){3});
        f->p[i]->param_index = i;
        for (int j = 0; j < 3; j++) f->p[i]->data[j] = 1.0f + 0.5f * (float)i + 0.25f * (float)j;
    }
}

static void teardown(Fixture *f) {
    tape_free(&f->tape);
    arena_free(&f->step);
    arena_free(&f->params);
}

static void expect_order(const Rec *r, const int *want, int n, const char *what) {
    EXPECT(r->n == n, "%s: %d hooks fired, want %d", what, r->n, n);
    for (int i = 0; i < MIN(n, r->n); i++)
        EXPECT(r->order[i] == want[i], "%s: hook %d is param %d, want %d", what, i, r->order[i],
               want[i]);
}

static Tensor *input(Fixture *f, float v) {
    Tensor *x = tensor_new(f->tape.arena, 1, (int64_t[]){3});
    for (int j = 0; j < 3; j++) x->data[j] = v + (float)j;
    return x;
}

// A chain x*p0*p1*p2: the last-used parameter (p2) fires first.
static void test_chain(void) {
    Fixture f;
    setup(&f);
    Tensor *y = mul(&f.tape, mul(&f.tape, mul(&f.tape, input(&f, 1), f.p[0]), f.p[1]), f.p[2]);
    EXPECT(tape_backward(&f.tape, sum(&f.tape, y), NULL) == 0, "backward failed");
    expect_order(&f.rec, (int[]){2, 1, 0}, 3, "chain");
    // d/dp0 of sum(x*p0*p1*p2) = x*p1*p2
    EXPECT_NEAR(f.p[0]->grad[1], 2.0f * f.p[1]->data[1] * f.p[2]->data[1], 1e-6, 1e-6);
    teardown(&f);
}

// Fan-out and shared weights: p0 is used at the start and again at the end; its hook must wait
// for its earliest use (the lowest sequence number), so it fires last, once.
static void test_shared_weight(void) {
    Fixture f;
    setup(&f);
    Tensor *a = mul(&f.tape, input(&f, 1), f.p[0]); // seq 1 uses p0
    Tensor *b = mul(&f.tape, a, f.p[1]);            // seq 2
    Tensor *c = mul(&f.tape, b, f.p[0]);            // seq 3 uses p0 again
    EXPECT(tape_backward(&f.tape, sum(&f.tape, c), NULL) == 0, "backward failed");
    expect_order(&f.rec, (int[]){1, 0}, 2, "shared");
    // y = x p0^2 p1 -> dy/dp0 = 2 x p0 p1
    EXPECT_NEAR(f.p[0]->grad[2], 2 * 3.0f * f.p[0]->data[2] * f.p[1]->data[2], 1e-5, 1e-6);
    teardown(&f);
}

// Two branches from one input (fan-out), joined by add: branch parameters fire in decreasing
// sequence order, i.e. the branch built last first.
static void test_fan_out(void) {
    Fixture f;
    setup(&f);
    Tensor *x = mul(&f.tape, input(&f, 1), f.p[0]);
    Tensor *left = mul(&f.tape, x, f.p[1]);
    Tensor *right = mul(&f.tape, x, f.p[2]);
    Tensor *y = add(&f.tape, left, right);
    EXPECT(tape_backward(&f.tape, sum(&f.tape, y), NULL) == 0, "backward failed");
    expect_order(&f.rec, (int[]){2, 1, 0}, 3, "fan-out");
    teardown(&f);
}

// One node freeing two leaves at once: they fire in edge order (heap ties pop in push order).
static void test_two_leaves_one_node(void) {
    Fixture f;
    setup(&f);
    Tensor *y = mul(&f.tape, f.p[3], f.p[5]);
    EXPECT(tape_backward(&f.tape, sum(&f.tape, y), NULL) == 0, "backward failed");
    expect_order(&f.rec, (int[]){3, 5}, 2, "tie");
    teardown(&f);
}

// A detached branch and a branch replaced by a constant: parameters used in forward whose
// outputs never reach the loss get no hook and keep grad undefined; find_unreachable names them.
static void test_detached_and_constant(void) {
    Fixture f;
    setup(&f);
    Tensor *x = input(&f, 1);
    Tensor *used = mul(&f.tape, x, f.p[0]);
    Tensor *head = mul(&f.tape, used, f.p[1]); // a "box head" whose loss becomes a constant
    (void)head;
    Tensor *detached = mul(&f.tape, x, f.p[2]);
    Tensor *d = tensor_view(f.tape.arena, detached->data, 1, detached->shape); // detach()
    Tensor *loss_main = sum(&f.tape, mul(&f.tape, used, d));
    Tensor *constant = tensor_scalar(f.tape.arena, 0.0f); // torch.tensor(0.) box loss
    Tensor *loss = add(&f.tape, loss_main, constant);

    bool unused[3];
    tape_find_unreachable(&f.tape, &loss, 1, f.p, 3, unused);
    EXPECT(!unused[0] && unused[1] && unused[2], "unreachable: %d %d %d, want 0 1 1", unused[0],
           unused[1], unused[2]);

    EXPECT(tape_backward(&f.tape, loss, NULL) == 0, "backward failed");
    expect_order(&f.rec, (int[]){0}, 1, "detached");
    EXPECT(!f.p[1]->grad_defined && !f.p[2]->grad_defined, "unreached params got a gradient");
    teardown(&f);
}

// Every hook fires exactly once per backward, across several backwards on fresh tapes.
static void test_once_per_backward(void) {
    Fixture f;
    setup(&f);
    for (int it = 0; it < 3; it++) {
        f.rec.n = 0;
        Tensor *y = mul(&f.tape, mul(&f.tape, input(&f, 1), f.p[0]), f.p[0]);
        y = add(&f.tape, y, mul(&f.tape, y, f.p[4]));
        EXPECT(tape_backward(&f.tape, sum(&f.tape, y), NULL) == 0, "backward failed");
        expect_order(&f.rec, (int[]){4, 0}, 2, "repeat");
        tape_reset(&f.tape);
    }
    teardown(&f);
}

// A loss that does not require grad at all is refused, as PyTorch does.
static void test_constant_loss(void) {
    Fixture f;
    setup(&f);
    Tensor *c = tensor_scalar(f.tape.arena, 1.0f);
    EXPECT(tape_backward(&f.tape, c, NULL) == -1, "constant loss accepted");
    EXPECT(f.rec.n == 0, "hooks fired for a constant loss");
    teardown(&f);
}

// Grad mode off records nothing.
static void test_no_grad(void) {
    Fixture f;
    setup(&f);
    f.tape.grad_enabled = false;
    Tensor *y = mul(&f.tape, input(&f, 1), f.p[0]);
    EXPECT(!y->requires_grad && y->grad_fn == NULL && f.tape.n_nodes == 0, "no_grad recorded");
    teardown(&f);
}

// The heap reproduces libstdc++'s tie order, which is not FIFO from four equal keys on: one
// node freeing leaves a, b, c, d pops a, c, b, d -- what std::priority_queue does, and so
// PyTorch (torch.cat of four leaves; see test_hooks_torch).
static void four_backward(Tape *t, Node *n) {
    for (int k = 0; k < 4; k++) tape_grad(t, n->in[k])[0] += n->out[0]->grad[0];
}
static const OpInfo four_info = {.name = "four", .backward = four_backward};

static void test_four_way_tie(void) {
    Fixture f;
    setup(&f);
    Tensor *y = tensor_scalar(f.tape.arena, 0);
    tape_record(&f.tape, &four_info, (Tensor *[]){f.p[0], f.p[1], f.p[2], f.p[3]}, 4, &y, 1);
    EXPECT(tape_backward(&f.tape, y, NULL) == 0, "backward failed");
    expect_order(&f.rec, (int[]){0, 2, 1, 3}, 4, "4-tie");
    teardown(&f);
}

// The step arena: once a step outgrew the block, reset makes one block with a margin, so the
// next steps (a little larger: more boxes) allocate nothing new (issue 14's slow steps).
static void test_arena_regrows_once(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 20);
    for (int k = 0; k < 5; k++) arena_alloc_data(&a, 900 << 10); // 4.5 MiB over 1 MiB chunks
    EXPECT(a.data.reserved >= 5 << 20, "the first step should span several chunks");
    arena_reset(&a);
    size_t block = a.data.reserved;
    EXPECT(block >= a.data.peak + a.data.peak / 8, "block %zu for peak %zu: no margin", block, a.data.peak);
    for (int step = 1; step <= 4; step++) { // each step 2 % larger than the one before
        size_t total = (size_t)(4.5 * (1 << 20) * (1.0 + 0.02 * step));
        for (size_t got = 0; got < total; got += 64 << 10) arena_alloc_data(&a, 64 << 10);
        EXPECT(a.data.reserved == block, "step %d outgrew the block", step);
        arena_reset(&a);
        EXPECT(a.data.reserved == block, "step %d reallocated: %zu -> %zu bytes", step, block,
               a.data.reserved);
    }
    arena_free(&a);
}

// Given-back blocks: small ones (under 64 KiB) by their own size only; large ones are carved
// (the smallest that holds the request, from its start) and merged with free neighbours; what
// comes back from them does not count as new use; a reset forgets them all.
static void test_arena_gives_back(void) {
    Arena a;
    arena_init(&a, DEV_CPU, 1 << 22);
    char *big = arena_alloc_data(&a, 300 << 10);
    arena_alloc_data(&a, 64); // keeps big and mid apart
    char *mid = arena_alloc_data(&a, 200 << 10), *next = arena_alloc_data(&a, 100 << 10);
    void *small = arena_alloc_data(&a, 1000);
    arena_give_data(&a, big, 300 << 10);
    arena_give_data(&a, mid, 200 << 10);
    arena_give_data(&a, small, 1000);
    EXPECT(arena_alloc_data(&a, 500) != small, "a 500-byte request took a 1000-byte block");
    EXPECT(arena_alloc_data(&a, 1000) == small, "the same small size did not come back");
    size_t used = a.data.used;
    EXPECT(arena_alloc_data(&a, 136 << 10) == mid, "136 KiB should take the 200 KiB block");
    EXPECT(arena_alloc_data(&a, 64 << 10) == mid + (136 << 10), "the rest of mid was not carved");
    EXPECT(arena_alloc_data(&a, 250 << 10) == big, "250 KiB should take the 300 KiB block");
    EXPECT(a.data.used == used, "given-back blocks counted as new use: %zu -> %zu", used,
           a.data.used);
    arena_give_data(&a, mid, 136 << 10);
    arena_give_data(&a, next, 100 << 10);
    arena_give_data(&a, mid + (136 << 10), 64 << 10); // joins both neighbours
    EXPECT(arena_alloc_data(&a, 300 << 10) == mid, "mid and next did not merge into 300 KiB");
    arena_give_data(&a, mid, 300 << 10);
    arena_reset(&a);
    EXPECT(arena_alloc_data(&a, 64) == big, "the block did not restart after the reset");
    EXPECT(arena_alloc_data(&a, 300 << 10) != mid, "a reset kept a given-back block");
    arena_free(&a);
}

// ---- dropped activations: three more local ops ----
// twice: y = 2x, recomputable; counts its recomputations.
static int n_twice_recomputed;
static void twice_backward(Tape *t, Node *n) {
    float *g = tape_grad(t, n->in[0]);
    for (int64_t i = 0; i < n->out[0]->n; i++) g[i] += 2.0f * n->out[0]->grad[i];
}
static void twice_recompute(Tape *t, Node *n) {
    (void)t;
    n_twice_recomputed++;
    for (int64_t i = 0; i < n->out[0]->n; i++) n->out[0]->data[i] = 2.0f * n->in[0]->data[i];
}
static const OpInfo twice_info = {
    .name = "twice", .backward = twice_backward, .recompute = twice_recompute};
static Tensor *twice(Tape *t, Tensor *x) {
    Tensor *y = tensor_like(t->arena, x);
    for (int64_t i = 0; i < y->n; i++) y->data[i] = 2.0f * x->data[i];
    tape_record(t, &twice_info, &x, 1, &y, 1);
    return y;
}
// square_: x = x * x in place (a view of x comes back), recomputable in place; its backward
// reads the input's data, which then holds x^2: dx = dy * 2 sqrt(x^2) for x >= 0.
static void square_backward(Tape *t, Node *n) {
    float *g = tape_grad(t, n->in[0]);
    for (int64_t i = 0; i < n->out[0]->n; i++)
        g[i] += 2.0f * sqrtf(n->in[0]->data[i]) * n->out[0]->grad[i];
}
static void square_recompute(Tape *t, Node *n) {
    (void)t;
    for (int64_t i = 0; i < n->in[0]->n; i++) n->in[0]->data[i] *= n->in[0]->data[i];
}
static const OpInfo square_info = {.name = "square_",
                                   .backward = square_backward,
                                   .recompute = square_recompute,
                                   .in_place = true};
static Tensor *square_(Tape *t, Tensor *x) {
    for (int64_t i = 0; i < x->n; i++) x->data[i] *= x->data[i];
    Tensor *y = tensor_view(t->arena, x->data, x->ndim, x->shape);
    tape_record(t, &square_info, &x, 1, &y, 1);
    return y;
}
// view: y shares x's data (a reshape).
static void view_backward(Tape *t, Node *n) {
    float *g = tape_grad(t, n->in[0]);
    for (int64_t i = 0; i < n->out[0]->n; i++) g[i] += n->out[0]->grad[i];
}
static const OpInfo view_info = {.name = "view", .backward = view_backward};
static Tensor *view(Tape *t, Tensor *x) {
    Tensor *y = tensor_view(t->arena, x->data, x->ndim, x->shape);
    tape_record(t, &view_info, &x, 1, &y, 1);
    return y;
}

// loss = sum(square_(twice(x p0)) p1) + sum(twice(x p2) p3), dropping what `drop` allows once
// the forward has read it; the gradients of p0..p3 and the hook order must not depend on it.
static void drop_step(bool drop, float grads[4][3], Rec *rec) {
    Fixture f;
    setup(&f);
    Tape *t = &f.tape;
    t->release_activations = true;
    Tensor *x = input(&f, 0.5f);
    Tensor *a = mul(t, x, f.p[0]);
    Tensor *b = twice(t, a);
    Tensor *b2 = square_(t, b);
    Tensor *c = twice(t, mul(t, x, f.p[2]));
    Tensor *m1 = mul(t, b2, f.p[1]), *m2 = mul(t, c, f.p[3]); // their backward reads b2 and c
    if (drop) {
        EXPECT(!tape_drop(t, a), "dropped a tensor whose op cannot recompute it");
        EXPECT(!tape_drop(t, b), "dropped the base of an in-place op's output on its own");
        Tensor *cv = view(t, c);
        EXPECT(!tape_drop(t, c), "dropped a tensor that has a view");
        (void)cv;
        t->release_activations = false;
        EXPECT(!tape_drop(t, b2), "dropped with release_activations off");
        t->release_activations = true;
        float *old = b->data;
        EXPECT(tape_drop(t, b2), "square_'s output was not dropped");
        EXPECT(b2->data == NULL && b->data == NULL, "the in-place output and its base keep data");
        EXPECT(!tape_drop(t, b2), "dropped twice");
        Tensor *fresh = tensor_like(t->arena, b); // the next forward allocation reuses it
        EXPECT(fresh->data == old, "the dropped buffer was not reused in the forward");
        for (int j = 0; j < 3; j++) fresh->data[j] = -1e9f; // whatever the forward writes there
    }
    Tensor *loss = add(t, sum(t, m1), sum(t, m2));
    n_twice_recomputed = 0;
    EXPECT(tape_backward(t, loss, NULL) == 0, "backward");
    EXPECT(n_twice_recomputed == (drop ? 1 : 0), "twice recomputed %d times", n_twice_recomputed);
    for (int i = 0; i < 4; i++) memcpy(grads[i], f.p[i]->grad, sizeof grads[i]);
    *rec = f.rec;
    teardown(&f);
}

static void test_drop_recomputes(void) {
    float kept[4][3], dropped[4][3];
    Rec rk, rd;
    drop_step(false, kept, &rk);
    drop_step(true, dropped, &rd);
    EXPECT(!memcmp(kept, dropped, sizeof kept), "gradients changed by the drop");
    expect_order(&rd, rk.order, rk.n, "hooks with a drop");
    // d/dp1 = (2 x p0)^2 = (2 * 0.5 * 1)^2 for element 0 (p0[0] = 1)
    EXPECT(fabsf(dropped[1][0] - 1.0f) < 1e-6f, "dp1[0] = %g, want 1", dropped[1][0]);
}

int main(void) {
    test_arena_regrows_once();
    test_arena_gives_back();
    test_drop_recomputes();
    test_chain();
    test_shared_weight();
    test_fan_out();
    test_two_leaves_one_node();
    test_detached_and_constant();
    test_once_per_backward();
    test_constant_loss();
    test_no_grad();
    test_four_way_tie();
    return expect_report();
}
