/* ops.h -- every differentiable op: the autograd-level API the model code calls.
 *
 * Each op runs its forward kernel at once, allocates its output from the tape's arena, and
 * records a node (tape_record) when some input requires grad. Its backward sits beside it in
 * trainer/ops/<family>.c. Outputs are new contiguous tensors; op_reshape and op_detach share
 * the input's data, which is safe because no op ever writes its inputs. Shape errors are CHECK
 * failures naming the op and the shapes.
 *
 * Edge order (the order a node lists its inputs) follows the ATen function PyTorch records,
 * because it decides the order of gradient-ready hooks when one node frees several
 * parameters (batchnorm/layernorm/conv: input, weight, bias; linear: bias, then weight).
 *
 * Shapes: B batch, C channels, H W spatial, N tokens, E embedding, NH heads, D head dim,
 * L levels, P points. Optional tensor arguments may be NULL where stated. Negative dims count
 * from the end, as in PyTorch. */
#ifndef TRAINER_OPS_OPS_H
#define TRAINER_OPS_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "trainer/tape.h"

// ---- unary elementwise (ops/activation.c) ----
Tensor *op_relu(Tape *t, Tensor *x);
// relu_ (PyTorch's in-place relu): x's data becomes max(x, 0); returns a view of it. x must be
// an op's fresh output that nothing else reads, produced by an op whose backward does not read
// its own output (conv2d, batchnorm2d, linear, add): the tensor relu would have allocated is
// saved. Its gradient is op_relu's bit for bit (the mask x > 0 is relu(x) > 0).
Tensor *op_relu_(Tape *t, Tensor *x);
Tensor *op_silu(Tape *t, Tensor *x);
Tensor *op_gelu(Tape *t, Tensor *x);    // exact: x * 0.5 * (1 + erf(x / sqrt 2))
Tensor *op_sigmoid(Tape *t, Tensor *x);
// Ultralytics inverse_sigmoid: x = clamp(x, 0, 1); log(clamp(x, eps) / clamp(1 - x, eps)),
// eps = 1e-5; gradients as PyTorch's clamp (pass where the bound is not active).
Tensor *op_inverse_sigmoid(Tape *t, Tensor *x);
// Dropout with probability p (inverted scaling 1/(1-p)); identity when !t->training or p == 0
// (then it records nothing and returns x). seed: per-call stream, so runs are reproducible.
Tensor *op_dropout(Tape *t, Tensor *x, float p, uint64_t seed);
// Loss-side unary ops.
Tensor *op_neg(Tape *t, Tensor *x);
Tensor *op_exp(Tape *t, Tensor *x);
Tensor *op_log(Tape *t, Tensor *x);
Tensor *op_abs(Tape *t, Tensor *x);
Tensor *op_pow_scalar(Tape *t, Tensor *x, float exponent);
// clamp(x, lo, hi); pass -INFINITY / INFINITY for a one-sided clamp.
Tensor *op_clamp(Tape *t, Tensor *x, float lo, float hi);
Tensor *op_scale(Tape *t, Tensor *x, float s);        // s * x
Tensor *op_add_scalar(Tape *t, Tensor *x, float s);   // x + s

// ---- binary with broadcasting (ops/binary.c) ----
// NumPy/PyTorch broadcasting of a and b (dims aligned from the right; size 1 broadcasts).
Tensor *op_add(Tape *t, Tensor *a, Tensor *b);
Tensor *op_sub(Tape *t, Tensor *a, Tensor *b);
Tensor *op_mul(Tape *t, Tensor *a, Tensor *b);
Tensor *op_div(Tape *t, Tensor *a, Tensor *b);
Tensor *op_maximum(Tape *t, Tensor *a, Tensor *b); // ties: gradient split half/half, as PyTorch
Tensor *op_minimum(Tape *t, Tensor *a, Tensor *b);
// Binary cross-entropy with logits, elementwise (reduction none), numerically stable:
// max(x,0) - x*y + log(1 + exp(-|x|)). x, y same shape; y may require grad.
Tensor *op_bce_with_logits(Tape *t, Tensor *x, Tensor *y);

