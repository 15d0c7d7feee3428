/* test_ops_norm.c -- LayerNorm and BatchNorm2d: forward values and running-buffer updates
 * against hand-computed numbers, train mode (batch statistics, running stats updated with the
 * unbiased variance) and eval mode (running stats, untouched), gradients against finite
 * differences in both modes (train mode: the loss goes through the batch statistics), the
 * identities a train-mode input gradient satisfies, and equal results on 1 and 2 threads.
 * BatchNorm fused with ReLU or SiLU (op_batchnorm2d_act): the unfused pair's output, running
 * buffers and gradients bit for bit, in both modes, on maps longer than the kernel's tile,
 * and its own gradcheck. */
#include <math.h>

#include "tests/expect.h"
#include "tests/gradcheck.h"
#include "trainer/ops/ops.h"

#include "kernels/base.h"

static Arena leaves; // test inputs and BatchNorm buffers, alive for the whole run

static Tensor *leaf(int ndim, const int64_t *shape, uint64_t seed, float lo, float hi) {
    Tensor *x = tensor_leaf(&leaves, ndim, shape);
    gc_fill_uniform(x, seed, lo, hi);
    return x;
}

static Tensor *leaf_of(int ndim, const int64_t *shape, const float *v) {
    Tensor *x = tensor_leaf(&leaves, ndim, shape);
    memcpy(x->data, v, sizeof(float) * (size_t)x->n);
    return x;
}

static BatchNormState bn_state(int64_t C, const float *rm, const float *rv, float momentum,
                               float eps) {
    BatchNormState st = {tensor_1d(&leaves, C), tensor_1d(&leaves, C), 0, momentum, eps};
    memcpy(st.running_mean->data, rm, sizeof(float) * (size_t)C);
    memcpy(st.running_var->data, rv, sizeof(float) * (size_t)C);
    return st;
}

// ---- LayerNorm ----
static void test_layernorm_values(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    const float eps = 1e-5f;
    // Row 0: mean 2.5, biased var 1.25. Row 1 is constant: var 0, y = bias.
    Tensor *x = leaf_of(2, (int64_t[]){2, 4}, (float[]){1, 2, 3, 4, 2, 2, 2, 2});
    Tensor *w = leaf_of(1, (int64_t[]){4}, (float[]){1, 2, 0.5f, -1});
    Tensor *b = leaf_of(1, (int64_t[]){4}, (float[]){0, 1, -1, 0.5f});
    Tensor *y = op_layernorm(t, x, w, b, eps), *y0 = op_layernorm(t, x, NULL, NULL, eps);
    double rstd = 1 / sqrt(1.25 + eps);
    for (int j = 0; j < 4; j++) {
        double xhat = (x->data[j] - 2.5) * rstd;
        EXPECT_NEAR(y0->data[j], xhat, 1e-6, 1e-6);
        EXPECT_NEAR(y->data[j], xhat * w->data[j] + b->data[j], 1e-6, 1e-6);
        EXPECT_NEAR(y0->data[4 + j], 0, 1e-6, 0);
        EXPECT_NEAR(y->data[4 + j], b->data[j], 1e-6, 0);
    }
    Node *n = y->grad_fn;
    EXPECT(n && n->n_in == 3 && n->in[0] == x && n->in[1] == w && n->in[2] == b,
           "layernorm edges are not (x, weight, bias)");
    // d sum(y): dbias = rows, dweight = sum of xhat over rows (row 1's xhat is 0),
    // dx = rstd (w - mean(w) - xhat mean(w xhat)) per row.
    EXPECT(tape_backward(t, op_sum(t, y), NULL) == 0, "backward failed");
    double mw = 0, mwx[2] = {0, 0}, rs[2] = {rstd, 1 / sqrt(eps)};
    for (int j = 0; j < 4; j++) {
        mw += w->data[j] / 4;
        mwx[0] += w->data[j] * (x->data[j] - 2.5) * rstd / 4;
    }
    for (int j = 0; j < 4; j++) {
        double xhat = (x->data[j] - 2.5) * rstd;
        EXPECT_NEAR(b->grad[j], 2, 0, 1e-7);
        EXPECT_NEAR(w->grad[j], xhat, 1e-6, 1e-6);
        for (int r = 0; r < 2; r++)
            EXPECT_NEAR(x->grad[4 * r + j], rs[r] * (w->data[j] - mw - (r ? 0 : xhat) * mwx[r]),
                        1e-5, 1e-5);
    }
    gc_tape_free(&f);
}

typedef struct LnCase {
    bool affine;
} LnCase;

