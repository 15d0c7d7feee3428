/* test_cdn.c -- get_cdn_group (trainer/nn/cdn.h) by its structure (rtdetr.md §3): the group
 * count and shapes, the slot layout (copy c, GT j at slot c*max_gt + j, unused slots zero),
 * label noise at its rate, positive and negative box noise in their ranges, the attention
 * mask against Ultralytics' own loop, dn_pos_idx, the gradient reaching the class embedding
 * only from used slots, determinism per seed, and "no denoising" without GT, in eval mode and
 * with num_dn 0. The random draws are ours, so no PyTorch values are compared. */
#include <math.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/nn/cdn.h"
#include "trainer/ops/ops.h"

#define NC 5
#define HD 8

typedef struct Fixture {
    Arena arena;
    Tape t;
    Tensor *embed_w; // (NC,HD) leaf, row k filled with k + column/100
} Fixture;

static void fixture_init(Fixture *f) {
    arena_init(&f->arena, DEV_CPU, 0);
    tape_init(&f->t, &f->arena, 1);
    f->t.training = true;
    f->embed_w = tensor_leaf(&f->arena, 2, (int64_t[]){NC, HD});
    for (int64_t i = 0; i < f->embed_w->n; i++)
        f->embed_w->data[i] = (float)(i / HD) + (float)(i % HD) / 100.0f;
}

static void fixture_free(Fixture *f) {
    tape_free(&f->t);
    arena_free(&f->arena);
}

static float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// Ultralytics' mask loop, verbatim in C (bool, True = blocked).
static void ultralytics_mask(uint8_t *m, int64_t n_dn, int64_t nq, int64_t max_gt, int64_t groups) {
    int64_t tgt = n_dn + nq;
#define FILL(r0, r1, c0, c1)                                                                       \
    for (int64_t r = (r0); r < (r1); r++)                                                          \
        for (int64_t c = (c0); c < (c1); c++)                                                      \
            m[r * tgt + c] = 1;
    memset(m, 0, (size_t)(tgt * tgt));
    FILL(n_dn, tgt, 0, n_dn);
    for (int64_t i = 0; i < groups; i++) {
        int64_t r0 = max_gt * 2 * i, r1 = max_gt * 2 * (i + 1);
        if (i == 0) FILL(r0, r1, max_gt * 2 * (i + 1), n_dn);
        if (i == groups - 1) {
            FILL(r0, r1, 0, max_gt * i * 2);
        } else {
            FILL(r0, r1, max_gt * 2 * (i + 1), n_dn);
            FILL(r0, r1, 0, max_gt * 2 * i);
        }
    }
#undef FILL
}

// Three images with 3, 0 and 1 boxes, away from the borders so negative noise never clips.
static const int counts[3] = {3, 0, 1};
static const int classes[4] = {0, 4, 2, 1};
static const float gt_boxes[16] = {0.5f,  0.5f, 0.2f, 0.3f, 0.45f, 0.55f, 0.1f,  0.1f,
                                   0.55f, 0.5f, 0.3f, 0.2f, 0.5f,  0.45f, 0.25f, 0.15f};