// ---- reductions (ops/reduce.c) ----
Tensor *op_sum(Tape *t, Tensor *x);                       // -> scalar
Tensor *op_mean(Tape *t, Tensor *x);                      // -> scalar
Tensor *op_sum_dim(Tape *t, Tensor *x, int dim, bool keepdim);
Tensor *op_mean_dim(Tape *t, Tensor *x, int dim, bool keepdim);

// ---- softmax and norms (ops/softmax.c, ops/norm.c) ----
Tensor *op_softmax(Tape *t, Tensor *x, int dim);  // dim must be the last dim (-1)
// LayerNorm over the last dim E. x (..., E), weight/bias (E) or NULL. Edges: x, weight, bias.
Tensor *op_layernorm(Tape *t, Tensor *x, Tensor *weight, Tensor *bias, float eps);

// BatchNorm2d state outside the graph: PyTorch's buffers.
typedef struct BatchNormState {
    Tensor *running_mean;          // (C)
    Tensor *running_var;           // (C), unbiased estimate as PyTorch updates it
    int64_t num_batches_tracked;   // incremented by every training forward
    float momentum;                // Ultralytics sets 0.03
    float eps;                     // Ultralytics sets 1e-3
} BatchNormState;
// x (B,C,H,W), weight/bias (C). t->training: normalise with the batch statistics (biased
// variance), update running stats with the unbiased one; else use the running stats.
// Edges: x, weight, bias.
Tensor *op_batchnorm2d(Tape *t, Tensor *x, Tensor *weight, Tensor *bias, BatchNormState *st);
// op_batchnorm2d followed by ReLU or SiLU (BnAct) in one op: act(batchnorm2d(x)), with the
// unfused pair's values and gradients bit for bit (test_ops_norm). One pass over the map
// forward instead of two, and the backward forms the activation's gradient on the fly instead
// of reading and writing it: nn.Conv's BatchNorm and activation (trainer/nn/module.c).
Tensor *op_batchnorm2d_act(Tape *t, Tensor *x, Tensor *weight, Tensor *bias, BatchNormState *st,
                           BnAct act);

// ---- convolution, pooling, padding, resampling (ops/conv.c, ops/pool.c, ops/resample.c) ----
// x (B,C,H,W), w (OC, C/groups, KH, KW), bias (OC) or NULL -> (B,OC,OH,OW). Edges: x, w, bias.
Tensor *op_conv2d(Tape *t, Tensor *x, Tensor *w, Tensor *bias, Conv2dParams p);
// nn.MaxPool2d semantics incl. ceil_mode (a window that starts in the right/bottom padding is
// dropped) and implicit -inf padding. Gradient to the first max in the window (row-major).
Tensor *op_maxpool2d(Tape *t, Tensor *x, Pool2dParams p);
// F.pad(x, [left, right, top, bottom]) with zeros on the last two dims of a 4-d tensor.
Tensor *op_pad2d(Tape *t, Tensor *x, int left, int right, int top, int bottom);
// nn.Upsample(scale_factor=s, mode='nearest'), integer s: (B,C,H,W) -> (B,C,sH,sW).
Tensor *op_upsample_nearest2d(Tape *t, Tensor *x, int scale);

