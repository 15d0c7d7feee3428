/* gradcheck.c -- see gradcheck.h. */
#include "tests/gradcheck.h"

#include <math.h>

#include "kernels/base.h"

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double unit(uint64_t *s) { return (double)(xorshift(s) >> 11) / 9007199254740992.0; }

void gc_fill_uniform(Tensor *x, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < x->n; i++) x->data[i] = lo + (float)unit(&s) * (hi - lo);
}

Tape *gc_tape_init(GcTape *f, int n_threads) {
    arena_init(&f->arena, DEV_CPU, 1 << 20);
    tape_init(&f->tape, &f->arena, n_threads);
    return &f->tape;
}

void gc_tape_free(GcTape *f) {
    tape_free(&f->tape);
    arena_free(&f->arena);
}

static double weighted_loss(GcForward f, void *user, Tensor *const *inputs, const float *w,
                            bool training) {
    Arena arena;
    arena_init(&arena, DEV_CPU, 1 << 20);
    Tape tape;
    tape_init(&tape, &arena, 1);
    tape.grad_enabled = false;
    tape.training = training;
    Tensor *y = f(&tape, inputs, user);
    double loss = 0;
    for (int64_t i = 0; i < y->n; i++) loss += (double)w[i] * (double)y->data[i];
    tape_free(&tape);
    arena_free(&arena);
    return loss;
}

int gradcheck(const char *name, GcForward f, void *user, Tensor *const *inputs, int n_in,
              GcOptions opt) {
    if (opt.h == 0) opt.h = 1e-2;
    if (opt.tol == 0) opt.tol = 1e-2;
    if (opt.floor == 0) opt.floor = 1e-3;
    if (opt.max_coords == 0) opt.max_coords = 1000;

    // Analytic gradients.
    Arena arena;
    arena_init(&arena, DEV_CPU, 1 << 20);
    Tape tape;
    tape_init(&tape, &arena, 1);
    tape.training = opt.training;
    for (int i = 0; i < n_in; i++) inputs[i]->grad_defined = false;
    Tensor *y = f(&tape, inputs, user);
    float *w = xmalloc(sizeof(float) * (size_t)MAX(y->n, 1));
    uint64_t s = 12345;
    for (int64_t i = 0; i < y->n; i++) w[i] = (float)(unit(&s) * 2.0 - 1.0);
    CHECK(tape_backward(&tape, y, w) == 0, "%s: output does not require grad", name);
    tape_free(&tape);
    arena_free(&arena);

    int failures = 0;
    for (int i = 0; i < n_in; i++) {
        Tensor *x = inputs[i];
        if (!x->requires_grad) continue;
        int64_t step = x->n > opt.max_coords ? CEIL_DIV(x->n, opt.max_coords) : 1;
        double worst = 0;
        int64_t worst_j = -1;
        double worst_a = 0, worst_n = 0;
        for (int64_t j = 0; j < x->n; j += step) {
            float saved = x->data[j];
            x->data[j] = saved + (float)opt.h;
            double lp = weighted_loss(f, user, inputs, w, opt.training);
            x->data[j] = saved - (float)opt.h;
            double lm = weighted_loss(f, user, inputs, w, opt.training);
            x->data[j] = saved;
            // Divide by the step actually taken in fp32, not the nominal one.
            double hh = ((double)(saved + (float)opt.h) - (double)(saved - (float)opt.h));
            double num = (lp - lm) / hh;
            double ana = x->grad_defined ? (double)x->grad[j] : 0.0;
            double rel = fabs(ana - num) / MAX(opt.floor, fabs(ana) + fabs(num));
            if (rel > opt.tol) failures++;
            if (rel > worst) {
                worst = rel;
                worst_j = j;
                worst_a = ana;
                worst_n = num;
            }
        }
        if (worst > opt.tol)
            fprintf(stderr, "gradcheck %s: input %d, worst at %lld: analytic %.6g numeric %.6g (rel %.3g > %.3g)\n",
                    name, i, (long long)worst_j, worst_a, worst_n, worst, opt.tol);
    }
    free(w);
    return failures;
}