static Tensor *fwd_layernorm(Tape *t, Tensor *const *in, void *user) {
    const LnCase *c = user;
    return op_layernorm(t, in[0], c->affine ? in[1] : NULL, c->affine ? in[2] : NULL, 1e-5f);
}

static void test_layernorm_grads(void) {
    const int64_t shapes[2][3] = {{2, 3, 8}, {1, 5, 16}};
    for (int s = 0; s < 2; s++) {
        int64_t E = shapes[s][2];
        Tensor *x = leaf(3, shapes[s], 20 + s, -2, 2);
        Tensor *w = leaf(1, (int64_t[]){E}, 30 + s, 0.5f, 1.5f);
        Tensor *b = leaf(1, (int64_t[]){E}, 40 + s, -1, 1);
        LnCase affine = {true}, plain = {false};
        EXPECT(gradcheck("layernorm", fwd_layernorm, &affine, (Tensor *[]){x, w, b}, 3,
                         (GcOptions){.training = true}) == 0,
               "gradcheck layernorm (affine) shape %d", s);
        EXPECT(gradcheck("layernorm_plain", fwd_layernorm, &plain, &x, 1,
                         (GcOptions){.training = true}) == 0,
               "gradcheck layernorm (no affine) shape %d", s);
    }
}

// ---- BatchNorm2d ----
// x (B=2, C=2, H=1, W=2): channel 0 holds {1,2,3,4} (mean 2.5, biased var 1.25, unbiased 5/3),
// channel 1 {10,20,30,40} (mean 25, biased var 125, unbiased 500/3).
static const float bn_x[8] = {1, 2, 10, 20, 3, 4, 30, 40};

static void test_batchnorm_train_values(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    Tensor *x = leaf_of(4, (int64_t[]){2, 2, 1, 2}, bn_x);
    Tensor *w = leaf_of(1, (int64_t[]){2}, (float[]){2, -1});
    Tensor *b = leaf_of(1, (int64_t[]){2}, (float[]){0.5f, 1});
    BatchNormState st = bn_state(2, (float[]){0, 1}, (float[]){1, 2}, 0.1f, 1e-3f);
    Tensor *y = op_batchnorm2d(t, x, w, b, &st);
    const double mean[2] = {2.5, 25}, var[2] = {1.25, 125};
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        double want = (bn_x[i] - mean[c]) / sqrt(var[c] + 1e-3) * w->data[c] + b->data[c];
        EXPECT_NEAR(y->data[i], want, 1e-6, 1e-6);
    }
    // running = (1 - 0.1) running + 0.1 batch, the variance unbiased
    EXPECT_NEAR(st.running_mean->data[0], 0.25, 1e-7, 1e-6);
    EXPECT_NEAR(st.running_mean->data[1], 0.9 + 2.5, 1e-7, 1e-6);
    EXPECT_NEAR(st.running_var->data[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-7, 1e-6);
    EXPECT_NEAR(st.running_var->data[1], 1.8 + 0.1 * 500.0 / 3.0, 1e-7, 1e-6);
    EXPECT(st.num_batches_tracked == 1, "num_batches_tracked %lld",
           (long long)st.num_batches_tracked);
    Node *n = y->grad_fn;
    EXPECT(n && n->n_in == 3 && n->in[0] == x && n->in[1] == w && n->in[2] == b,
           "batchnorm edges are not (x, weight, bias)");

    // A second step moves the buffers again from where they are.
    op_batchnorm2d(t, x, w, b, &st);
    EXPECT_NEAR(st.running_mean->data[0], 0.9 * 0.25 + 0.25, 1e-7, 1e-6);
    EXPECT_NEAR(st.running_mean->data[1], 0.9 * 3.4 + 2.5, 1e-6, 1e-6);
    EXPECT(st.num_batches_tracked == 2, "num_batches_tracked %lld",
           (long long)st.num_batches_tracked);

    // Without weight and bias: plain normalisation.
    Tensor *y0 = op_batchnorm2d(t, x, NULL, NULL, &st);
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        EXPECT_NEAR(y0->data[i], (bn_x[i] - mean[c]) / sqrt(var[c] + 1e-3), 1e-6, 1e-6);
    }

    // Momentum 0.03, eps 1e-3 (Ultralytics): bit-exact against PyTorch 1.13's CPU kernel,
    // which rounds these steps in float: rm = 0.03f*m + 0.97f*rm, rv's first term in double.
    BatchNormState u = bn_state(2, (float[]){0.1f, -0.2f}, (float[]){1.5f, 0.7f}, 0.03f, 1e-3f);
    op_batchnorm2d(t, x, w, b, &u);
    const float mf = 0.03f;
    for (int c = 0; c < 2; c++) {
        float rm0 = c ? -0.2f : 0.1f, rv0 = c ? 0.7f : 1.5f;
        float want_rm = mf * (float)mean[c] + (1.0f - mf) * rm0;
        float unbiased = (float)(var[c] * 4) / 3.0f;
        float want_rv = (float)((double)mf * unbiased + (double)((1.0f - mf) * rv0));
        EXPECT(u.running_mean->data[c] == want_rm, "running_mean[%d] %.9g, want %.9g", c,
               (double)u.running_mean->data[c], (double)want_rm);
        EXPECT(u.running_var->data[c] == want_rv, "running_var[%d] %.9g, want %.9g", c,
               (double)u.running_var->data[c], (double)want_rv);
    }
    gc_tape_free(&f);
}