// ---- linear algebra and attention (ops/linear.c, ops/attention.c, ops/deform_attn.c) ----
// x (..., IN), w (OUT, IN), bias (OUT) or NULL -> (..., OUT). Edges: bias, x, w (addmm's).
Tensor *op_linear(Tape *t, Tensor *x, Tensor *w, Tensor *bias);
// a (M,K) @ b (K,N) -> (M,N).
Tensor *op_matmul(Tape *t, Tensor *a, Tensor *b);
// a (Bt,M,K) @ b (Bt,K,N) -> (Bt,M,N).
Tensor *op_bmm(Tape *t, Tensor *a, Tensor *b);
// nn.MultiheadAttention's F.multi_head_attention_forward, batch-first tensors, dropout 0,
// up to and excluding out_proj (call op_linear with out_proj after it). query (B,Lq,E),
// key (B,Lk,E), value (B,Lk,E), in_proj_weight (3E,E), in_proj_bias (3E) ->
// (B,Lq,E), the heads concatenated. attn_mask: NULL or (Lq,Lk) bytes, nonzero = blocked
// (PyTorch's boolean mask: -inf before softmax). Edges: query, key, value, in_proj_bias,
// in_proj_weight (PyTorch chunks the bias after the weight, so the bias is freed first).
Tensor *op_mha_core(Tape *t, Tensor *query, Tensor *key, Tensor *value, Tensor *in_proj_weight,
                    Tensor *in_proj_bias, int n_heads, const uint8_t *attn_mask);
// Ultralytics multi_scale_deformable_attn_pytorch: value (B,N,NH,D) holding the L levels
// concatenated (level l has shapes[2l] x shapes[2l+1] = H_l x W_l tokens, row-major),
// sampling_locations (B,Lq,NH,L,P,2) in [0,1] as (x,y), attention_weights (B,Lq,NH,L,P)
// -> (B,Lq,NH*D). Bilinear sampling exactly like grid_sample(align_corners=False,
// padding_mode='zeros') at grid = 2*loc - 1. Edges: value, sampling_locations, attention_weights.
Tensor *op_msdeform_attn(Tape *t, Tensor *value, const int64_t *shapes, int n_levels,
                         Tensor *sampling_locations, Tensor *attention_weights);
// grid_sample(x, grid, bilinear, zeros, align_corners=False) on its own, for tests and tools:
// x (B,C,H,W), grid (B,Ho,Wo,2) in [-1,1] as (x,y) -> (B,C,Ho,Wo). Edges: x, grid.
Tensor *op_grid_sample(Tape *t, Tensor *x, Tensor *grid);

// ---- layout and indexing (ops/layout.c, ops/index.c) ----
// Same data, new shape (numel must match; one entry may be -1).
Tensor *op_reshape(Tape *t, Tensor *x, int ndim, const int64_t *shape);
// out.shape[i] = x.shape[perm[i]], materialised.
Tensor *op_permute(Tape *t, Tensor *x, const int *perm);
Tensor *op_transpose(Tape *t, Tensor *x, int d0, int d1);
// Concatenation along dim; all other dims equal. Edges: xs in order.
Tensor *op_concat(Tape *t, Tensor *const *xs, int n, int dim);
// Splits along dim into n pieces of sizes[i] (summing to x.shape[dim]); writes outs[0..n-1].
// One node with n outputs, as PyTorch's split.
void op_split(Tape *t, Tensor *x, int dim, const int64_t *sizes, int n, Tensor **outs);
// x[..., start:end, ...] along dim, materialised.
Tensor *op_slice(Tape *t, Tensor *x, int dim, int64_t start, int64_t end);
// torch.index_select(x, dim, idx): idx (n) in [0, x.shape[dim]).
Tensor *op_index_select(Tape *t, Tensor *x, int dim, const int64_t *idx, int64_t n);
// Top-k selection: x (B,N,C), idx (B,K) per batch row -> (B,K,C); out[b,k] = x[b, idx[b,k]].
Tensor *op_gather_rows(Tape *t, Tensor *x, const int64_t *idx, int64_t k);
// nn.Embedding: weight (V,E), idx (n) in [0,V) -> (n,E). Edges: weight.
Tensor *op_embedding(Tape *t, Tensor *weight, const int64_t *idx, int64_t n);
// x.detach(): requires no grad, no grad_fn; a copy of x's data (layout.c says why).
Tensor *op_detach(Tape *t, Tensor *x);

#endif
