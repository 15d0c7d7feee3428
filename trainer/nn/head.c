/* head.c -- RTDETRDecoder (ultralytics/nn/modules/head.py) and its decoder loop
 * (DeformableTransformerDecoder, transformer.py): input projection, anchors and their valid
 * mask, encoder-side scoring and top-k query selection, then ndl decoder layers with
 * iterative box refinement ("look forward twice" in training). Denoising queries come from
 * the caller's hook (rtdetr.h); the loss is elsewhere. */
#include "trainer/nn/rtdetr.h"

#include <math.h>

#include "kernels/base.h" // CHECK

// ---- construction ----
void head_init(RtdetrHead *h, Registry *r, const DecoderArgs *a) {
    h->a = *a;
    int hd = a->hd, nc = a->nc, ndl = a->ndl;
    char idx[16];

    h->input_proj = registry_alloc(r, sizeof(Conv) * (size_t)a->nl);
    registry_push(r, "input_proj");
    for (int l = 0; l < a->nl; l++) {
        snprintf(idx, sizeof idx, "%d", l);
        ConvShape s = {.c1 = a->ch[l], .c2 = hd, .k = 1, .s = 1, .pad = 0, .g = 1, .d = 1};
        conv_init_named(&h->input_proj[l], r, idx, "0", "1", s, ACT_NONE);
    }
    registry_pop(r);

    // _get_clones deep-copies one constructed layer: every layer starts with its weights.
    h->layers = registry_alloc(r, sizeof(DecoderLayer) * (size_t)ndl);
    registry_push(r, "decoder");
    registry_push(r, "layers");
    int first = r->n_params, per_layer = 0;
    for (int j = 0; j < ndl; j++) {
        snprintf(idx, sizeof idx, "%d", j);
        int start = r->n_params;
        decoder_layer_init(&h->layers[j], r, idx, hd, a->nh, a->d_ffn, a->nl, a->ndp);
        if (j == 0) per_layer = r->n_params - start;
        for (int k = 0; j > 0 && k < per_layer; k++) {
            tensor_copy(r->params[start + k], r->params[first + k]);
        }
    }
    registry_pop(r);
    registry_pop(r);

    embedding_init(&h->dn_class_embed, r, "denoising_class_embed", nc, hd);
    if (a->learnt_init_query) embedding_init(&h->tgt_embed, r, "tgt_embed", a->nq, hd);
    mlp_init(&h->query_pos_head, r, "query_pos_head", 4, 2 * hd, hd, 2);
    registry_push(r, "enc_output");
    linear_init(&h->enc_output, r, "0", hd, hd);
    layernorm_init(&h->enc_output_norm, r, "1", hd);
    registry_pop(r);
    linear_init(&h->enc_score_head, r, "enc_score_head", hd, nc);
    mlp_init(&h->enc_bbox_head, r, "enc_bbox_head", hd, hd, 4, 3);
    h->dec_score_head = registry_alloc(r, sizeof(Linear) * (size_t)ndl);
    h->dec_bbox_head = registry_alloc(r, sizeof(Mlp) * (size_t)ndl);
    registry_push(r, "dec_score_head");
    for (int j = 0; j < ndl; j++) {
        snprintf(idx, sizeof idx, "%d", j);
        linear_init(&h->dec_score_head[j], r, idx, hd, nc);
    }
    registry_pop(r);
    registry_push(r, "dec_bbox_head");
    for (int j = 0; j < ndl; j++) {
        snprintf(idx, sizeof idx, "%d", j);
        mlp_init(&h->dec_bbox_head[j], r, idx, hd, hd, 4, 3);
    }
    registry_pop(r);

    // _reset_parameters. bias_init_with_prob(0.01) / 80 * nc, in double as Python computes it.
    float bias_cls = (float)(-log((1.0 - 0.01) / 0.01) / 80.0 * nc);
    init_fill(h->enc_score_head.b, bias_cls);
    init_fill(h->enc_bbox_head.layers[2].w, 0.0f);
    init_fill(h->enc_bbox_head.layers[2].b, 0.0f);
    for (int j = 0; j < ndl; j++) {
        init_fill(h->dec_score_head[j].b, bias_cls);
        init_fill(h->dec_bbox_head[j].layers[2].w, 0.0f);
        init_fill(h->dec_bbox_head[j].layers[2].b, 0.0f);
    }
    // Ultralytics' linear_init bounds by 1/sqrt(out_features), then the weight is xavier'ed.
    float bound = (float)(1.0 / sqrt((double)hd));
    init_uniform(h->enc_output.w, r->rng, -bound, bound);
    init_uniform(h->enc_output.b, r->rng, -bound, bound);
    init_xavier_uniform(h->enc_output.w, r->rng);
    if (a->learnt_init_query) init_xavier_uniform(h->tgt_embed.w, r->rng);
    init_xavier_uniform(h->query_pos_head.layers[0].w, r->rng);
    init_xavier_uniform(h->query_pos_head.layers[1].w, r->rng);
    for (int l = 0; l < a->nl; l++)
        init_xavier_uniform(h->input_proj[l].w, r->rng);
}