static void test_batchnorm_eval_values(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    t->training = false;
    Tensor *x = leaf_of(4, (int64_t[]){2, 2, 1, 2}, bn_x);
    Tensor *w = leaf_of(1, (int64_t[]){2}, (float[]){2, -1});
    Tensor *b = leaf_of(1, (int64_t[]){2}, (float[]){0.5f, 1});
    const float rm[2] = {1, 20}, rv[2] = {4, 100};
    BatchNormState st = bn_state(2, rm, rv, 0.1f, 1e-3f);
    Tensor *y = op_batchnorm2d(t, x, w, b, &st);
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        double want = (bn_x[i] - rm[c]) / sqrt(rv[c] + 1e-3) * w->data[c] + b->data[c];
        EXPECT_NEAR(y->data[i], want, 1e-6, 1e-6);
    }
    EXPECT(memcmp(st.running_mean->data, rm, sizeof rm) == 0 &&
               memcmp(st.running_var->data, rv, sizeof rv) == 0 && st.num_batches_tracked == 0,
           "eval mode changed the running buffers");
    // Eval backward: dx = dout * w / sqrt(rv + eps), nothing through the statistics.
    EXPECT(tape_backward(t, op_sum(t, y), NULL) == 0, "backward failed");
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        EXPECT_NEAR(x->grad[i], w->data[c] / sqrt(rv[c] + 1e-3), 1e-6, 1e-6);
    }
    EXPECT_NEAR(b->grad[0], 4, 0, 1e-7); // d/dbias = sum of dout over B*H*W
    gc_tape_free(&f);
}

typedef struct BnCase {
    BatchNormState *st;
    bool affine;
} BnCase;

static Tensor *fwd_batchnorm(Tape *t, Tensor *const *in, void *user) {
    const BnCase *c = user;
    return op_batchnorm2d(t, in[0], c->affine ? in[1] : NULL, c->affine ? in[2] : NULL, c->st);
}

static void test_batchnorm_grads(void) {
    for (int train = 1; train >= 0; train--)
        for (int affine = 1; affine >= 0; affine--) {
            Tensor *x = leaf(4, (int64_t[]){3, 4, 3, 2}, 50 + train, -2, 3);
            Tensor *w = leaf(1, (int64_t[]){4}, 60, 0.5f, 1.5f);
            Tensor *b = leaf(1, (int64_t[]){4}, 61, -1, 1);
            BatchNormState st = bn_state(4, (float[]){0.1f, -0.3f, 0.5f, 0},
                                         (float[]){0.8f, 1.2f, 2, 0.5f}, 0.03f, 1e-3f);
            BnCase c = {&st, affine};
            const char *name = train ? "batchnorm_train" : "batchnorm_eval";
            EXPECT(gradcheck(name, fwd_batchnorm, &c, (Tensor *[]){x, w, b}, affine ? 3 : 1,
                             (GcOptions){.training = train}) == 0,
                   "gradcheck %s affine %d", name, affine);
        }
}

