/* decoder.c -- MLP, MSDeformAttn and DeformableTransformerDecoderLayer
 * (ultralytics/nn/modules/transformer.py). The decoder loop over layers, with its box
 * refinement, is in head.c next to the heads it uses. */
#include "trainer/nn/blocks.h"

#include <math.h>

#include "kernels/base.h" // CHECK

// ---- MLP(input_dim, hidden_dim, output_dim, num_layers) ----
void mlp_init(Mlp *m, Registry *r, const char *name, int in, int hidden, int out, int n_layers) {
    CHECK(n_layers >= 1 && n_layers <= MLP_MAX_LAYERS, "MLP with %d layers", n_layers);
    m->n = n_layers;
    registry_push(r, "%s", name);
    registry_push(r, "layers");
    for (int j = 0; j < n_layers; j++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", j);
        linear_init(&m->layers[j], r, idx, j == 0 ? in : hidden, j == n_layers - 1 ? out : hidden);
    }
    registry_pop(r);
    registry_pop(r);
}

Tensor *mlp_forward(const Mlp *m, Tape *t, Tensor *x) {
    for (int j = 0; j < m->n; j++) {
        x = linear_forward(&m->layers[j], t, x);
        if (j < m->n - 1) x = op_relu_(t, x);
    }
    return x;
}

// ---- MSDeformAttn(d_model, n_levels, n_heads, n_points) ----
static void msdeform_init(MsDeformAttn *a, Registry *r, int d_model, int n_levels, int n_heads,
                          int n_points) {
    CHECK(d_model % n_heads == 0, "MSDeformAttn: d_model %d not divisible by %d heads", d_model,
          n_heads);
    a->d_model = d_model;
    a->n_levels = n_levels;
    a->n_heads = n_heads;
    a->n_points = n_points;
    int hlp = n_heads * n_levels * n_points;
    registry_push(r, "cross_attn");
    linear_init(&a->sampling_offsets, r, "sampling_offsets", d_model, hlp * 2);
    linear_init(&a->attention_weights, r, "attention_weights", d_model, hlp);
    linear_init(&a->value_proj, r, "value_proj", d_model, d_model);
    linear_init(&a->output_proj, r, "output_proj", d_model, d_model);
    registry_pop(r);

    // _reset_parameters: offsets start on a ring of directions, one per head, (cos, sin) of
    // 2*pi*h/NH scaled so that the larger coordinate is +-1, times (p + 1) for point p; the
    // same for every level. Bias layout (NH, L, P, 2).
    init_fill(a->sampling_offsets.w, 0.0f);
    float *bias = xmalloc(sizeof(float) * (size_t)a->sampling_offsets.b->n); // host, uploaded
    for (int h = 0; h < n_heads; h++) {
        float theta = (float)h * (float)(2.0 * M_PI / n_heads);
        float gx = cosf(theta), gy = sinf(theta);
        float m = fmaxf(fabsf(gx), fabsf(gy));
        for (int l = 0; l < n_levels; l++)
            for (int p = 0; p < n_points; p++) {
                float *g = bias + (((int64_t)h * n_levels + l) * n_points + p) * 2;
                g[0] = gx / m * (float)(p + 1);
                g[1] = gy / m * (float)(p + 1);
            }
    }
    tensor_write(a->sampling_offsets.b, bias);
    free(bias);
    init_fill(a->attention_weights.w, 0.0f);
    init_fill(a->attention_weights.b, 0.0f);
    init_xavier_uniform(a->value_proj.w, r->rng);
    init_fill(a->value_proj.b, 0.0f);
    init_xavier_uniform(a->output_proj.w, r->rng);
    init_fill(a->output_proj.b, 0.0f);
}