static void test_layout(void) {
    Fixture f;
    fixture_init(&f);
    Targets tg = {
        .n_images = 3, .n_boxes = 4, .cls = classes, .bboxes = gt_boxes, .counts = counts};
    CdnConfig cfg = cdn_config_default();
    EXPECT(cfg.num_dn == 100 && cfg.cls_noise_ratio == 0.5f && cfg.box_noise_scale == 1.0f,
           "defaults");
    Rng rng;
    rng_init(&rng, 42);
    CdnGroup g;
    RtdetrDn out = {0};
    const int nq = 10;
    bool on = cdn_get_group(&f.t, &cfg, &tg, f.embed_w, NC, nq, &rng, &g, &out);
    EXPECT(on, "denoising expected with GT");
    if (!on) return;
    // max_gt 3 -> G = 100 div 3 = 33, Ndn = 2*33*3 = 198, 2GN = 264 rows
    const int64_t G = 33, ndn = 198, rows = 2 * G * 4, b = 3;
    EXPECT(g.max_gt == 3 && g.n_groups == G && g.n_dn == ndn && g.n_queries == nq &&
               g.n_images == 3 && g.n_boxes == 4,
           "G %lld, Ndn %lld", (long long)g.n_groups, (long long)g.n_dn);
    EXPECT(out.embed->ndim == 3 && out.embed->shape[0] == b && out.embed->shape[1] == ndn &&
               out.embed->shape[2] == HD && out.bbox_logits->shape[0] == b &&
               out.bbox_logits->shape[1] == ndn && out.bbox_logits->shape[2] == 4,
           "embed/bbox shapes");
    EXPECT(out.embed->requires_grad && !out.bbox_logits->requires_grad &&
               out.attn_mask == g.attn_mask,
           "embed in the graph, boxes constant");

    // Slots: every row lands at image(r mod N), slot (r div N)*max_gt + j, with its class row
    // and its box; all other slots are zero.
    const int64_t image_of[4] = {0, 0, 0, 2}, local_of[4] = {0, 1, 2, 0};
    uint8_t *used = xcalloc((size_t)(b * ndn), 1);
    int bad_embed = 0, bad_box = 0, changed = 0, bad_pos = 0, bad_neg = 0, crossed = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t gt = r % 4, copy = r / 4, at = image_of[gt] * ndn + copy * 3 + local_of[gt];
        used[at] = 1;
        EXPECT(g.cls[r] >= 0 && g.cls[r] < NC, "class %d", g.cls[r]);
        changed += g.cls[r] != classes[gt];
        for (int k = 0; k < HD; k++)
            bad_embed += out.embed->data[at * HD + k] != f.embed_w->data[g.cls[r] * HD + k];
        for (int k = 0; k < 4; k++)
            bad_box += out.bbox_logits->data[at * 4 + k] != g.box_logits[r * 4 + k];
        // Box noise: corner moves |d| < half size for positives, in [half, 2 half) for negatives.
        const float *gb = gt_boxes + 4 * gt;
        float nb[4];
        for (int k = 0; k < 4; k++)
            nb[k] = sigmoid(g.box_logits[r * 4 + k]);
        // Negatives whose two corners both moved inwards cross over: the width or height
        // is negative and torch.logit clamps it to eps 1e-6. Their corners are not recoverable.
        if (nb[2] < 1e-5f || nb[3] < 1e-5f) {
            crossed++;
            bad_neg += copy < G || (nb[2] < 1e-5f && fabsf(nb[2] - 1e-6f) > 1e-9f) ||
                       (nb[3] < 1e-5f && fabsf(nb[3] - 1e-6f) > 1e-9f);
            continue;
        }
        float want[4] = {gb[0] - gb[2] / 2, gb[1] - gb[3] / 2, gb[0] + gb[2] / 2,
                         gb[1] + gb[3] / 2};
        float got[4] = {nb[0] - nb[2] / 2, nb[1] - nb[3] / 2, nb[0] + nb[2] / 2, nb[1] + nb[3] / 2};
        for (int k = 0; k < 4; k++) {
            float half = (k % 2 ? gb[3] : gb[2]) / 2, d = fabsf(got[k] - want[k]);
            if (copy < G)
                bad_pos += d > half + 1e-5f;
            else
                bad_neg += d < half - 1e-5f || d > 2 * half + 1e-5f;
        }
    }
    EXPECT(bad_embed == 0 && bad_box == 0, "%d embed, %d box values not at their slot", bad_embed,
           bad_box);
    EXPECT(bad_pos == 0 && bad_neg == 0,
           "%d positive, %d negative corners outside their noise range", bad_pos, bad_neg);
    // Inward on both corners of an axis: probability 1/4 per axis, negatives only.
    EXPECT(crossed > rows / 16 && crossed < rows / 3, "%d of %lld rows crossed over", crossed,
           (long long)rows);
    // Replaced with probability 0.25 by a uniform class: changed with probability 0.2.
    EXPECT(changed > rows / 10 && changed < rows * 3 / 10, "%d of %lld classes changed", changed,
           (long long)rows);
    int unused_nonzero = 0, n_unused = 0;
    for (int64_t at = 0; at < b * ndn; at++) {
        if (used[at]) continue;
        n_unused++;
        for (int k = 0; k < HD; k++)
            unused_nonzero += out.embed->data[at * HD + k] != 0.0f;
        for (int k = 0; k < 4; k++)
            unused_nonzero += out.bbox_logits->data[at * 4 + k] != 0.0f;
    }
    EXPECT(n_unused == b * ndn - rows && unused_nonzero == 0, "%d unused slots, %d nonzero values",
           n_unused, unused_nonzero);

    // dn_pos_idx: image 0 -> c*3 + j (c < 33, j < 3), image 1 none, image 2 -> c*3.
    EXPECT(g.pos_start[0] == 0 && g.pos_start[1] == G * 3 && g.pos_start[2] == G * 3 &&
               g.pos_start[3] == G * 4,
           "pos_start");
    int bad_idx = 0;
    for (int64_t c = 0; c < G; c++) {
        for (int64_t j = 0; j < 3; j++)
            bad_idx += g.pos_idx[c * 3 + j] != c * 3 + j;
        bad_idx += g.pos_idx[G * 3 + c] != c * 3;
    }
    EXPECT(bad_idx == 0, "%d dn_pos_idx entries wrong", bad_idx);

    // The mask equals Ultralytics' loop.
    int64_t tgt = ndn + nq;
    uint8_t *want = xmalloc((size_t)(tgt * tgt));
    ultralytics_mask(want, ndn, nq, 3, G);
    int64_t bad_mask = 0;
    for (int64_t i = 0; i < tgt * tgt; i++)
        bad_mask += (g.attn_mask[i] != 0) != (want[i] != 0);
    EXPECT(bad_mask == 0, "%lld mask entries differ from Ultralytics'", (long long)bad_mask);
    EXPECT(g.attn_mask[0 * tgt + 5] == 0 && g.attn_mask[0 * tgt + 6] == 1 &&
               g.attn_mask[6 * tgt + 5] == 1 && g.attn_mask[0 * tgt + ndn] == 0 &&
               g.attn_mask[ndn * tgt + 0] == 1 && g.attn_mask[ndn * tgt + ndn + 1] == 0,
           "mask spot checks");

    // Gradient of sum(embed * w): class row k gets the w rows of the used slots of class k.
    Tensor *w = tensor_like(&f.arena, out.embed);
    for (int64_t i = 0; i < w->n; i++)
        w->data[i] = (float)(i % 13) - 6.0f;
    Tensor *loss = op_sum(&f.t, op_mul(&f.t, out.embed, w));
    EXPECT(tape_backward(&f.t, loss, NULL) == 0, "backward");
    double *expect_grad = xcalloc(NC * HD, sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        int64_t gt = r % 4, at = image_of[gt] * ndn + (r / 4) * 3 + local_of[gt];
        for (int k = 0; k < HD; k++)
            expect_grad[g.cls[r] * HD + k] += w->data[at * HD + k];
    }
    int bad_grad = 0;
    for (int i = 0; i < NC * HD; i++)
        bad_grad += !f.embed_w->grad_defined || f.embed_w->grad[i] != (float)expect_grad[i];
    EXPECT(bad_grad == 0, "%d class-embedding gradient entries wrong", bad_grad);
    free(expect_grad);
    free(want);
    free(used);
    fixture_free(&f);
}

