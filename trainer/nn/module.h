/* module.h -- the parameter registry and the PyTorch primitives every RT-DETR block is made
 * of: Linear, LayerNorm, BatchNorm2d, Embedding, nn.MultiheadAttention, and Ultralytics' Conv
 * (Conv2d + BatchNorm2d + activation). Each *_init registers its tensors under PyTorch's
 * state-dict names, in PyTorch's registration order, and initialises them as PyTorch's
 * constructors do (in distribution; trainer/rng.h is not PyTorch's generator).
 * Not here: the blocks themselves (blocks.h) and the yaml reader (yaml_model.h). */
#ifndef TRAINER_NN_MODULE_H
#define TRAINER_NN_MODULE_H

#include <stdbool.h>
#include <stdint.h>

#include "trainer/ops/ops.h"
#include "trainer/rng.h"

// A buffer of the state dict that is not a parameter: a float tensor (running_mean,
// running_var) or an int64 counter (num_batches_tracked, a 0-d int64 tensor in PyTorch).
typedef struct RegBuffer {
    const char *name;
    Tensor *t;      // float buffer, or NULL
    int64_t *count; // int64 counter, or NULL
} RegBuffer;

#define REG_MAX_DEPTH 16

// Hands out parameters and buffers, naming each "<prefix><name>" where the prefix is the
// stack of pushed scopes ("model.28." "decoder.layers.3." ...). A parameter is a tensor_leaf
// from `arena` whose param_index is its position in `params` (registration order, which is
// PyTorch's model.parameters() order and the order the DDP reducer buckets by).
typedef struct Registry {
    Arena *arena; // parameter data + grads, buffers
    Arena *host;  // names and module structs (always host memory)
    Rng *rng;     // initialisation draws
    char prefix[512];
    int scope_len[REG_MAX_DEPTH]; // prefix length before each push
    int depth;
    Tensor **params;
    const char **names; // names[i] of params[i]
    int n_params, cap_params;
    RegBuffer *buffers;
    int n_buffers, cap_buffers;
} Registry;

// The registry borrows all three; nothing is registered yet.
void registry_init(Registry *r, Arena *arena, Arena *host, Rng *rng);
// Frees the lists (names and tensors belong to the arenas).
void registry_free(Registry *r);
// Appends "<formatted scope>." to the prefix; registry_pop undoes the last push.
void registry_push(Registry *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void registry_pop(Registry *r);
// A new parameter (zeros, grad allocated, grad_defined false) named prefix + name.
Tensor *registry_param(Registry *r, const char *name, int ndim, const int64_t *shape);
// A new float buffer (zeros), not a leaf.
Tensor *registry_buffer(Registry *r, const char *name, int ndim, const int64_t *shape);
// An int64 counter buffer owned by the caller.
void registry_counter(Registry *r, const char *name, int64_t *count);
// Zeroed host memory that lives as long as `host`.
void *registry_alloc(Registry *r, size_t nbytes);
// Total number of parameter elements.
int64_t registry_numel(const Registry *r);

// ---- initialisers (torch.nn.init) ----
void init_fill(Tensor *t, float value);
void init_uniform(Tensor *t, Rng *rng, float lo, float hi);
void init_normal(Tensor *t, Rng *rng); // N(0, 1)
// xavier_uniform_: U(+-sqrt(6 / (fan_in + fan_out))), fans of a (OUT, IN, k...) tensor.
void init_xavier_uniform(Tensor *t, Rng *rng);

typedef enum { ACT_NONE, ACT_RELU, ACT_SILU, ACT_GELU } Act;

// ---- nn.Linear: w (OUT,IN), b (OUT); both U(+-1/sqrt(IN)) (kaiming_uniform, a = sqrt 5) ----
typedef struct Linear {
    Tensor *w, *b;
} Linear;
void linear_init(Linear *l, Registry *r, const char *name, int in, int out);
Tensor *linear_forward(const Linear *l, Tape *t, Tensor *x); // x (..., IN) -> (..., OUT)

// ---- nn.LayerNorm(E): weight 1, bias 0, eps 1e-5 ----
typedef struct LayerNorm {
    Tensor *w, *b;
} LayerNorm;
void layernorm_init(LayerNorm *n, Registry *r, const char *name, int e);
Tensor *layernorm_forward(const LayerNorm *n, Tape *t, Tensor *x);

// ---- nn.BatchNorm2d(C) after Ultralytics' initialize_weights: weight 1, bias 0, eps 1e-3,
//      momentum 0.03; buffers running_mean 0, running_var 1, num_batches_tracked 0 ----
typedef struct BatchNorm2d {
    Tensor *w, *b;
    BatchNormState st;
} BatchNorm2d;
void batchnorm2d_init(BatchNorm2d *bn, Registry *r, const char *name, int c);
Tensor *batchnorm2d_forward(BatchNorm2d *bn, Tape *t, Tensor *x);

// ---- nn.Embedding(V, E): weight N(0, 1) ----
typedef struct Embedding {
    Tensor *w;
} Embedding;
void embedding_init(Embedding *e, Registry *r, const char *name, int v, int dim);

// ---- nn.MultiheadAttention(E, NH), dropout 0, registered as in_proj_weight (3E,E) xavier,
//      in_proj_bias (3E) 0, out_proj.weight (E,E) U(+-1/sqrt E), out_proj.bias 0 ----
typedef struct Mha {
    Tensor *in_w, *in_b;
    Linear out_proj;
    int n_heads;
} Mha;
void mha_init(Mha *m, Registry *r, const char *name, int e, int n_heads);
// q, k, v (B, L, E) batch first -> (B, Lq, E). mask: NULL or (Lq, Lk) bytes, nonzero = blocked.
// Batch-first here and (L, B, E) in PyTorch's decoder layer are the same computation.
Tensor *mha_forward(const Mha *m, Tape *t, Tensor *q, Tensor *k, Tensor *v, const uint8_t *mask);

// ---- Ultralytics Conv: children "<conv>" Conv2d(bias=False) and "<bn>" BatchNorm2d, then an
//      activation. Also RTDETRDecoder.input_proj (children "0" and "1", no activation). ----
typedef struct Conv {
    Tensor *w; // (C2, C1/G, K, K), U(+-1/sqrt(fan_in))
    BatchNorm2d bn;
    Conv2dParams p;
    Act act;
} Conv;
// pad < 0: Ultralytics' autopad, half the dilated kernel (d*(k-1)+1) / 2.
typedef struct ConvShape {
    int c1, c2, k, s, pad, g, d;
} ConvShape;
// Registers "<conv_name>.weight" and "<bn_name>.{weight,bias,...}" under the scope `name`
// (name NULL: no extra scope).
void conv_init_named(Conv *c, Registry *r, const char *name, const char *conv_name,
                     const char *bn_name, ConvShape s, Act act);
// The usual Conv: children "conv" and "bn".
void conv_init(Conv *c, Registry *r, const char *name, ConvShape s, Act act);
Tensor *conv_forward(Conv *c, Tape *t, Tensor *x); // (B,C1,H,W) -> (B,C2,OH,OW)

#endif
