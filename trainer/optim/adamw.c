/* adamw.c -- torch.optim.AdamW and torch.optim.SGD (torch 1.13 _single_tensor_adamw/_sgd),
 * Ultralytics' parameter groups and its optimizer="auto" choice.
 *
 * Float32 operation order, as the ATen CPU kernels compute it (checked bit for bit against
 * torch 1.13 in tests/test_optim.c): a Python scalar becomes a float before the kernel; add_
 * with alpha is one fused multiply-add (Vectorized fmadd, and the scalar tail is contracted the
 * same way); addcmul_ is fma(value*t1, t2, self); addcdiv_ is self + (value*t1)/t2. */
#include "trainer/optim/adamw.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/base.h"
#include "trainer/optim/host_loop.h"

// ---- groups ----

// Component k from the end of a dotted path (k = 0: the last), as [*start, *start + *len).
static bool path_component(const char *path, size_t path_len, int k, const char **start, size_t *len) {
    size_t end = path_len;
    for (;;) {
        size_t begin = end;
        while (begin > 0 && path[begin - 1] != '.') begin--;
        if (k == 0) {
            *start = path + begin;
            *len = end - begin;
            return true;
        }
        if (begin == 0) return false;
        end = begin - 1;
        k--;
    }
}

static bool component_is(const char *s, size_t len, const char *word) {
    return len == strlen(word) && memcmp(s, word, len) == 0;
}

static bool all_digits(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)s[i])) return false;
    return true;
}

// Is the module at `path` (path_len chars) a BatchNorm2d or LayerNorm, by our nn/ naming?
static bool module_is_norm(const char *path, size_t path_len) {
    const char *c0, *c1, *c2;
    size_t l0, l1, l2;
    if (!path_component(path, path_len, 0, &c0, &l0)) return false;
    if (component_is(c0, l0, "bn")) return true;
    if (l0 >= 4 && memcmp(c0, "norm", 4) == 0 && all_digits(c0 + 4, l0 - 4)) return true;
    if (!component_is(c0, l0, "1") || !path_component(path, path_len, 1, &c1, &l1)) return false;
    if (component_is(c1, l1, "enc_output")) return true; // Sequential(Linear, LayerNorm)
    // input_proj.<k> = Sequential(Conv2d, BatchNorm2d)
    return all_digits(c1, l1) && path_component(path, path_len, 2, &c2, &l2) &&
           component_is(c2, l2, "input_proj");
}

OptimGroupId optim_group_of(const char *name) {
    if (strstr(name, "bias")) return OPTIM_GROUP_BIAS;
    static const char suffix[] = ".weight";
    size_t n = strlen(name), ns = sizeof suffix - 1;
    if (n > ns && strcmp(name + n - ns, suffix) == 0 && module_is_norm(name, n - ns))
        return OPTIM_GROUP_NORM;
    return OPTIM_GROUP_DECAY;
}

// ---- auto choice ----

// Python's round(x, 6): the exact binary value rounded to 6 decimals (ties to even), which is
// what glibc's printf does too, read back as the nearest double.
static double round_6_decimals(double x) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.6f", x);
    return strtod(buf, NULL);
}

OptimChoice optim_auto_choice(int64_t iterations, int nc) {
    if (iterations > 10000) return (OptimChoice){OPTIM_SGD, 0.01, 0.9};
    double lr_fit = round_6_decimals(0.002 * 5 / (4 + nc));
    return (OptimChoice){OPTIM_ADAMW, lr_fit, 0.9};
}

int64_t optim_auto_iterations(int64_t dataset_len, int batch, int nbs, int epochs) {
    CHECK(batch > 0 && nbs > 0 && epochs >= 0, "batch %d nbs %d epochs %d", batch, nbs, epochs);
    double per_epoch = ceil((double)dataset_len / (double)MAX(batch, nbs)); // math.ceil(a / b)
    return (int64_t)per_epoch * epochs;
}

int optim_parse_kind(const char *name, OptimKind *kind) {
    if (strcmp(name, "SGD") == 0) *kind = OPTIM_SGD;
    else if (strcmp(name, "AdamW") == 0) *kind = OPTIM_ADAMW;
    else return -1;
    return 0;
}

const char *optim_kind_name(OptimKind kind) { return kind == OPTIM_SGD ? "SGD" : "AdamW"; }

// ---- lifetime ----