// ---- anchors and query selection (no gradient: plain functions) ----

// _generate_anchors(shapes, grid_size 0.05, eps 0.01): level i, cell (y, x) of (h, w) gives
// the cxcywh box ((x+0.5)/w, (y+0.5)/h, 0.05*2^i, 0.05*2^i), row-major, levels concatenated.
// anchors (N,4), host: their logits, +inf where any coordinate is outside (0.01, 0.99);
// valid (N), host: 1 or 0 accordingly.
static void make_anchors(const int64_t *shapes, int nl, float *anchors, float *valid) {
    int64_t k = 0;
    for (int l = 0; l < nl; l++) {
        int64_t h = shapes[2 * l], w = shapes[2 * l + 1];
        float size = 0.05f * (float)(1 << l);
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++, k++) {
                float box[4] = {((float)x + 0.5f) / (float)w, ((float)y + 0.5f) / (float)h, size,
                                size};
                bool ok = true;
                for (int j = 0; j < 4; j++)
                    ok = ok && box[j] > 0.01f && box[j] < 0.99f;
                for (int j = 0; j < 4; j++)
                    anchors[k * 4 + j] = ok ? logf(box[j] / (1.0f - box[j])) : INFINITY;
                valid[k] = ok ? 1.0f : 0.0f;
            }
    }
}

typedef struct Scored {
    float v;
    int64_t i;
} Scored;

