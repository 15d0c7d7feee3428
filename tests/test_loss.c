/* test_loss.c -- the RT-DETR criterion (trainer/nn/loss.h) against Ultralytics' in PyTorch
 * (tests/golden/loss.bin, made by tests/golden/make_loss.py): every loss key and the
 * gradients wrt the four head outputs, with a denoising layout, without one, and without GT
 * (focal class loss, constant box losses); then the zero-box set on the real models: a batch
 * without boxes leaves exactly the 43 rtdetr-l tensors of rtdetr.md §4.5 (and rtdetr-tiny's
 * 25) without a gradient-ready hook, tape_find_unreachable names the same, and one box in
 * one image makes every parameter fire. Run from the repository root (as `make test` does). */
#include <math.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "tests/golden.h"
#include "trainer/nn/loss.h"
#include "trainer/ops/ops.h"

static const char *golden_path = "tests/golden/loss.bin";

// ---- the criterion against PyTorch ----
static int *int_array(const GoldenArray *ga) {
    int *v = xmalloc(sizeof(int) * (size_t)MAX(ga->n, (int64_t)1));
    for (int64_t i = 0; i < ga->n; i++)
        v[i] = (int)ga->data[i];
    return v;
}

static void test_golden_case(const Golden *g, const char *c) {
    Arena arena;
    arena_init(&arena, DEV_CPU, 0);
    Tape t;
    tape_init(&t, &arena, 1);
    t.training = true;

    RtdetrOutput o = {0};
    o.enc_bboxes = golden_leaf(&arena, golden_get(g, "%s/enc_bboxes", c));
    o.enc_scores = golden_leaf(&arena, golden_get(g, "%s/enc_scores", c));
    o.dec_bboxes = golden_leaf(&arena, golden_get(g, "%s/dec_bboxes", c));
    o.dec_scores = golden_leaf(&arena, golden_get(g, "%s/dec_scores", c));
    const GoldenArray *dn_args = golden_get(g, "%s/dn", c);
    o.n_dn = (int64_t)dn_args->data[1];

    const GoldenArray *counts = golden_get(g, "%s/counts", c), *cls = golden_get(g, "%s/gt_cls", c);
    int *counts_i = int_array(counts), *cls_i = int_array(cls);
    Targets tg = {.n_images = (int)counts->n,
                  .n_boxes = (int)cls->n,
                  .cls = cls_i,
                  .bboxes = golden_get(g, "%s/gt_bboxes", c)->data,
                  .counts = counts_i};

    CdnGroup dn = {0};
    int64_t *pos_start = NULL, *pos_idx = NULL;
    if (o.n_dn > 0) {
        const GoldenArray *ps = golden_get(g, "%s/pos_start", c),
                          *pi = golden_get(g, "%s/pos_idx", c);
        pos_start = xmalloc(sizeof(int64_t) * (size_t)ps->n);
        pos_idx = xmalloc(sizeof(int64_t) * (size_t)pi->n);
        for (int64_t i = 0; i < ps->n; i++)
            pos_start[i] = (int64_t)ps->data[i];
        for (int64_t i = 0; i < pi->n; i++)
            pos_idx[i] = (int64_t)pi->data[i];
        dn = (CdnGroup){.n_images = tg.n_images,
                        .n_boxes = tg.n_boxes,
                        .max_gt = (int64_t)dn_args->data[2],
                        .n_groups = (int64_t)dn_args->data[0],
                        .n_dn = o.n_dn,
                        .n_queries = o.enc_bboxes->shape[1],
                        .pos_start = pos_start,
                        .pos_idx = pos_idx};
    }

    LossConfig cfg = loss_config_default((int)o.enc_scores->shape[2]);
    Tensor *keys[LOSS_N_KEYS];
    LossItems items;
    Tensor *loss = loss_criterion(&t, &cfg, &o, o.n_dn > 0 ? &dn : NULL, &tg, keys, &items);
    char what[96];
    snprintf(what, sizeof what, "%s keys", c);
    EXPECT(golden_compare(what, items.value, LOSS_N_KEYS, golden_get(g, "%s/keys", c), 2e-6,
                          2e-6) == 0,
           "%s: loss keys differ from PyTorch's", c);
    EXPECT_NEAR(items.total, golden_get(g, "%s/total", c)->data[0], 1e-5, 1e-6);
    EXPECT(items.giou == items.value[LOSS_GIOU] && items.cls == items.value[LOSS_CLASS] &&
               items.l1 == items.value[LOSS_BBOX],
           "%s: displayed items are not the main-layer keys", c);
    EXPECT(loss->data[0] == items.total, "%s: returned loss and items.total differ", c);
    for (int k = 0; k < LOSS_N_KEYS; k++) {
        float v = golden_get(g, "%s/keys", c)->data[k];
        // Exact zeros in PyTorch are the constant keys: ours must be constants too.
        if (v == 0.0f)
            EXPECT(!keys[k]->requires_grad && keys[k]->data[0] == 0.0f,
                   "%s: %s should be a constant 0", c, loss_key_name((LossKey)k));
        else
            EXPECT(keys[k]->requires_grad, "%s: %s has no graph", c, loss_key_name((LossKey)k));
    }

    EXPECT(tape_backward(&t, loss, NULL) == 0, "%s: backward failed", c);
    static const char *inputs[4] = {"enc_bboxes", "enc_scores", "dec_bboxes", "dec_scores"};
    Tensor *leaves[4] = {o.enc_bboxes, o.enc_scores, o.dec_bboxes, o.dec_scores};
    for (int i = 0; i < 4; i++) {
        const GoldenArray *want = golden_get(g, "%s/d_%s", c, inputs[i]);
        bool torch_none = true;
        for (int64_t k = 0; k < want->n; k++)
            torch_none = torch_none && want->data[k] == 0.0f;
        snprintf(what, sizeof what, "%s d_%s", c, inputs[i]);
        if (torch_none) { // no box loss: the boxes must be outside the graph, as in PyTorch
            EXPECT(!leaves[i]->grad_defined, "%s: has a gradient, PyTorch's is None", what);
            continue;
        }
        EXPECT(leaves[i]->grad_defined, "%s: no gradient", what);
        EXPECT(golden_compare(what, leaves[i]->grad, leaves[i]->n, want, 2e-6, 1e-4) == 0,
               "%s differs from PyTorch's", what);
    }
    free(counts_i);
    free(cls_i);
    free(pos_start);
    free(pos_idx);
    tape_free(&t);
    arena_free(&arena);
}

