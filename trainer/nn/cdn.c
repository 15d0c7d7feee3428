/* cdn.c -- get_cdn_group (Ultralytics 8.1.34 models/utils/ops.py; rtdetr.md §3): noisy
 * copies of the batch's ground truth as denoising queries, their slot layout, attention mask
 * and dn_meta, and the head hook that runs it. Box arithmetic is float32 in torch's order. */
#include "trainer/nn/cdn.h"

#include <math.h>

#include "kernels/base.h" // CHECK
#include "trainer/ops/ops.h"

CdnConfig cdn_config_default(void) {
    return (CdnConfig){.num_dn = 100, .cls_noise_ratio = 0.5f, .box_noise_scale = 1.0f};
}

// torch.logit(x, eps): log(z / (1 - z)) with z = clamp(x, eps, 1 - eps).
static float logit_eps(float x, float eps) {
    float z = fminf(fmaxf(x, eps), 1.0f - eps);
    return logf(z / (1.0f - z));
}

// Label noise, then box noise, on the 2GN copies (rows copy-major), in place.
static void add_noise(const CdnConfig *cfg, int64_t n_rows, int64_t n_pos_rows, int nc, Rng *rng,
                      int32_t *cls, float *box) {
    if (cfg->cls_noise_ratio > 0) {
        // torch.rand(dn_cls.shape) < ratio * 0.5, then one randint per replaced entry, in order.
        uint8_t *replace = xmalloc((size_t)n_rows);
        for (int64_t r = 0; r < n_rows; r++)
            replace[r] = rng_uniform(rng) < cfg->cls_noise_ratio * 0.5f;
        for (int64_t r = 0; r < n_rows; r++)
            if (replace[r]) cls[r] = (int32_t)rng_below(rng, (uint64_t)nc);
        free(replace);
    }
    if (cfg->box_noise_scale > 0) {
        float *sign = xmalloc(sizeof(float) * 4 * (size_t)n_rows);
        for (int64_t i = 0; i < 4 * n_rows; i++)
            sign[i] = (float)rng_below(rng, 2) * 2.0f - 1.0f;
        for (int64_t r = 0; r < n_rows; r++) {
            float *b = box + 4 * r;
            float dw = b[2] / 2, dh = b[3] / 2; // xywh2xyxy
            float xyxy[4] = {b[0] - dw, b[1] - dh, b[0] + dw, b[1] + dh};
            float diff[4] = {b[2] * 0.5f * cfg->box_noise_scale, b[3] * 0.5f * cfg->box_noise_scale,
                             b[2] * 0.5f * cfg->box_noise_scale,
                             b[3] * 0.5f * cfg->box_noise_scale};
            for (int k = 0; k < 4; k++) {
                // rand_part in [0, 1) for positives, [1, 2) for negatives, times the sign
                float part = rng_uniform(rng);
                if (r >= n_pos_rows) part += 1.0f;
                part *= sign[4 * r + k];
                xyxy[k] = fminf(fmaxf(xyxy[k] + part * diff[k], 0.0f), 1.0f);
            }
            b[0] = (xyxy[0] + xyxy[2]) / 2; // xyxy2xywh
            b[1] = (xyxy[1] + xyxy[3]) / 2;
            b[2] = xyxy[2] - xyxy[0];
            b[3] = xyxy[3] - xyxy[1];
            // torch.logit(eps 1e-6); Ultralytics leaves the boxes raw when it adds no box noise
            for (int k = 0; k < 4; k++)
                b[k] = logit_eps(b[k], 1e-6f);
        }
        free(sign);
    }
}

// attn_mask: matching rows (>= Ndn) see no dn slot; dn rows of mask group g (slots
// [2 max_gt g, 2 max_gt (g+1))) see no other group's slots; everything else is visible.
static void fill_mask(uint8_t *mask, int64_t n_dn, int64_t nq, int64_t max_gt) {
    int64_t tgt = n_dn + nq, group = 2 * max_gt;
    for (int64_t r = 0; r < tgt; r++)
        for (int64_t c = 0; c < tgt; c++)
            mask[r * tgt + c] = c < n_dn && (r >= n_dn || r / group != c / group);
}