// Descending by value (NaN first, as torch.topk ranks NaN largest), ties by lower index:
// torch.topk leaves the order of equal values unspecified, this makes it deterministic.
static int by_score(const void *pa, const void *pb) {
    const Scored *a = pa, *b = pb;
    bool na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? -1 : 1;
    if (!na && a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

// idx (B,k): per image, the k tokens with the largest max-over-class logit, best first.
// The logits come to the host once (a copy from the device).
static void select_topk(const Tensor *logits_t, int64_t k, int64_t *idx) {
    int64_t b = logits_t->shape[0], n = logits_t->shape[1], c = logits_t->shape[2];
    float *logits = tensor_host_copy(logits_t);
    Scored *s = xmalloc(sizeof(Scored) * (size_t)n);
    for (int64_t bi = 0; bi < b; bi++) {
        for (int64_t i = 0; i < n; i++) {
            const float *row = logits + (bi * n + i) * c;
            float m = row[0];
            for (int64_t j = 1; j < c; j++)
                if (row[j] > m || isnan(row[j])) m = row[j];
            s[i] = (Scored){m, i};
        }
        qsort(s, (size_t)n, sizeof(Scored), by_score);
        for (int64_t j = 0; j < k; j++)
            idx[bi * k + j] = s[j].i;
    }
    free(s);
    free(logits);
}

// torch.stack(xs) of n equal-shaped tensors: (n, ...shape).
static Tensor *stack(Tape *t, Tensor **xs, int n) {
    Tensor **v = tape_alloc(t, sizeof(Tensor *) * (size_t)n);
    for (int i = 0; i < n; i++) {
        int64_t shape[TENSOR_MAX_DIMS];
        CHECK(xs[i]->ndim < TENSOR_MAX_DIMS, "stack: %d-d input", xs[i]->ndim);
        shape[0] = 1;
        for (int d = 0; d < xs[i]->ndim; d++)
            shape[d + 1] = xs[i]->shape[d];
        v[i] = op_reshape(t, xs[i], xs[i]->ndim + 1, shape);
    }
    return op_concat(t, v, n, 0);
}

// DeformableTransformerDecoder.forward. embed (B,Q',hd), refer (B,Q',4) logits.
static void decoder_forward(RtdetrHead *h, Tape *t, Tensor *embed, Tensor *refer,
                            const DecoderValue *v, const uint8_t *attn_mask, RtdetrOutput *out) {
    int ndl = h->a.ndl, eval_idx = h->a.eval_idx < 0 ? ndl + h->a.eval_idx : h->a.eval_idx;
    Tensor **boxes = tape_alloc(t, sizeof(Tensor *) * (size_t)ndl);
    Tensor **logits = tape_alloc(t, sizeof(Tensor *) * (size_t)ndl);
    int n_out = 0;
    Tensor *output = embed, *last = NULL;
    Tensor *ref = op_sigmoid(t, refer);
    for (int i = 0; i < ndl; i++) {
        Tensor *query_pos = mlp_forward(&h->query_pos_head, t, ref);
        output = decoder_layer_forward(&h->layers[i], t, output, ref, v, attn_mask, query_pos);
        Tensor *bbox = mlp_forward(&h->dec_bbox_head[i], t, output);
        Tensor *refined = op_sigmoid(t, op_add(t, bbox, op_inverse_sigmoid(t, ref)));
        if (t->training) {
            logits[n_out] = linear_forward(&h->dec_score_head[i], t, output);
            // Look forward twice: layer i's box also refines the undetached layer i-1 box, so
            // its loss trains dec_bbox_head[i-1] too.
            boxes[n_out++] =
                i == 0 ? refined : op_sigmoid(t, op_add(t, bbox, op_inverse_sigmoid(t, last)));
        } else if (i == eval_idx) {
            logits[n_out] = linear_forward(&h->dec_score_head[i], t, output);
            boxes[n_out++] = refined;
            break;
        }
        last = refined;
        ref = t->training ? op_detach(t, refined) : refined;
    }
    out->dec_bboxes = stack(t, boxes, n_out);
    out->dec_scores = stack(t, logits, n_out);
}

// ---- forward ----
void head_forward(RtdetrHead *h, Tape *t, Tensor *const *xs, const RtdetrDnHook *dn,
                  RtdetrOutput *out) {
    const DecoderArgs *a = &h->a;
    int nl = a->nl;
    int64_t hd = a->hd, nq = a->nq, b = xs[0]->shape[0];
    memset(out, 0, sizeof *out);

    // _get_encoder_input: project every level, then flatten each to (B, h*w, hd) and concat.
    Tensor *proj[LAYER_MAX_FROM], *flat[LAYER_MAX_FROM];
    for (int l = 0; l < nl; l++)
        proj[l] = conv_forward(&h->input_proj[l], t, xs[l]);
    int64_t *shapes = tape_alloc(t, sizeof(int64_t) * 2 * (size_t)nl), n = 0;
    for (int l = 0; l < nl; l++) {
        int64_t hh = proj[l]->shape[2], ww = proj[l]->shape[3];
        flat[l] = op_reshape(t, proj[l], 3, (int64_t[]){b, hd, hh * ww});
        flat[l] = op_permute(t, flat[l], (int[]){0, 2, 1});
        shapes[2 * l] = hh;
        shapes[2 * l + 1] = ww;
        n += hh * ww;
    }
    Tensor *feats = op_concat(t, flat, nl, 1);
    CHECK(n >= nq, "RTDETRDecoder: %lld tokens for %lld queries (image too small)", (long long)n,
          (long long)nq);

    // get_cdn_group's place in the forward.
    RtdetrDn d = {0};
    bool has_dn = dn && dn->fn && dn->fn(dn->user, t, h->dn_class_embed.w, a->nc, a->nq, &d);
    if (has_dn) {
        CHECK(d.embed && d.bbox_logits && d.embed->ndim == 3 && d.embed->shape[0] == b &&
                  d.embed->shape[2] == hd && d.bbox_logits->ndim == 3 &&
                  d.bbox_logits->shape[0] == b && d.bbox_logits->shape[1] == d.embed->shape[1] &&
                  d.bbox_logits->shape[2] == 4,
              "denoising hook: embed must be (B,Ndn,hd) and bbox_logits (B,Ndn,4)");
        out->n_dn = d.embed->shape[1];
    }

    // _get_decoder_input
    // Anchors are made on the host and uploaded; the top-k boxes are picked on the host too.
    float *host_anchors = tape_alloc(t, sizeof(float) * 4 * (size_t)n);
    float *host_valid = tape_alloc(t, sizeof(float) * (size_t)n);
    make_anchors(shapes, nl, host_anchors, host_valid);
    Tensor *valid = tensor_new(t->arena, 3, (int64_t[]){1, n, 1});
    tensor_write(valid, host_valid);
    Tensor *mem = linear_forward(&h->enc_output, t, op_mul(t, valid, feats));
    mem = layernorm_forward(&h->enc_output_norm, t, mem);
    Tensor *enc_logits = linear_forward(&h->enc_score_head, t, mem); // (B,N,K)

    int64_t *idx = tape_alloc(t, sizeof(int64_t) * (size_t)(b * nq)); // lives until backward
    select_topk(enc_logits, nq, idx);
    Tensor *top_feats = op_gather_rows(t, mem, idx, nq); // (B,Q,hd)
    Tensor *top_anchors = tensor_new(t->arena, 3, (int64_t[]){b, nq, 4});
    float *host_top = tape_alloc(t, sizeof(float) * 4 * (size_t)(b * nq));
    for (int64_t i = 0; i < b * nq; i++)
        memcpy(host_top + i * 4, host_anchors + idx[i] * 4, 4 * sizeof(float));
    tensor_write(top_anchors, host_top);

    Tensor *refer = op_add(t, mlp_forward(&h->enc_bbox_head, t, top_feats), top_anchors);
    out->enc_bboxes = op_sigmoid(t, refer);
    if (has_dn) refer = op_concat(t, (Tensor *[]){d.bbox_logits, refer}, 2, 1);
    out->enc_scores = op_gather_rows(t, enc_logits, idx, nq);

    Tensor *embed = top_feats;
    if (a->learnt_init_query) { // tgt_embed.weight repeated over the batch
        int64_t *rows = tape_alloc(t, sizeof(int64_t) * (size_t)(b * nq));
        for (int64_t i = 0; i < b * nq; i++)
            rows[i] = i % nq;
        embed =
            op_reshape(t, op_embedding(t, h->tgt_embed.w, rows, b * nq), 3, (int64_t[]){b, nq, hd});
    }
    if (t->training) {
        refer = op_detach(t, refer);
        if (!a->learnt_init_query) embed = op_detach(t, embed);
    }
    if (has_dn) embed = op_concat(t, (Tensor *[]){d.embed, embed}, 2, 1);

    DecoderValue v = {feats, shapes, nl};
    decoder_forward(h, t, embed, refer, &v, has_dn ? d.attn_mask : NULL, out);
}