static void test_key_names(void) {
    EXPECT(strcmp(loss_key_name(LOSS_CLASS), "loss_class") == 0 &&
               strcmp(loss_key_name(LOSS_GIOU_AUX), "loss_giou_aux") == 0 &&
               strcmp(loss_key_name(LOSS_BBOX_AUX_DN), "loss_bbox_aux_dn") == 0,
           "key names");
    LossConfig c = loss_config_default(80);
    EXPECT(c.vfl_alpha == 0.75f && c.vfl_gamma == 2.0f && c.focal_alpha == 0.25f &&
               c.focal_gamma == 1.5f && c.gain_class == 1 && c.gain_bbox == 5 && c.gain_giou == 2,
           "U81 loss defaults");
}

// ---- the zero-box set on the real models ----
typedef struct Fired {
    int *count;
    int n;
} Fired;

static int on_ready(void *user, Tensor *leaf) {
    Fired *f = user;
    CHECK(leaf->param_index >= 0 && leaf->param_index < f->n, "hook on a non-parameter");
    f->count[leaf->param_index]++;
    return 0;
}

static Tensor *images(Arena *a, int64_t b, int64_t size, uint64_t seed) {
    Tensor *x = tensor_new(a, 4, (int64_t[]){b, 3, size, size});
    Rng r;
    rng_init(&r, seed);
    for (int64_t i = 0; i < x->n; i++)
        x->data[i] = rng_uniform(&r);
    return x;
}

// The tensors a batch without boxes cuts off: every bbox head and the class embedding.
static bool box_side(const char *name) {
    return strstr(name, ".dec_bbox_head.") || strstr(name, ".enc_bbox_head.") ||
           strstr(name, ".denoising_class_embed.weight");
}

// One training step's loss and backward on t (reset first; its arena is reused, so only the
// first step pays for fresh pages); returns how many parameters fired no hook, checks that
// none fired twice and that tape_find_unreachable agrees with the hooks.
static int step_unfired(Rtdetr *m, Tape *t, const Targets *tg, int size, const char *what,
                        LossItems *items, bool *unfired) {
    tape_reset(t);
    t->training = true;
    int n = m->reg.n_params;
    Fired fired = {xcalloc((size_t)n, sizeof(int)), n};
    t->on_grad_ready = on_ready;
    t->hook_user = &fired;
    for (int i = 0; i < n; i++)
        m->reg.params[i]->grad_defined = false;
    Tensor *loss = rtdetr_loss(m, t, images(t->arena, tg->n_images, size, 7), tg, 11, items);
    bool *unreachable = xcalloc((size_t)n, sizeof(bool));
    tape_find_unreachable(t, &loss, 1, m->reg.params, n, unreachable);
    EXPECT(tape_backward(t, loss, NULL) == 0, "%s: backward failed", what);
    int n_unfired = 0, disagree = 0, twice = 0;
    for (int i = 0; i < n; i++) {
        unfired[i] = fired.count[i] == 0;
        n_unfired += unfired[i];
        twice += fired.count[i] > 1;
        disagree += unfired[i] != unreachable[i];
    }
    EXPECT(twice == 0 && disagree == 0,
           "%s: %d parameters fired twice, %d differ between hooks and the graph search", what,
           twice, disagree);
    free(unreachable);
    free(fired.count);
    return n_unfired;
}

