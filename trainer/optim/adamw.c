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

// _single_tensor_adamw for one parameter (step already counted).
static void adamw_update(const Optimizer *o, const OptimGroup *gr, int i) {
    Tensor *p = o->params[i];
    float *m = o->exp_avg + o->offset[i], *v = o->exp_avg_sq + o->offset[i];
    float *w = host_map(p->dev, p->data, p->n, true);
    float *g = host_map(p->dev, p->grad, p->n, true);
    double step = (double)o->step[i];
    double bias_correction1 = 1.0 - pow(gr->momentum, step);
    double bias_correction2 = 1.0 - pow(gr->beta2, step);
    double step_size = gr->lr / bias_correction1;
    double bias_correction2_sqrt = sqrt(bias_correction2);
    // the Python scalars as the float32 kernels see them
    float decay = (float)(1.0 - gr->lr * gr->weight_decay);
    float beta1 = (float)gr->momentum, one_minus_beta1 = (float)(1.0 - gr->momentum);
    float beta2 = (float)gr->beta2, one_minus_beta2 = (float)(1.0 - gr->beta2);
    float bc2_sqrt = (float)bias_correction2_sqrt, eps = (float)o->eps;
    float neg_step_size = (float)(-step_size);
    for (int64_t j = 0; j < p->n; j++) {
        w[j] = w[j] * decay;                                   // param.mul_(1 - lr * wd)
        m[j] = fmaf(g[j], one_minus_beta1, m[j] * beta1);      // exp_avg.mul_(b1).add_(g, alpha=1-b1)
        v[j] = fmaf(one_minus_beta2 * g[j], g[j], v[j] * beta2); // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
        float denom = sqrtf(v[j]) / bc2_sqrt + eps;            // (v.sqrt() / bc2_sqrt).add_(eps)
        w[j] = w[j] + (neg_step_size * m[j]) / denom;          // param.addcdiv_(m, denom, -step_size)
    }
    host_unmap(p->dev, p->grad, g, p->n, false);
    host_unmap(p->dev, p->data, w, p->n, true);
}

// _single_tensor_sgd for one parameter (dampening 0).
static void sgd_update(Optimizer *o, const OptimGroup *gr, int i) {
    Tensor *p = o->params[i];
    float *buf = o->momentum_buffer + o->offset[i];
    float *w = host_map(p->dev, p->data, p->n, true);
    float *g = host_map(p->dev, p->grad, p->n, true);
    float wd = (float)gr->weight_decay, mom = (float)gr->momentum, neg_lr = (float)(-gr->lr);
    bool first = !o->has_state[i];
    bool use_momentum = gr->momentum != 0.0;
    for (int64_t j = 0; j < p->n; j++) {
        float d = gr->weight_decay != 0.0 ? fmaf(w[j], wd, g[j]) : g[j]; // g.add(p, alpha=wd)
        if (use_momentum) {
            buf[j] = first ? d : buf[j] * mom + d; // clone(d), or buf.mul_(mom).add_(d, alpha=1)
            d = o->nesterov ? fmaf(buf[j], mom, d) : buf[j];
        }
        w[j] = fmaf(d, neg_lr, w[j]); // param.add_(d, alpha=-lr)
    }
    host_unmap(p->dev, p->grad, g, p->n, false);
    host_unmap(p->dev, p->data, w, p->n, true);
    if (use_momentum) o->has_state[i] = 1;
}

void optim_step(Optimizer *o) {
    for (int i = 0; i < o->n_params; i++) {
        if (!o->params[i]->grad_defined) continue;
        CHECK(o->params[i]->grad, "parameter %d: grad_defined without a grad buffer", i);
        const OptimGroup *gr = &o->groups[o->group[i]];
        o->step[i]++;
        if (o->kind == OPTIM_ADAMW) {
            o->has_state[i] = 1;
            adamw_update(o, gr, i);
        } else {
            sgd_update(o, gr, i);
        }
    }
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