// Through the batch statistics the input gradient of each channel sums to zero and is
// orthogonal to xhat up to the eps term (the mean and variance absorb those directions).
static void test_batchnorm_train_identities(void) {
    GcTape f;
    Tape *t = gc_tape_init(&f, 1);
    const int64_t B = 4, C = 3, HW = 25;
    Tensor *x = leaf(4, (int64_t[]){B, C, 5, 5}, 70, -1, 2);
    Tensor *w = leaf(1, (int64_t[]){C}, 71, 0.5f, 1.5f), *b = leaf(1, (int64_t[]){C}, 72, -1, 1);
    Tensor *dy = leaf(4, (int64_t[]){B, C, 5, 5}, 73, -1, 1);
    BatchNormState st = bn_state(3, (float[]){0, 0, 0}, (float[]){1, 1, 1}, 0.1f, 1e-3f);
    Tensor *y = op_batchnorm2d(t, x, w, b, &st);
    EXPECT(tape_backward(t, y, dy->data) == 0, "backward failed");
    for (int64_t c = 0; c < C; c++) {
        double s = 0, sx = 0, m = 0, v = 0, sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < B; n++)
            for (int64_t i = 0; i < HW; i++)
                m += x->data[(n * C + c) * HW + i];
        m /= (double)(B * HW);
        for (int64_t n = 0; n < B; n++)
            for (int64_t i = 0; i < HW; i++) {
                double d = x->data[(n * C + c) * HW + i] - m;
                v += d * d;
            }
        double invstd = 1 / sqrt(v / (double)(B * HW) + 1e-3);
        for (int64_t n = 0; n < B; n++)
            for (int64_t i = 0; i < HW; i++) {
                int64_t k = (n * C + c) * HW + i;
                double xhat = (x->data[k] - m) * invstd;
                s += x->grad[k];
                sx += x->grad[k] * xhat;
                sdy += dy->data[k];
                sdyx += dy->data[k] * xhat;
            }
        // sum xhat^2 = N var / (var + eps), not N: eps leaves a small component along xhat.
        double var = v / (double)(B * HW);
        EXPECT_NEAR(s, 0, 1e-4, 0);
        EXPECT_NEAR(sx, w->data[c] * invstd * sdyx * (1 - var / (var + 1e-3)), 1e-5, 0);
        EXPECT_NEAR(b->grad[c], sdy, 1e-5, 1e-5);
        EXPECT_NEAR(w->grad[c], sdyx, 1e-5, 1e-5);
    }
    gc_tape_free(&f);
}

// ---- BatchNorm + activation in one op ----
static Tensor *fwd_batchnorm_silu(Tape *t, Tensor *const *in, void *user) {
    return op_batchnorm2d_act(t, in[0], in[1], in[2], user, BN_ACT_SILU);
}

// op_batchnorm2d_act(x) against op_relu / op_silu (op_batchnorm2d(x)): the output, the running
// buffers and the gradients of x, weight and bias from the same upstream gradient, compared
// bit for bit. HW = 1089 > the CPU kernel's 512-element tile, so the backward's tiles and the
// tail meet. x spans both signs, so ReLU's kink and SiLU's curve both count.
static void test_batchnorm_act_fused(void) {
    const int64_t B = 2, C = 3, H = 33, W = 33, n = B * C * H * W;
    Tensor *x = leaf(4, (int64_t[]){B, C, H, W}, 90, -2, 2);
    Tensor *w = leaf(1, (int64_t[]){C}, 91, 0.5f, 1.5f), *b = leaf(1, (int64_t[]){C}, 92, -1, 1);
    Tensor *dy = leaf(1, (int64_t[]){n}, 93, -1, 1);
    const float rm[3] = {0.1f, -0.2f, 0.3f}, rv[3] = {0.9f, 1.1f, 1.3f};
    for (int train = 1; train >= 0; train--)
        for (int act = BN_ACT_RELU; act <= BN_ACT_SILU; act++) {
            float *got[2][6];
            for (int fused = 0; fused < 2; fused++) {
                GcTape f;
                Tape *t = gc_tape_init(&f, 2);
                t->training = train;
                BatchNormState st = bn_state(C, rm, rv, 0.03f, 1e-3f);
                Tensor *const ins[3] = {x, w, b};
                for (int i = 0; i < 3; i++)
                    ins[i]->grad_defined = false;
                Tensor *y;
                if (fused) {
                    y = op_batchnorm2d_act(t, x, w, b, &st, (BnAct)act);
                } else {
                    y = op_batchnorm2d(t, x, w, b, &st);
                    y = act == BN_ACT_RELU ? op_relu(t, y) : op_silu(t, y);
                }
                EXPECT(tape_backward(t, y, dy->data) == 0, "backward failed");
                const float *src[6] = {y->data, x->grad, w->grad, b->grad, st.running_mean->data,
                                       st.running_var->data};
                const int64_t len[6] = {n, n, C, C, C, C};
                for (int i = 0; i < 6; i++) {
                    got[fused][i] = xmalloc(sizeof(float) * (size_t)len[i]);
                    memcpy(got[fused][i], src[i], sizeof(float) * (size_t)len[i]);
                }
                gc_tape_free(&f);
            }
            const char *what[6] = {"output", "dx", "dweight", "dbias", "running_mean",
                                   "running_var"};
            const int64_t len[6] = {n, n, C, C, C, C};
            for (int i = 0; i < 6; i++) {
                EXPECT(memcmp(got[0][i], got[1][i], sizeof(float) * (size_t)len[i]) == 0,
                       "batchnorm + %s (%s): fused %s differs from the unfused pair's",
                       act == BN_ACT_RELU ? "relu" : "silu", train ? "train" : "eval", what[i]);
                free(got[0][i]);
                free(got[1][i]);
            }
        }
    // and SiLU's against finite differences (smooth; ReLU's kink sits where the normalised
    // value crosses 0, inside a finite-difference step for some element: ReLU counts on the
    // bit-for-bit match above, with op_relu's own gradcheck in test_ops_elementwise)
    for (int train = 1; train >= 0; train--) {
        Tensor *xs = leaf(4, (int64_t[]){3, 4, 3, 2}, 94 + train, -2, 3);
        Tensor *ws = leaf(1, (int64_t[]){4}, 96, 0.5f, 1.5f);
        Tensor *bs = leaf(1, (int64_t[]){4}, 97, -1, 1);
        BatchNormState st = bn_state(4, (float[]){0.1f, -0.3f, 0.5f, 0},
                                     (float[]){0.8f, 1.2f, 2, 0.5f}, 0.03f, 1e-3f);
        EXPECT(gradcheck("batchnorm_silu", fwd_batchnorm_silu, &st, (Tensor *[]){xs, ws, bs}, 3,
                         (GcOptions){.training = train}) == 0,
               "gradcheck batchnorm+silu train %d", train);
    }
}