// max_gt > num_dn: one group, whose dn rows see every dn slot; same seed, same noise.
static void test_one_group_and_seed(void) {
    Fixture f;
    fixture_init(&f);
    int c1[1] = {3};
    Targets tg = {.n_images = 1, .n_boxes = 3, .cls = classes, .bboxes = gt_boxes, .counts = c1};
    CdnConfig cfg = cdn_config_default();
    cfg.num_dn = 2;
    Rng rng;
    rng_init(&rng, 5);
    CdnGroup g, g2, g3;
    RtdetrDn out = {0}, out2 = {0}, out3 = {0};
    EXPECT(cdn_get_group(&f.t, &cfg, &tg, f.embed_w, NC, 4, &rng, &g, &out), "dn expected");
    EXPECT(g.n_groups == 1 && g.n_dn == 6, "G %lld Ndn %lld", (long long)g.n_groups,
           (long long)g.n_dn);
    int64_t tgt = 10;
    int blocked_dn = 0;
    for (int64_t r = 0; r < 6; r++)
        for (int64_t c = 0; c < tgt; c++)
            blocked_dn += g.attn_mask[r * tgt + c];
    EXPECT(blocked_dn == 0, "one group: %d blocked entries in dn rows", blocked_dn);

    rng_init(&rng, 5);
    cdn_get_group(&f.t, &cfg, &tg, f.embed_w, NC, 4, &rng, &g2, &out2);
    rng_init(&rng, 6);
    cdn_get_group(&f.t, &cfg, &tg, f.embed_w, NC, 4, &rng, &g3, &out3);
    EXPECT(memcmp(g.box_logits, g2.box_logits, sizeof(float) * 4 * 6) == 0 &&
               memcmp(g.cls, g2.cls, sizeof(int32_t) * 6) == 0,
           "same seed, different noise");
    EXPECT(memcmp(g.box_logits, g3.box_logits, sizeof(float) * 4 * 6) != 0, "seeds 5 and 6 agree");

    // No box noise: Ultralytics keeps the raw boxes (no logit); no label noise: the classes.
    cfg.box_noise_scale = 0;
    cfg.cls_noise_ratio = 0;
    cdn_get_group(&f.t, &cfg, &tg, f.embed_w, NC, 4, &rng, &g3, &out3);
    EXPECT(memcmp(g3.box_logits, gt_boxes, sizeof(float) * 12) == 0 &&
               memcmp(g3.box_logits + 12, gt_boxes, sizeof(float) * 12) == 0 && g3.cls[0] == 0 &&
               g3.cls[1] == 4 && g3.cls[5] == 2,
           "noise-free copies");
    fixture_free(&f);
}