void optim_init(Optimizer *o, OptimKind kind, Tensor **params, const char **names, int n_params,
                double lr, double momentum, double weight_decay) {
    CHECK(n_params > 0, "an optimizer needs parameters");
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->n_params = n_params;
    o->params = params;
    o->eps = 1e-8;
    o->nesterov = kind == OPTIM_SGD;
    for (int g = 0; g < OPTIM_N_GROUPS; g++)
        o->groups[g] = (OptimGroup){.lr = lr, .initial_lr = lr, .momentum = momentum, .beta2 = 0.999,
                                    .weight_decay = g == OPTIM_GROUP_DECAY ? weight_decay : 0.0};
    o->group = xmalloc((size_t)n_params);
    o->offset = xmalloc(sizeof(int64_t) * (size_t)n_params);
    o->step = xcalloc((size_t)n_params, sizeof(int64_t));
    o->has_state = xcalloc((size_t)n_params, 1);
    for (int i = 0; i < n_params; i++) {
        o->group[i] = (uint8_t)optim_group_of(names[i]);
        o->offset[i] = o->numel;
        o->numel += params[i]->n;
    }
    size_t n = (size_t)o->numel;
    if (kind == OPTIM_ADAMW) {
        o->exp_avg = xcalloc(n, sizeof(float));
        o->exp_avg_sq = xcalloc(n, sizeof(float));
    } else {
        o->momentum_buffer = xcalloc(n, sizeof(float));
    }
}

void optim_free(Optimizer *o) {
    free(o->group);
    free(o->offset);
    free(o->step);
    free(o->has_state);
    free(o->exp_avg);
    free(o->exp_avg_sq);
    free(o->momentum_buffer);
    memset(o, 0, sizeof *o);
}

int optim_group_size(const Optimizer *o, OptimGroupId g) {
    int n = 0;
    for (int i = 0; i < o->n_params; i++) n += o->group[i] == g;
    return n;
}

// ---- steps ----
// optimizer.step() is one pass (host_loop.h) over every parameter whose grad is defined: its
// weights and gradient mapped to the host, and the float32 scalars of its update.

// The Python scalars of one AdamW update as the float32 kernels see them.
typedef struct AdamwScalars {
    float decay;                     // 1 - lr * wd
    float beta1, one_minus_beta1;    // b1, 1 - b1
    float beta2, one_minus_beta2;    // b2, 1 - b2
    float bc2_sqrt, eps;             // sqrt(1 - b2^step), eps
    float neg_step_size;             // -lr / (1 - b1^step)
} AdamwScalars;

// The same for SGD, with its (loop-invariant) choices.
typedef struct SgdScalars {
    float wd, mom, neg_lr;
    bool decay, use_momentum, first, nesterov; // first: the momentum buffer is made now
} SgdScalars;

typedef struct StepPass {
    const Optimizer *o;
    float **w, **g;        // parameter i's weights and gradient on the host (host_map)
    AdamwScalars *adamw;   // AdamW: parameter i's scalars
    SgdScalars *sgd;       // SGD: parameter i's scalars
} StepPass;

// _single_tensor_adamw's scalars for parameter i (its step already counted).
static AdamwScalars adamw_scalars(const Optimizer *o, const OptimGroup *gr, int i) {
    double step = (double)o->step[i];
    double bias_correction1 = 1.0 - pow(gr->momentum, step);
    double bias_correction2 = 1.0 - pow(gr->beta2, step);
    double step_size = gr->lr / bias_correction1;
    return (AdamwScalars){.decay = (float)(1.0 - gr->lr * gr->weight_decay),
                          .beta1 = (float)gr->momentum,
                          .one_minus_beta1 = (float)(1.0 - gr->momentum),
                          .beta2 = (float)gr->beta2,
                          .one_minus_beta2 = (float)(1.0 - gr->beta2),
                          .bc2_sqrt = (float)sqrt(bias_correction2),
                          .eps = (float)o->eps,
                          .neg_step_size = (float)(-step_size)};
}

// _single_tensor_adamw over elements [begin, end): w weights, g gradient, m/v the moments.
HOST_LOOP_VECTORIZED
static void adamw_slice(AdamwScalars s, float *restrict w, float *restrict m, float *restrict v,
                        const float *restrict g, int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t j = begin; j < end; j++) {
        w[j] = w[j] * s.decay;                                       // param.mul_(1 - lr * wd)
        m[j] = fmaf(g[j], s.one_minus_beta1, m[j] * s.beta1);        // exp_avg.mul_(b1).add_(g, alpha=1-b1)
        v[j] = fmaf(s.one_minus_beta2 * g[j], g[j], v[j] * s.beta2); // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
        float denom = sqrtf(v[j]) / s.bc2_sqrt + s.eps;              // (v.sqrt() / bc2_sqrt).add_(eps)
        w[j] = w[j] + (s.neg_step_size * m[j]) / denom;              // param.addcdiv_(m, denom, -step_size)
    }
}