// b images (1 or 2); with one box, it is in the last image (the first, if b = 2, has none).
static void test_zero_box(const char *model, int b, int size, int n_params, int n_cut) {
    Rtdetr m;
    char err[512], what[96];
    EXPECT(rtdetr_init(&m, model, 0, 3, err, sizeof err) == 0, "%s", err);
    int n = m.reg.n_params;
    EXPECT(n == n_params, "%s: %d parameters, expected %d", model, n, n_params);
    bool *unfired = xcalloc((size_t)n, sizeof(bool));
    LossItems items;
    Arena arena;
    arena_init(&arena, DEV_CPU, 0);
    Tape t;
    tape_init(&t, &arena, 1);

    int counts_none[2] = {0, 0};
    Targets none = {
        .n_images = b, .n_boxes = 0, .cls = NULL, .bboxes = NULL, .counts = counts_none};
    snprintf(what, sizeof what, "%s, no boxes", model);
    int got = step_unfired(&m, &t, &none, size, what, &items, unfired);
    int wrong = 0;
    for (int i = 0; i < n; i++)
        if (unfired[i] != box_side(m.reg.names[i])) {
            wrong++;
            EXPECT(false, "%s: %s %s", what, m.reg.names[i],
                   unfired[i] ? "fired no hook" : "fired");
        }
    EXPECT(got == n_cut && wrong == 0, "%s: %d parameters without a hook, expected %d", what, got,
           n_cut);
    float class_terms = items.value[LOSS_CLASS] + items.value[LOSS_CLASS_AUX];
    EXPECT(items.value[LOSS_BBOX] == 0 && items.value[LOSS_GIOU] == 0 &&
               items.value[LOSS_BBOX_AUX] == 0 && items.value[LOSS_GIOU_AUX] == 0 &&
               class_terms > 0 && fabsf(items.total - class_terms) <= 1e-5f * class_terms,
           "%s: the loss must be the class terms only (total %g)", what, (double)items.total);
    for (int k = LOSS_CLASS_DN; k < LOSS_N_KEYS; k++)
        EXPECT(items.value[k] == 0, "%s: %s = %g", what, loss_key_name((LossKey)k),
               (double)items.value[k]);

    // One box in one image: every parameter gets its gradient.
    int counts_one[2] = {0, 0}, cls[1] = {2};
    counts_one[b - 1] = 1;
    float box[4] = {0.45f, 0.55f, 0.3f, 0.2f};
    Targets one = {.n_images = b, .n_boxes = 1, .cls = cls, .bboxes = box, .counts = counts_one};
    snprintf(what, sizeof what, "%s, one box", model);
    got = step_unfired(&m, &t, &one, size, what, &items, unfired);
    EXPECT(got == 0, "%s: %d parameters without a hook", what, got);
    for (int k = 0; k < LOSS_N_KEYS; k++)
        EXPECT(isfinite(items.value[k]) && items.value[k] > 0, "%s: %s = %g", what,
               loss_key_name((LossKey)k), (double)items.value[k]);
    free(unfired);
    tape_free(&t);
    arena_free(&arena);
    rtdetr_free(&m);
}

int main(void) {
    test_key_names();
    Golden g;
    EXPECT(golden_load(&g, golden_path) == 0, "cannot load %s", golden_path);
    if (g.n_arrays > 0) {
        test_golden_case(&g, "dn");
        test_golden_case(&g, "nodn");
        test_golden_case(&g, "empty");
    }
    golden_free(&g);
    // rtdetr-tiny: 3 decoder layers, so 3 x 6 dec_bbox_head tensors + 6 + 1.
    test_zero_box("rtdetr-tiny.yaml", 2, 128, 323, 3 * 6 + 6 + 1);
    test_zero_box("rtdetr-l.yaml", 1, 128, 575, 43);
    return expect_report();
}