static void test_no_denoising(void) {
    Fixture f;
    fixture_init(&f);
    int empty[2] = {0, 0}, one[1] = {1};
    Targets none = {.n_images = 2, .n_boxes = 0, .cls = NULL, .bboxes = NULL, .counts = empty};
    Targets some = {.n_images = 1, .n_boxes = 1, .cls = classes, .bboxes = gt_boxes, .counts = one};
    CdnConfig cfg = cdn_config_default();
    Rng rng;
    rng_init(&rng, 1);
    CdnGroup g;
    RtdetrDn out = {0};
    uint64_t nodes = (uint64_t)f.t.n_nodes;
    EXPECT(!cdn_get_group(&f.t, &cfg, &none, f.embed_w, NC, 4, &rng, &g, &out) &&
               out.embed == NULL && g.n_dn == 0,
           "no GT: no denoising");
    f.t.training = false;
    EXPECT(!cdn_get_group(&f.t, &cfg, &some, f.embed_w, NC, 4, &rng, &g, &out),
           "eval: no denoising");
    f.t.training = true;
    cfg.num_dn = 0;
    EXPECT(!cdn_get_group(&f.t, &cfg, &some, f.embed_w, NC, 4, &rng, &g, &out), "num_dn 0: none");
    EXPECT((uint64_t)f.t.n_nodes == nodes, "no denoising recorded nodes");

    // Through the hook: active says what happened.
    CdnHook h = {.cfg = cdn_config_default(), .tg = &none, .seed = 3};
    RtdetrDnHook hook = cdn_hook(&h);
    EXPECT(!hook.fn(hook.user, &f.t, f.embed_w, NC, 4, &out) && !h.active, "hook without GT");
    h.tg = &some;
    EXPECT(hook.fn(hook.user, &f.t, f.embed_w, NC, 4, &out) && h.active && h.group.n_dn == 200,
           "hook with one GT: G = 100, Ndn = 200");
    fixture_free(&f);
}

int main(void) {
    test_layout();
    test_one_group_and_seed();
    test_no_denoising();
    return expect_report();
}