// query (B,Q,hd), ref (B,Q,4) sigmoid cxcywh -> (B,Q,hd). The value is projected here, once
// per layer, as in the PyTorch code (each layer has its own value_proj).
static Tensor *msdeform_forward(const MsDeformAttn *a, Tape *t, Tensor *query, Tensor *ref,
                                const DecoderValue *v) {
    int64_t b = query->shape[0], q = query->shape[1], n = v->feats->shape[1];
    int64_t nh = a->n_heads, nl = a->n_levels, np = a->n_points, d = a->d_model / a->n_heads;
    CHECK(v->n_levels == nl, "MSDeformAttn: %d value levels, built for %lld", v->n_levels,
          (long long)nl);

    Tensor *value = linear_forward(&a->value_proj, t, v->feats);
    value = op_reshape(t, value, 4, (int64_t[]){b, n, nh, d});
    Tensor *off = linear_forward(&a->sampling_offsets, t, query);
    off = op_reshape(t, off, 6, (int64_t[]){b, q, nh, nl, np, 2});
    Tensor *aw = linear_forward(&a->attention_weights, t, query);
    aw = op_reshape(t, aw, 4, (int64_t[]){b, q, nh, nl * np});
    aw = op_softmax(t, aw, -1);
    aw = op_reshape(t, aw, 5, (int64_t[]){b, q, nh, nl, np});

    // loc = ref.xy + offsets / P * ref.wh * 0.5, ref broadcast as (B,Q,1,1,1,2)
    Tensor *p = tensor_new(t->arena, 1, (int64_t[]){1});
    tensor_write(p, &(float){(float)np});
    const int64_t bcast[6] = {b, q, 1, 1, 1, 2};
    Tensor *add = op_div(t, off, p);
    Tensor *wh = op_reshape(t, op_slice(t, ref, 2, 2, 4), 6, bcast);
    add = op_scale(t, op_mul(t, add, wh), 0.5f);
    Tensor *xy = op_reshape(t, op_slice(t, ref, 2, 0, 2), 6, bcast);
    Tensor *loc = op_add(t, xy, add);

    Tensor *out = op_msdeform_attn(t, value, v->shapes, (int)nl, loc, aw);
    return linear_forward(&a->output_proj, t, out);
}

// ---- DeformableTransformerDecoderLayer(d_model, n_heads, d_ffn, dropout 0, ReLU, L, P) ----
void decoder_layer_init(DecoderLayer *l, Registry *r, const char *name, int d_model, int n_heads,
                        int d_ffn, int n_levels, int n_points) {
    registry_push(r, "%s", name);
    mha_init(&l->self_attn, r, "self_attn", d_model, n_heads);
    layernorm_init(&l->norm1, r, "norm1", d_model);
    msdeform_init(&l->cross_attn, r, d_model, n_levels, n_heads, n_points);
    layernorm_init(&l->norm2, r, "norm2", d_model);
    linear_init(&l->linear1, r, "linear1", d_model, d_ffn);
    linear_init(&l->linear2, r, "linear2", d_ffn, d_model);
    layernorm_init(&l->norm3, r, "norm3", d_model);
    registry_pop(r);
}

// The dropouts (p = 0) are the identity and record nothing, as in ATen. What the layer makes
// but its output is dropped at its end where an op can recompute it (tape_drop_since: the
// sums, norms and sampling locations; rtdetr.c says why).
Tensor *decoder_layer_forward(DecoderLayer *l, Tape *t, Tensor *embed, Tensor *ref,
                              const DecoderValue *v, const uint8_t *attn_mask, Tensor *query_pos) {
    const int64_t first_node = t->n_nodes;
    // self attention: q = k = embed + query_pos, v = embed
    Tensor *q = op_add(t, embed, query_pos);
    Tensor *tgt = mha_forward(&l->self_attn, t, q, q, embed, attn_mask);
    embed = layernorm_forward(&l->norm1, t, op_add(t, embed, tgt));

    // cross attention over the multi-level features
    tgt = msdeform_forward(&l->cross_attn, t, op_add(t, embed, query_pos), ref, v);
    embed = layernorm_forward(&l->norm2, t, op_add(t, embed, tgt));

    // FFN
    tgt = linear_forward(&l->linear2, t, op_relu_(t, linear_forward(&l->linear1, t, embed)));
    Tensor *out = layernorm_forward(&l->norm3, t, op_add(t, embed, tgt));
    tape_drop_since(t, first_node, out);
    return out;
}