// Per-channel and per-row parallel loops: the same bits on 1 and 2 threads.
static void test_threads(void) {
    Tensor *x = leaf(4, (int64_t[]){2, 64, 20, 20}, 80, -1, 2);
    Tensor *w = leaf(1, (int64_t[]){64}, 81, 0.5f, 1.5f), *b = leaf(1, (int64_t[]){64}, 82, -1, 1);
    Tensor *xl = leaf(2, (int64_t[]){500, 256}, 83, -1, 2);
    Tensor *wl = leaf(1, (int64_t[]){256}, 84, 0.5f, 1.5f),
           *bl = leaf(1, (int64_t[]){256}, 85, -1, 1);
    Tensor *dy = leaf(1, (int64_t[]){x->n}, 86, -1, 1),
           *dyl = leaf(1, (int64_t[]){xl->n}, 87, -1, 1);
    float zeros[64] = {0}, ones[64];
    for (int c = 0; c < 64; c++)
        ones[c] = 1;
    float *res[2][6];
    for (int th = 1; th <= 2; th++) {
        GcTape f;
        Tape *t = gc_tape_init(&f, th);
        BatchNormState st = bn_state(64, zeros, ones, 0.03f, 1e-3f);
        Tensor *const ins[6] = {x, w, b, xl, wl, bl};
        for (int i = 0; i < 6; i++)
            ins[i]->grad_defined = false;
        Tensor *y = op_batchnorm2d(t, x, w, b, &st);
        Tensor *yl = op_layernorm(t, xl, wl, bl, 1e-5f);
        EXPECT(tape_backward(t, y, dy->data) == 0 && tape_backward(t, yl, dyl->data) == 0,
               "backward failed");
        for (int i = 0; i < 6; i++) {
            res[th - 1][i] = xmalloc(sizeof(float) * (size_t)ins[i]->n);
            memcpy(res[th - 1][i], ins[i]->grad, sizeof(float) * (size_t)ins[i]->n);
        }
        gc_tape_free(&f);
    }
    const int64_t n[6] = {x->n, w->n, b->n, xl->n, wl->n, bl->n};
    for (int i = 0; i < 6; i++) {
        EXPECT(memcmp(res[0][i], res[1][i], sizeof(float) * (size_t)n[i]) == 0,
               "gradient %d differs on 1 and 2 threads", i);
        free(res[0][i]);
        free(res[1][i]);
    }
}

int main(void) {
    arena_init(&leaves, DEV_CPU, 1 << 22);
    test_layernorm_values();
    test_layernorm_grads();
    test_batchnorm_train_values();
    test_batchnorm_eval_values();
    test_batchnorm_grads();
    test_batchnorm_train_identities();
    test_batchnorm_act_fused();
    test_threads();
    arena_free(&leaves);
    return expect_report();
}
