/* module.c -- the registry and the primitive modules (see module.h). */
#include "trainer/nn/module.h"

#include <math.h>
#include <stdarg.h>

#include "kernels/base.h" // CHECK, xrealloc

void registry_init(Registry *r, Arena *arena, Arena *host, Rng *rng) {
    memset(r, 0, sizeof *r);
    r->arena = arena;
    r->host = host;
    r->rng = rng;
}

void registry_free(Registry *r) {
    free(r->params);
    free(r->names);
    free(r->buffers);
    r->params = NULL;
    r->names = NULL;
    r->buffers = NULL;
    r->n_params = r->n_buffers = 0;
}

void registry_push(Registry *r, const char *fmt, ...) {
    CHECK(r->depth < REG_MAX_DEPTH, "registry scopes nested deeper than %d", REG_MAX_DEPTH);
    size_t len = strlen(r->prefix);
    r->scope_len[r->depth++] = (int)len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->prefix + len, sizeof r->prefix - len, fmt, ap);
    va_end(ap);
    CHECK(n >= 0 && len + (size_t)n + 1 < sizeof r->prefix, "registry prefix too long");
    strcat(r->prefix, ".");
}

void registry_pop(Registry *r) {
    CHECK(r->depth > 0, "registry_pop without a push");
    r->prefix[r->scope_len[--r->depth]] = '\0';
}

void *registry_alloc(Registry *r, size_t nbytes) {
    void *p = arena_alloc_host(r->host, nbytes);
    memset(p, 0, nbytes);
    return p;
}

static const char *full_name(Registry *r, const char *name) {
    size_t a = strlen(r->prefix), b = strlen(name);
    char *s = arena_alloc_host(r->host, a + b + 1);
    memcpy(s, r->prefix, a);
    memcpy(s + a, name, b + 1);
    return s;
}

Tensor *registry_param(Registry *r, const char *name, int ndim, const int64_t *shape) {
    if (r->n_params == r->cap_params) {
        r->cap_params = r->cap_params ? 2 * r->cap_params : 256;
        r->params = xrealloc(r->params, sizeof(Tensor *) * (size_t)r->cap_params);
        r->names = xrealloc(r->names, sizeof(char *) * (size_t)r->cap_params);
    }
    Tensor *p = tensor_leaf(r->arena, ndim, shape);
    p->param_index = r->n_params;
    r->params[r->n_params] = p;
    r->names[r->n_params] = full_name(r, name);
    r->n_params++;
    return p;
}

static RegBuffer *new_buffer(Registry *r, const char *name) {
    if (r->n_buffers == r->cap_buffers) {
        r->cap_buffers = r->cap_buffers ? 2 * r->cap_buffers : 256;
        r->buffers = xrealloc(r->buffers, sizeof(RegBuffer) * (size_t)r->cap_buffers);
    }
    RegBuffer *b = &r->buffers[r->n_buffers++];
    memset(b, 0, sizeof *b);
    b->name = full_name(r, name);
    return b;
}

Tensor *registry_buffer(Registry *r, const char *name, int ndim, const int64_t *shape) {
    RegBuffer *b = new_buffer(r, name);
    b->t = tensor_zeros(r->arena, ndim, shape);
    return b->t;
}

void registry_counter(Registry *r, const char *name, int64_t *count) {
    new_buffer(r, name)->count = count;
}

int64_t registry_numel(const Registry *r) {
    int64_t n = 0;
    for (int i = 0; i < r->n_params; i++)
        n += r->params[i]->n;
    return n;
}

// ---- initialisers ----
// Parameters live on the model's device: the values are drawn on the host, in the same order
// on every device, and uploaded.
void init_fill(Tensor *t, float value) { tensor_fill(t, value); }

void init_uniform(Tensor *t, Rng *rng, float lo, float hi) {
    float *h = xmalloc(sizeof(float) * (size_t)MAX(t->n, 1));
    for (int64_t i = 0; i < t->n; i++)
        h[i] = rng_range(rng, lo, hi);
    tensor_write(t, h);
    free(h);
}

void init_normal(Tensor *t, Rng *rng) {
    float *h = xmalloc(sizeof(float) * (size_t)MAX(t->n, 1));
    for (int64_t i = 0; i < t->n; i++)
        h[i] = rng_normal(rng);
    tensor_write(t, h);
    free(h);
}

// torch.nn.init._calculate_fan_in_and_fan_out: dims 2.. are the receptive field.
static void fans(const Tensor *t, double *fan_in, double *fan_out) {
    CHECK(t->ndim >= 2, "fan in/out of a %d-d tensor", t->ndim);
    double field = 1;
    for (int i = 2; i < t->ndim; i++)
        field *= (double)t->shape[i];
    *fan_in = (double)t->shape[1] * field;
    *fan_out = (double)t->shape[0] * field;
}

void init_xavier_uniform(Tensor *t, Rng *rng) {
    double fi, fo;
    fans(t, &fi, &fo);
    float a = (float)sqrt(6.0 / (fi + fo));
    init_uniform(t, rng, -a, a);
}

// kaiming_uniform_(a = sqrt 5), PyTorch's default for Conv2d and Linear weights, and the
// default bias draw: both reduce to U(+-1/sqrt(fan_in)).
static void init_default(Tensor *t, Rng *rng, double fan_in) {
    float a = (float)(1.0 / sqrt(fan_in));
    init_uniform(t, rng, -a, a);
}

// ---- Linear ----
void linear_init(Linear *l, Registry *r, const char *name, int in, int out) {
    registry_push(r, "%s", name);
    l->w = registry_param(r, "weight", 2, (int64_t[]){out, in});
    l->b = registry_param(r, "bias", 1, (int64_t[]){out});
    registry_pop(r);
    init_default(l->w, r->rng, in);
    init_default(l->b, r->rng, in);
}