static void adamw_piece(void *ctx, int i, int64_t begin, int64_t end) {
    const StepPass *pass = ctx;
    int64_t at = pass->o->offset[i];
    adamw_slice(pass->adamw[i], pass->w[i], pass->o->exp_avg + at, pass->o->exp_avg_sq + at,
                pass->g[i], begin, end);
}

// _single_tensor_sgd's scalars for parameter i (dampening 0).
static SgdScalars sgd_scalars(const Optimizer *o, const OptimGroup *gr, int i) {
    return (SgdScalars){.wd = (float)gr->weight_decay,
                        .mom = (float)gr->momentum,
                        .neg_lr = (float)(-gr->lr),
                        .decay = gr->weight_decay != 0.0,
                        .use_momentum = gr->momentum != 0.0,
                        .first = !o->has_state[i],
                        .nesterov = o->nesterov};
}

// _single_tensor_sgd over elements [begin, end): w weights, g gradient, buf the momentum.
HOST_LOOP_VECTORIZED
static void sgd_slice(SgdScalars s, float *restrict w, float *restrict buf, const float *restrict g,
                      int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t j = begin; j < end; j++) {
        float d = s.decay ? fmaf(w[j], s.wd, g[j]) : g[j]; // g.add(p, alpha=wd)
        if (s.use_momentum) {
            buf[j] = s.first ? d : buf[j] * s.mom + d; // clone(d), or buf.mul_(mom).add_(d, alpha=1)
            d = s.nesterov ? fmaf(buf[j], s.mom, d) : buf[j];
        }
        w[j] = fmaf(d, s.neg_lr, w[j]); // param.add_(d, alpha=-lr)
    }
}

static void sgd_piece(void *ctx, int i, int64_t begin, int64_t end) {
    const StepPass *pass = ctx;
    sgd_slice(pass->sgd[i], pass->w[i], pass->o->momentum_buffer + pass->o->offset[i], pass->g[i],
              begin, end);
}

void optim_step(Optimizer *o) {
    size_t n = (size_t)o->n_params;
    StepPass pass = {.o = o, .w = xcalloc(n, sizeof(float *)), .g = xcalloc(n, sizeof(float *))};
    if (o->kind == OPTIM_ADAMW) pass.adamw = xcalloc(n, sizeof(AdamwScalars));
    else pass.sgd = xcalloc(n, sizeof(SgdScalars));
    int64_t *lengths = xcalloc(n, sizeof(int64_t)); // 0: skipped
    for (int i = 0; i < o->n_params; i++) {
        Tensor *p = o->params[i];
        if (!p->grad_defined) continue;
        CHECK(p->grad, "parameter %d: grad_defined without a grad buffer", i);
        const OptimGroup *gr = &o->groups[o->group[i]];
        o->step[i]++;
        if (o->kind == OPTIM_ADAMW) {
            pass.adamw[i] = adamw_scalars(o, gr, i);
            o->has_state[i] = 1;
        } else {
            pass.sgd[i] = sgd_scalars(o, gr, i);
            if (pass.sgd[i].use_momentum) o->has_state[i] = 1;
        }
        pass.w[i] = host_map(p->dev, p->data, p->n, true);
        pass.g[i] = host_map(p->dev, p->grad, p->n, true);
        lengths[i] = p->n;
    }
    host_loop_run(o->n_params, lengths, o->kind == OPTIM_ADAMW ? adamw_piece : sgd_piece, &pass);
    for (int i = 0; i < o->n_params; i++) {
        Tensor *p = o->params[i];
        if (!p->grad_defined) continue;
        host_unmap(p->dev, p->grad, pass.g[i], p->n, false);
        host_unmap(p->dev, p->data, pass.w[i], p->n, true);
    }
    free(lengths);
    free(pass.w);
    free(pass.g);
    free(pass.adamw);
    free(pass.sgd);
}

void optim_zero_grad(Optimizer *o, bool set_to_none) {
    for (int i = 0; i < o->n_params; i++) {
        Tensor *p = o->params[i];
        if (!p->grad_defined) continue;
        if (set_to_none) p->grad_defined = false;
        else {
            float *g = host_map(p->dev, p->grad, p->n, false);
            memset(g, 0, sizeof(float) * (size_t)p->n);
            host_unmap(p->dev, p->grad, g, p->n, true);
        }
    }
}