bool cdn_get_group(Tape *t, const CdnConfig *cfg, const Targets *tg, Tensor *class_embed, int nc,
                   int nq, Rng *rng, CdnGroup *g, RtdetrDn *out) {
    memset(g, 0, sizeof *g);
    if (!t->training || cfg->num_dn <= 0) return false;
    int64_t b = tg->n_images, n = tg->n_boxes, max_gt = 0, total = 0;
    for (int64_t i = 0; i < b; i++) {
        CHECK(tg->counts[i] >= 0, "cdn: image %lld has %d boxes", (long long)i, tg->counts[i]);
        max_gt = MAX(max_gt, (int64_t)tg->counts[i]);
        total += tg->counts[i];
    }
    CHECK(total == n, "cdn: counts sum to %lld, n_boxes is %lld", (long long)total, (long long)n);
    if (max_gt == 0) return false;
    CHECK(class_embed->ndim == 2 && class_embed->shape[0] == nc, "cdn: class_embed must be (K,hd)");
    for (int64_t i = 0; i < n; i++)
        CHECK(tg->cls[i] >= 0 && tg->cls[i] < nc, "cdn: box %lld has class %d, K is %d",
              (long long)i, tg->cls[i], nc);

    int64_t groups = MAX(cfg->num_dn / max_gt, (int64_t)1), rows = 2 * groups * n;
    int64_t n_dn = 2 * groups * max_gt, hd = class_embed->shape[1];
    *g = (CdnGroup){.n_images = b,
                    .n_boxes = n,
                    .max_gt = max_gt,
                    .n_groups = groups,
                    .n_dn = n_dn,
                    .n_queries = nq};

    // Tile copy-major: row r is GT r mod N.
    g->cls = tape_alloc(t, sizeof(int32_t) * (size_t)rows);
    g->box_logits = tape_alloc(t, sizeof(float) * 4 * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        g->cls[r] = tg->cls[r % n];
        memcpy(g->box_logits + 4 * r, tg->bboxes + 4 * (r % n), 4 * sizeof(float));
    }
    add_noise(cfg, rows, groups * n, nc, rng, g->cls, g->box_logits);

    // Slots: image of each GT, its local index j, then row r -> slot (copy * max_gt + j).
    int64_t *image = xmalloc(sizeof(int64_t) * (size_t)n),
            *local = xmalloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0, k = 0; i < b; i++)
        for (int64_t j = 0; j < tg->counts[i]; j++, k++)
            image[k] = i, local[k] = j;
    // source[b*Ndn + s]: the row embedded at slot s of image b, or `rows` for an unused slot
    int64_t *source = tape_alloc(t, sizeof(int64_t) * (size_t)(b * n_dn));
    for (int64_t i = 0; i < b * n_dn; i++)
        source[i] = rows;
    // The boxes are placed on the host, then uploaded.
    Tensor *box = tensor_new(t->arena, 3, (int64_t[]){b, n_dn, 4});
    float *host_box = tape_alloc(t, sizeof(float) * 4 * (size_t)MAX(b * n_dn, 1));
    memset(host_box, 0, sizeof(float) * 4 * (size_t)(b * n_dn));
    for (int64_t r = 0; r < rows; r++) {
        int64_t at = image[r % n] * n_dn + (r / n) * max_gt + local[r % n];
        source[at] = r;
        memcpy(host_box + 4 * at, g->box_logits + 4 * r, 4 * sizeof(float));
    }
    tensor_write(box, host_box);

    // dn_pos_idx: per image, the positive slots group-major.
    g->pos_start = tape_alloc(t, sizeof(int64_t) * (size_t)(b + 1));
    g->pos_idx = tape_alloc(t, sizeof(int64_t) * (size_t)(groups * n));
    int64_t k = 0;
    for (int64_t i = 0; i < b; i++) {
        g->pos_start[i] = k;
        for (int64_t c = 0; c < groups; c++)
            for (int64_t j = 0; j < tg->counts[i]; j++)
                g->pos_idx[k++] = c * max_gt + j;
    }
    g->pos_start[b] = k;
    free(image);
    free(local);

    g->attn_mask = tape_alloc(t, (size_t)((n_dn + nq) * (n_dn + nq)));
    fill_mask(g->attn_mask, n_dn, nq, max_gt);

    // class_embed[dn_cls] scattered into zeros: the lookup, then a row gather from the
    // looked-up rows plus one constant zero row, so unused slots get zeros and no gradient.
    int64_t *cls64 = tape_alloc(t, sizeof(int64_t) * (size_t)rows);
    for (int64_t r = 0; r < rows; r++)
        cls64[r] = g->cls[r];
    Tensor *looked_up = op_embedding(t, class_embed, cls64, rows);
    Tensor *zero_row = tensor_zeros(t->arena, 2, (int64_t[]){1, hd});
    Tensor *with_zero = op_concat(t, (Tensor *[]){looked_up, zero_row}, 2, 0);
    Tensor *slots = op_index_select(t, with_zero, 0, source, b * n_dn);
    out->embed = op_reshape(t, slots, 3, (int64_t[]){b, n_dn, hd});
    out->bbox_logits = box;
    out->attn_mask = g->attn_mask;
    return true;
}

static bool hook_fn(void *user, Tape *t, Tensor *class_embed, int nc, int nq, RtdetrDn *out) {
    CdnHook *h = user;
    Rng rng;
    rng_init(&rng, h->seed);
    h->active = cdn_get_group(t, &h->cfg, h->tg, class_embed, nc, nq, &rng, &h->group, out);
    return h->active;
}

RtdetrDnHook cdn_hook(CdnHook *h) {
    h->active = false;
    memset(&h->group, 0, sizeof h->group);
    return (RtdetrDnHook){hook_fn, h};
}