Tensor *linear_forward(const Linear *l, Tape *t, Tensor *x) {
    return op_linear(t, x, l->w, l->b);
}

// ---- LayerNorm ----
void layernorm_init(LayerNorm *n, Registry *r, const char *name, int e) {
    registry_push(r, "%s", name);
    n->w = registry_param(r, "weight", 1, (int64_t[]){e});
    n->b = registry_param(r, "bias", 1, (int64_t[]){e});
    registry_pop(r);
    init_fill(n->w, 1.0f);
    init_fill(n->b, 0.0f);
}

Tensor *layernorm_forward(const LayerNorm *n, Tape *t, Tensor *x) {
    return op_layernorm(t, x, n->w, n->b, 1e-5f);
}

// ---- BatchNorm2d ----
void batchnorm2d_init(BatchNorm2d *bn, Registry *r, const char *name, int c) {
    registry_push(r, "%s", name);
    bn->w = registry_param(r, "weight", 1, (int64_t[]){c});
    bn->b = registry_param(r, "bias", 1, (int64_t[]){c});
    bn->st.running_mean = registry_buffer(r, "running_mean", 1, (int64_t[]){c});
    bn->st.running_var = registry_buffer(r, "running_var", 1, (int64_t[]){c});
    registry_counter(r, "num_batches_tracked", &bn->st.num_batches_tracked);
    registry_pop(r);
    init_fill(bn->w, 1.0f);
    init_fill(bn->b, 0.0f);
    init_fill(bn->st.running_var, 1.0f);
    bn->st.num_batches_tracked = 0;
    bn->st.eps = 1e-3f;
    bn->st.momentum = 0.03f;
}

Tensor *batchnorm2d_forward(BatchNorm2d *bn, Tape *t, Tensor *x) {
    return op_batchnorm2d(t, x, bn->w, bn->b, &bn->st);
}

// ---- Embedding ----
void embedding_init(Embedding *e, Registry *r, const char *name, int v, int dim) {
    registry_push(r, "%s", name);
    e->w = registry_param(r, "weight", 2, (int64_t[]){v, dim});
    registry_pop(r);
    init_normal(e->w, r->rng);
}

// ---- MultiheadAttention ----
void mha_init(Mha *m, Registry *r, const char *name, int e, int n_heads) {
    CHECK(e % n_heads == 0, "MultiheadAttention: embed_dim %d not divisible by %d heads", e,
          n_heads);
    registry_push(r, "%s", name);
    m->in_w = registry_param(r, "in_proj_weight", 2, (int64_t[]){3 * e, e});
    m->in_b = registry_param(r, "in_proj_bias", 1, (int64_t[]){3 * e});
    linear_init(&m->out_proj, r, "out_proj", e, e);
    registry_pop(r);
    m->n_heads = n_heads;
    // MultiheadAttention._reset_parameters
    init_xavier_uniform(m->in_w, r->rng);
    init_fill(m->in_b, 0.0f);
    init_fill(m->out_proj.b, 0.0f);
}

Tensor *mha_forward(const Mha *m, Tape *t, Tensor *q, Tensor *k, Tensor *v, const uint8_t *mask) {
    Tensor *heads = op_mha_core(t, q, k, v, m->in_w, m->in_b, m->n_heads, mask);
    return linear_forward(&m->out_proj, t, heads);
}

// ---- Conv ----
void conv_init_named(Conv *c, Registry *r, const char *name, const char *conv_name,
                     const char *bn_name, ConvShape s, Act act) {
    CHECK(s.g >= 1 && s.c1 % s.g == 0 && s.c2 % s.g == 0, "Conv %d->%d with %d groups", s.c1, s.c2,
          s.g);
    int pad = s.pad >= 0 ? s.pad : (s.d * (s.k - 1) + 1) / 2;
    c->p = (Conv2dParams){.stride_h = s.s,
                          .stride_w = s.s,
                          .pad_h = pad,
                          .pad_w = pad,
                          .dil_h = s.d,
                          .dil_w = s.d,
                          .groups = s.g};
    c->act = act;
    if (name) registry_push(r, "%s", name);
    registry_push(r, "%s", conv_name);
    c->w = registry_param(r, "weight", 4, (int64_t[]){s.c2, s.c1 / s.g, s.k, s.k});
    registry_pop(r);
    batchnorm2d_init(&c->bn, r, bn_name, s.c2);
    if (name) registry_pop(r);
    init_default(c->w, r->rng, (double)(s.c1 / s.g) * s.k * s.k);
}

void conv_init(Conv *c, Registry *r, const char *name, ConvShape s, Act act) {
    conv_init_named(c, r, name, "conv", "bn", s, act);
}

// BatchNorm and the activation: ReLU and SiLU fused into the BatchNorm op
// (op_batchnorm2d_act: one pass over the map), GELU as an op of its own.
Tensor *conv_forward(Conv *c, Tape *t, Tensor *x) {
    Tensor *y = op_conv2d(t, x, c->w, NULL, c->p);
    switch (c->act) {
    case ACT_NONE:
        return batchnorm2d_forward(&c->bn, t, y);
    case ACT_RELU:
        return op_batchnorm2d_act(t, y, c->bn.w, c->bn.b, &c->bn.st, BN_ACT_RELU);
    case ACT_SILU:
        return op_batchnorm2d_act(t, y, c->bn.w, c->bn.b, &c->bn.st, BN_ACT_SILU);
    case ACT_GELU:
        return op_gelu(t, batchnorm2d_forward(&c->bn, t, y));
    }
    CHECK(false, "unknown activation %d", (int)c->act);
    return NULL;
}
