/* test_model.c -- the RT-DETR models: parameter names, shapes and order of all five configs
 * (the Ultralytics four against PyTorch's listings in tests/golden/params/), BatchNorm
 * buffers, the initialisation rules of rtdetr.md section 2, the forward pass (output shapes,
 * the anchor boxes and top-k order the untrained heads expose, denoising queries, eval mode)
 * and the backward pass of rtdetr-l at 160 px: every parameter's ready hook fires exactly
 * once and in PyTorch's order (tests/golden/params/rtdetr-l.hooks.txt), and the detach points
 * leave exactly the 43 box-side tensors of Appendix A unreachable from a score-only loss.
 * Run from the repository root (as `make test` does). */
#include <math.h>

#include "kernels/base.h"
#include "tests/expect.h"
#include "trainer/nn/rtdetr.h"

static char err[1024];

static int find(const Rtdetr *m, const char *name) {
    for (int i = 0; i < m->reg.n_params; i++)
        if (strcmp(m->reg.names[i], name) == 0) return i;
    return -1;
}

static Tensor *param(const Rtdetr *m, const char *name) {
    int i = find(m, name);
    CHECK(i >= 0, "no parameter %s", name);
    return m->reg.params[i];
}

static bool all_equal(const Tensor *t, float v) {
    for (int64_t i = 0; i < t->n; i++)
        if (t->data[i] != v) return false;
    return true;
}

static double max_abs(const Tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < t->n; i++)
        m = fmax(m, fabs(t->data[i]));
    return m;
}

static double stddev(const Tensor *t) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t->n; i++)
        s += t->data[i], s2 += (double)t->data[i] * t->data[i];
    double mean = s / (double)t->n;
    return sqrt(s2 / (double)t->n - mean * mean);
}

static bool has_shape(const Tensor *t, int ndim, const int64_t *shape) {
    if (t == NULL || t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return false;
    return true;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = xmalloc((size_t)n + 1);
    buf[fread(buf, 1, (size_t)n, f)] = '\0';
    fclose(f);
    return buf;
}

// ---- names, shapes, order, buffers ----
static void test_listings(void) {
    static const struct {
        const char *model;
        int n_buffers;
    } cases[] = {
        {"rtdetr-l", 366}, {"rtdetr-x", 516}, {"rtdetr-resnet50", 285}, {"rtdetr-resnet101", 438}};
    for (int c = 0; c < 4; c++) {
        Rtdetr m;
        char model[64], golden[128];
        snprintf(model, sizeof model, "%s.yaml", cases[c].model);
        snprintf(golden, sizeof golden, "tests/golden/params/%s.params.txt", cases[c].model);
        EXPECT(rtdetr_init(&m, model, 0, 1, err, sizeof err) == 0, "%s", err);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        rtdetr_print_params(&m, f);
        fclose(f);
        char *want = slurp(golden);
        EXPECT(want != NULL, "cannot read %s (run from the repository root)", golden);
        EXPECT(want && strcmp(buf, want) == 0, "%s: listing differs from %s", model, golden);
        EXPECT(m.reg.n_buffers == cases[c].n_buffers, "%s: %d buffers, expected %d", model,
               m.reg.n_buffers, cases[c].n_buffers);
        int n_mean = 0;
        for (int i = 0; i < m.reg.n_buffers; i++) {
            const RegBuffer *b = &m.reg.buffers[i];
            const char *leaf = strrchr(b->name, '.') + 1;
            int k = i % 3; // BatchNorm2d registers running_mean, running_var, num_batches_tracked
            static const char *const order[] = {"running_mean", "running_var",
                                                "num_batches_tracked"};
            EXPECT(strcmp(leaf, order[k]) == 0 && (k == 2) == (b->count != NULL),
                   "%s: buffer %d is %s", model, i, b->name);
            n_mean += k == 0;
        }
        EXPECT(n_mean * 3 == cases[c].n_buffers, "%s: %d BatchNorm2d", model, n_mean);
        free(buf);
        free(want);
        rtdetr_free(&m);
    }
}

static void test_tiny_names(Rtdetr *m) {
    EXPECT(registry_numel(&m->reg) <= 2000000, "rtdetr-tiny has %lld parameters",
           (long long)registry_numel(&m->reg));
    static const char *const names[] = {
        "model.0.stem2a.conv.weight",
        "model.1.m.1.conv.weight",
        "model.6.m.1.conv2.conv.weight",
        "model.10.ma.in_proj_weight",
        "model.10.norm2.bias",
        "model.15.m.1.conv2.bn.bias",
        "model.27.input_proj.2.1.weight",
        "model.27.decoder.layers.2.self_attn.out_proj.bias",
        "model.27.decoder.layers.2.cross_attn.output_proj.weight",
        "model.27.decoder.layers.2.norm3.weight",
        "model.27.denoising_class_embed.weight",
        "model.27.query_pos_head.layers.1.weight",
        "model.27.enc_output.1.bias",
        "model.27.enc_score_head.bias",
        "model.27.enc_bbox_head.layers.2.weight",
        "model.27.dec_score_head.2.weight",
        "model.27.dec_bbox_head.2.layers.2.bias",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        EXPECT(find(m, names[i]) >= 0, "rtdetr-tiny lacks %s", names[i]);
    EXPECT(find(m, "model.27.decoder.layers.3.norm1.weight") < 0, "rtdetr-tiny: 3 layers");
    EXPECT(has_shape(param(m, "model.27.decoder.layers.0.cross_attn.sampling_offsets.weight"), 2,
                     (int64_t[]){4 * 3 * 4 * 2, 64}),
           "tiny sampling_offsets shape");
}

// ---- initialisation (rtdetr.md 2.10, 2.13; PyTorch defaults elsewhere) ----
static void test_init(Rtdetr *m) {
    char name[128];
    const float bias_cls = -4.59511985f; // -ln(99) / 80 * 80
    EXPECT_NEAR(param(m, "model.28.enc_score_head.bias")->data[7], bias_cls, 1e-6, 0);
    EXPECT(all_equal(param(m, "model.28.enc_bbox_head.layers.2.weight"), 0.0f) &&
               all_equal(param(m, "model.28.enc_bbox_head.layers.2.bias"), 0.0f),
           "enc_bbox_head last layer not zero");
    for (int j = 0; j < 6; j++) {
        snprintf(name, sizeof name, "model.28.dec_bbox_head.%d.layers.2.weight", j);
        EXPECT(all_equal(param(m, name), 0.0f), "%s not zero", name);
        snprintf(name, sizeof name, "model.28.dec_bbox_head.%d.layers.2.bias", j);
        EXPECT(all_equal(param(m, name), 0.0f), "%s not zero", name);
        snprintf(name, sizeof name, "model.28.dec_score_head.%d.bias", j);
        EXPECT(all_equal(param(m, name), param(m, "model.28.enc_score_head.bias")->data[0]), "%s",
               name);
        snprintf(name, sizeof name, "model.28.dec_bbox_head.%d.layers.0.weight", j);
        EXPECT(max_abs(param(m, name)) > 0, "%s is zero", name);
    }

    // BatchNorm2d after initialize_weights, in the backbone and in input_proj.
    RtdetrHead *h = m->head;
    const BatchNorm2d *bns[] = {&h->input_proj[1].bn, &((HGStem *)m->layers[0].m)->stem1.bn};
    for (int i = 0; i < 2; i++) {
        EXPECT(bns[i]->st.eps == 1e-3f && bns[i]->st.momentum == 0.03f, "BN eps %g momentum %g",
               bns[i]->st.eps, bns[i]->st.momentum);
        EXPECT(all_equal(bns[i]->w, 1) && all_equal(bns[i]->b, 0) &&
                   all_equal(bns[i]->st.running_mean, 0) && all_equal(bns[i]->st.running_var, 1),
               "BN init");
    }

    // Default Conv2d / Linear: U(+-1/sqrt(fan_in)), so std = bound / sqrt(3).
    Tensor *w = param(m, "model.1.m.1.conv.weight"); // 48x48x3x3, fan_in 432
    double bound = 1 / sqrt(432.0);
    EXPECT(max_abs(w) <= bound && fabs(stddev(w) / (bound / sqrt(3.0)) - 1) < 0.05,
           "conv init std %g, bound %g", stddev(w), bound);
    w = param(m, "model.11.fc1.weight"); // 1024x256
    EXPECT(max_abs(w) <= 1 / 16.0 && fabs(stddev(w) * sqrt(3.0) * 16 - 1) < 0.02, "fc1 std %g",
           stddev(w));
    // xavier: in_proj (768,256), enc_output.0, query_pos_head, input_proj, value_proj
    static const struct {
        const char *name;
        double fan_sum;
    } xav[] = {{"model.11.ma.in_proj_weight", 1024},
               {"model.28.decoder.layers.0.self_attn.in_proj_weight", 1024},
               {"model.28.enc_output.0.weight", 512},
               {"model.28.query_pos_head.layers.0.weight", 516},
               {"model.28.query_pos_head.layers.1.weight", 768},
               {"model.28.input_proj.0.0.weight", 512},
               {"model.28.decoder.layers.0.cross_attn.value_proj.weight", 512}};
    for (int i = 0; i < 7; i++) {
        Tensor *x = param(m, xav[i].name);
        double b = sqrt(6.0 / xav[i].fan_sum);
        EXPECT(max_abs(x) <= b && max_abs(x) > 0.9 * b, "%s: max %g, xavier bound %g", xav[i].name,
               max_abs(x), b);
    }
    EXPECT(max_abs(param(m, "model.28.enc_output.0.bias")) <= 1 / 16.0, "enc_output.0.bias");
    EXPECT(all_equal(param(m, "model.11.ma.in_proj_bias"), 0) &&
               all_equal(param(m, "model.11.ma.out_proj.bias"), 0) &&
               max_abs(param(m, "model.11.ma.out_proj.weight")) <= 1 / 16.0,
           "MultiheadAttention init");
    Tensor *emb = param(m, "model.28.denoising_class_embed.weight");
    EXPECT(fabs(stddev(emb) - 1) < 0.03, "Embedding std %g", stddev(emb));
    EXPECT(all_equal(param(m, "model.28.enc_output.1.weight"), 1) &&
               all_equal(param(m, "model.28.decoder.layers.3.norm2.bias"), 0),
           "LayerNorm init");

    // MSDeformAttn: offsets weight 0, bias a ring of 8 directions times (p + 1); attention
    // weights 0; value/output proj biases 0.
    const char *ca = "model.28.decoder.layers.0.cross_attn.";
    snprintf(name, sizeof name, "%ssampling_offsets.weight", ca);
    EXPECT(all_equal(param(m, name), 0), "sampling_offsets.weight");
    snprintf(name, sizeof name, "%ssampling_offsets.bias", ca);
    const float *ob = param(m, name)->data; // (NH=8, L=3, P=4, 2)
    static const float dir[8][2] = {{1, 0},  {1, 1},   {0, 1},  {-1, 1},
                                    {-1, 0}, {-1, -1}, {0, -1}, {1, -1}};
    // 1e-5: theta is float32 as in PyTorch, so cos/sin of the diagonals land a few ulps off
    // +-1 and the axis directions leave ~1e-7 residues (PyTorch's bias has the same).
    int bad = 0;
    for (int hh = 0; hh < 8; hh++)
        for (int l = 0; l < 3; l++)
            for (int p = 0; p < 4; p++)
                for (int k = 0; k < 2; k++)
                    bad += fabsf(ob[((hh * 3 + l) * 4 + p) * 2 + k] - dir[hh][k] * (p + 1)) > 1e-5f;
    EXPECT(bad == 0, "%d sampling_offsets.bias entries off the direction ring", bad);
    snprintf(name, sizeof name, "%sattention_weights.bias", ca);
    EXPECT(all_equal(param(m, name), 0), "attention_weights.bias");
    snprintf(name, sizeof name, "%soutput_proj.bias", ca);
    EXPECT(all_equal(param(m, name), 0), "output_proj.bias");

    // _get_clones: the six decoder layers start identical.
    int l0 = find(m, "model.28.decoder.layers.0.self_attn.in_proj_weight");
    int l5 = find(m, "model.28.decoder.layers.5.self_attn.in_proj_weight");
    int per = (l5 - l0) / 5, diff = 0;
    for (int k = 0; k < per; k++) {
        const Tensor *a = m->reg.params[l0 + k], *b = m->reg.params[l5 + k];
        diff += a->n != b->n || memcmp(a->data, b->data, sizeof(float) * (size_t)a->n) != 0;
    }
    EXPECT(per == 22 && diff == 0, "decoder layers differ (%d tensors per layer, %d differ)", per,
           diff);
}

static void test_nc_and_seed(void) {
    Rtdetr a, b;
    EXPECT(rtdetr_init(&a, "rtdetr-tiny.yaml", 5, 7, err, sizeof err) == 0, "%s", err);
    EXPECT(rtdetr_init(&b, "rtdetr-tiny.yaml", 5, 8, err, sizeof err) == 0, "%s", err);
    Tensor *bias = param(&a, "model.27.dec_score_head.0.bias");
    EXPECT(bias->n == 5, "nc=5 score head has %lld", (long long)bias->n);
    EXPECT_NEAR(bias->data[0], -log(99.0) / 80 * 5, 1e-6, 0);
    const Tensor *wa = param(&a, "model.3.m.0.conv.weight"),
                 *wb = param(&b, "model.3.m.0.conv.weight");
    EXPECT(memcmp(wa->data, wb->data, sizeof(float) * (size_t)wa->n) != 0, "seeds 7 and 8 agree");
    rtdetr_free(&b);
    EXPECT(rtdetr_init(&b, "rtdetr-tiny.yaml", 5, 7, err, sizeof err) == 0, "%s", err);
    wb = param(&b, "model.3.m.0.conv.weight");
    EXPECT(memcmp(wa->data, wb->data, sizeof(float) * (size_t)wa->n) == 0, "seed 7 twice differs");
    rtdetr_free(&a);
    rtdetr_free(&b);
}

// ---- forward ----
static Tensor *images(Arena *a, int64_t b, int64_t size, uint64_t seed) {
    Tensor *x = tensor_new(a, 4, (int64_t[]){b, 3, size, size});
    Rng r;
    rng_init(&r, seed);
    for (int64_t i = 0; i < x->n; i++)
        x->data[i] = rng_uniform(&r);
    return x;
}

static bool all_finite(const Tensor *t) {
    for (int64_t i = 0; i < t->n; i++)
        if (!isfinite(t->data[i])) return false;
    return true;
}

// Output shapes; and, since the untrained bbox heads end in zero layers, every selected
// proposal box is its anchor: (w, h) = 0.05 * 2^l names the level l, the centre sits on that
// level's grid, and the decoder's refinements leave the boxes where they are. The selected
// rows are sorted by their best class logit. An invalid anchor (logit +inf, on the outer ring
// of a large level) may be selected too: its box is (1, 1, 1, 1).
static void check_outputs(const char *what, const RtdetrOutput *o, int ndl, int64_t b, int64_t q,
                          int64_t ndn, int64_t nc, int64_t size) {
    EXPECT(has_shape(o->dec_bboxes, 4, (int64_t[]){ndl, b, ndn + q, 4}) &&
               has_shape(o->dec_scores, 4, (int64_t[]){ndl, b, ndn + q, nc}) &&
               has_shape(o->enc_bboxes, 3, (int64_t[]){b, q, 4}) &&
               has_shape(o->enc_scores, 3, (int64_t[]){b, q, nc}) && o->n_dn == ndn,
           "%s: output shapes", what);
    if (!has_shape(o->dec_bboxes, 4, (int64_t[]){ndl, b, ndn + q, 4})) return;
    EXPECT(all_finite(o->dec_bboxes) && all_finite(o->dec_scores) && all_finite(o->enc_scores),
           "%s: non-finite outputs", what);
    int off_grid = 0, unsorted = 0, moved = 0;
    for (int64_t i = 0; i < b * q; i++) {
        const float *e = o->enc_bboxes->data + i * 4;
        if (e[0] == 1 && e[1] == 1 && e[2] == 1 && e[3] == 1) continue;
        int l = (int)lrintf(log2f(e[2] / 0.05f));
        int64_t cells = size / (8 << l);
        float gx = e[0] * (float)cells - 0.5f, gy = e[1] * (float)cells - 0.5f;
        off_grid += l < 0 || l > 2 || e[2] != e[3] || fabsf(gx - rintf(gx)) > 1e-3f ||
                    fabsf(gy - rintf(gy)) > 1e-3f;
        if (i % q > 0) {
            const float *s0 = o->enc_scores->data + (i - 1) * nc, *s1 = s0 + nc;
            float m0 = s0[0], m1 = s1[0];
            for (int64_t c = 1; c < nc; c++)
                m0 = fmaxf(m0, s0[c]), m1 = fmaxf(m1, s1[c]);
            unsorted += m1 > m0;
        }
        for (int k = 0; k < ndl; k++) {
            int64_t bi = i / q, qi = ndn + i % q;
            const float *d = o->dec_bboxes->data + ((k * b + bi) * (ndn + q) + qi) * 4;
            for (int j = 0; j < 4; j++)
                moved += fabsf(d[j] - e[j]) > 1e-4f;
        }
    }
    EXPECT(off_grid == 0, "%s: %d proposals are not anchors", what, off_grid);
    EXPECT(unsorted == 0, "%s: %d proposals out of top-k order", what, unsorted);
    EXPECT(moved == 0, "%s: %d box coordinates moved by zero-initialised refinements", what, moved);
}

static void test_forward_tiny(Rtdetr *m) {
    Arena arena;
    arena_init(&arena, DEV_CPU, 0);
    Tape t;
    tape_init(&t, &arena, 1);
    RtdetrOutput o;
    rtdetr_forward(m, &t, images(&arena, 2, 160, 1), NULL, &o);
    check_outputs("tiny 160 train", &o, 3, 2, 100, 0, 80, 160);
    BatchNorm2d *bn = &((HGStem *)m->layers[0].m)->stem1.bn;
    EXPECT(bn->st.num_batches_tracked == 1, "BN counted %lld batches",
           (long long)bn->st.num_batches_tracked);

    tape_reset(&t);
    t.training = false;
    t.grad_enabled = false;
    rtdetr_forward(m, &t, images(&arena, 1, 160, 2), NULL, &o);
    check_outputs("tiny 160 eval", &o, 1, 1, 100, 0, 80, 160);
    EXPECT(bn->st.num_batches_tracked == 1, "eval forward counted a batch");

    tape_reset(&t);
    t.training = true;
    rtdetr_forward(m, &t, images(&arena, 1, 640, 3), NULL, &o);
    check_outputs("tiny 640 train", &o, 3, 1, 100, 0, 80, 640);
    tape_free(&t);
    arena_free(&arena);
}

// ---- denoising hook: G = 2 groups of max_gt = 2 (positive and negative copies) ----
#define DN_N 8
typedef struct DnFixture {
    uint8_t *mask;
    int64_t nq;
} DnFixture;

static bool dn_hook(void *user, Tape *t, Tensor *class_embed, int nc, int nq, RtdetrDn *out) {
    DnFixture *f = user;
    int64_t b = 1, hd = class_embed->shape[1], tgt = DN_N + nq;
    int64_t *cls = tape_alloc(t, sizeof(int64_t) * DN_N);
    for (int i = 0; i < DN_N; i++)
        cls[i] = (i * 7) % nc;
    out->embed =
        op_reshape(t, op_embedding(t, class_embed, cls, DN_N), 3, (int64_t[]){b, DN_N, hd});
    out->bbox_logits = tensor_new(t->arena, 3, (int64_t[]){b, DN_N, 4});
    for (int i = 0; i < DN_N * 4; i++)
        out->bbox_logits->data[i] = (float)(i % 5) * 0.3f - 0.6f;
    // matching queries see no dn slot; dn group g (4 slots) sees only itself and the matching
    f->mask = tape_alloc(t, (size_t)(tgt * tgt));
    for (int64_t r = 0; r < tgt; r++)
        for (int64_t c = 0; c < tgt; c++)
            f->mask[r * tgt + c] = c < DN_N && (r >= DN_N || r / 4 != c / 4);
    out->attn_mask = f->mask;
    f->nq = nq;
    return true;
}

typedef struct Fired {
    int *count; // per parameter
    int *order; // parameter indices in firing order
    int n, n_fired;
} Fired;

static int on_ready(void *user, Tensor *leaf) {
    Fired *f = user;
    CHECK(leaf->param_index >= 0 && leaf->param_index < f->n && f->n_fired < 4 * f->n,
          "hook on a non-parameter");
    f->count[leaf->param_index]++;
    f->order[f->n_fired++] = leaf->param_index;
    return 0;
}

// tests/golden/params/rtdetr-l.hooks.txt: '#' lines, then the indices. Returns how many.
static int read_hook_order(int *order, int cap) {
    const char *path = "tests/golden/params/rtdetr-l.hooks.txt";
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL, "cannot read %s (run from the repository root)", path);
    if (!f) return 0;
    char line[256];
    int n = 0, c;
    while ((c = fgetc(f)) == '#')
        if (!fgets(line, sizeof line, f)) break;
    ungetc(c, f);
    while (n < cap && fscanf(f, "%d", &order[n]) == 1)
        n++;
    fclose(f);
    return n;
}

// sum(w * x) with fixed small weights.
static Tensor *weighted(Tape *t, Tensor *x, uint64_t seed) {
    Tensor *w = tensor_like(t->arena, x);
    Rng r;
    rng_init(&r, seed);
    for (int64_t i = 0; i < w->n; i++)
        w->data[i] = rng_range(&r, -0.01f, 0.01f);
    return op_sum(t, op_mul(t, x, w));
}

static void test_backward_l(Rtdetr *m) {
    Arena arena;
    arena_init(&arena, DEV_CPU, 0);
    Tape t;
    tape_init(&t, &arena, 1);
    int n = m->reg.n_params;
    Fired fired = {xcalloc((size_t)n, sizeof(int)), xcalloc(4 * (size_t)n, sizeof(int)), n, 0};
    t.on_grad_ready = on_ready;
    t.hook_user = &fired;
    for (int i = 0; i < n; i++)
        m->reg.params[i]->grad_defined = false;

    DnFixture dnf = {0};
    RtdetrDnHook hook = {dn_hook, &dnf};
    RtdetrOutput o;
    rtdetr_forward(m, &t, images(&arena, 1, 160, 4), &hook, &o);
    check_outputs("l 160 train + dn", &o, 6, 1, 300, DN_N, 80, 160);
    // The dn queries start from their given boxes and the zero refinements keep them there.
    int moved = 0;
    for (int i = 0; i < DN_N * 4 && has_shape(o.dec_bboxes, 4, (int64_t[]){6, 1, DN_N + 300, 4});
         i++) {
        float want = 1.0f / (1.0f + expf(-((float)(i % 5) * 0.3f - 0.6f)));
        moved += fabsf(o.dec_bboxes->data[5 * (DN_N + 300) * 4 + i] - want) > 1e-5f;
    }
    EXPECT(moved == 0, "%d dn box coordinates moved", moved);

    // The loss of tests/golden/params/rtdetr_hooks.py, its ops in the same order (one per
    // statement: C leaves the order of evaluating arguments unspecified).
    Tensor *l1 = weighted(&t, o.dec_bboxes, 1);
    Tensor *l2 = weighted(&t, o.dec_scores, 2);
    Tensor *loss = op_add(&t, l1, l2);
    Tensor *l3 = weighted(&t, o.enc_bboxes, 3);
    loss = op_add(&t, loss, l3);
    Tensor *l4 = weighted(&t, o.enc_scores, 4);
    loss = op_add(&t, loss, l4);
    EXPECT(tape_backward(&t, loss, NULL) == 0, "backward failed");
    int once = 0, nonfinite = 0;
    for (int i = 0; i < n; i++) {
        once += fired.count[i] == 1;
        if (fired.count[i] != 1)
            EXPECT(false, "%s fired %d times", m->reg.names[i], fired.count[i]);
        Tensor *p = m->reg.params[i];
        for (int64_t k = 0; k < p->n && p->grad_defined; k++)
            nonfinite += !isfinite(p->grad[k]);
    }
    EXPECT(once == 575, "%d of 575 parameters fired exactly once", once);
    EXPECT(nonfinite == 0, "%d non-finite gradient entries", nonfinite);

    // The order PyTorch fires the same graph's hooks in: what the DDP reducer will see.
    int *want = xcalloc((size_t)n, sizeof(int));
    int n_want = read_hook_order(want, n), first_diff = -1;
    for (int i = 0; i < n_want && i < fired.n_fired && first_diff < 0; i++)
        if (want[i] != fired.order[i]) first_diff = i;
    EXPECT(n_want == 575 && fired.n_fired == 575 && first_diff < 0,
           "hook order differs from PyTorch's at position %d: fired %s, PyTorch %s", first_diff,
           first_diff >= 0 ? m->reg.names[fired.order[first_diff]] : "-",
           first_diff >= 0 ? m->reg.names[want[first_diff]] : "-");
    free(want);
    free(fired.count);
    free(fired.order);

    // Without denoising and with a loss on the scores only (a batch without boxes: the box
    // losses are constants), the detached references cut off every bbox head, and the class
    // embedding is unused: the 43 tensors of rtdetr.md Appendix A.
    tape_reset(&t);
    t.on_grad_ready = NULL;
    rtdetr_forward(m, &t, images(&arena, 1, 160, 5), NULL, &o);
    Tensor *roots[2] = {o.dec_scores, o.enc_scores};
    bool *unused = xcalloc((size_t)n, sizeof(bool));
    tape_find_unreachable(&t, roots, 2, m->reg.params, n, unused);
    int n_unused = 0, wrong = 0;
    for (int i = 0; i < n; i++) {
        const char *name = m->reg.names[i];
        bool box_side = strstr(name, "bbox_head") || strstr(name, "denoising_class_embed");
        n_unused += unused[i];
        if (unused[i] != box_side) {
            wrong++;
            EXPECT(false, "%s is %s", name, unused[i] ? "unreachable" : "reachable");
        }
    }
    EXPECT(n_unused == 43 && wrong == 0, "%d unreachable from the scores, expected 43", n_unused);
    free(unused);
    tape_free(&t);
    arena_free(&arena);
}

static void test_sincos(void) {
    // h = 2, w = 3, C = 4 (D = 1, omega = 1): token t uses a = t div 2, b = t mod 2.
    float pos[6 * 4];
    aifi_sincos_embedding(pos, 2, 3, 4);
    for (int t = 0; t < 6; t++) {
        float a = (float)(t / 2), b = (float)(t % 2);
        EXPECT_NEAR(pos[t * 4 + 0], sinf(a), 1e-7, 0);
        EXPECT_NEAR(pos[t * 4 + 1], cosf(a), 1e-7, 0);
        EXPECT_NEAR(pos[t * 4 + 2], sinf(b), 1e-7, 0);
        EXPECT_NEAR(pos[t * 4 + 3], cosf(b), 1e-7, 0);
    }
    // C = 8: omega = (1, 10000^-0.5 = 0.01); token 5 of a 3x3 map: a = 1, b = 2.
    float p8[9 * 8];
    aifi_sincos_embedding(p8, 3, 3, 8);
    EXPECT_NEAR(p8[5 * 8 + 1], sinf(0.01f), 1e-7, 0);
    EXPECT_NEAR(p8[5 * 8 + 5], sinf(2.0f * 0.01f), 1e-7, 0);
    EXPECT_NEAR(p8[5 * 8 + 7], cosf(2.0f * 0.01f), 1e-7, 0);
}

int main(void) {
    test_listings();
    test_sincos();
    test_nc_and_seed();

    Rtdetr tiny;
    EXPECT(rtdetr_init(&tiny, "rtdetr-tiny.yaml", 0, 3, err, sizeof err) == 0, "%s", err);
    test_tiny_names(&tiny);
    test_forward_tiny(&tiny);
    rtdetr_free(&tiny);

    Rtdetr l;
    EXPECT(rtdetr_init(&l, "rtdetr-l.yaml", 0, 3, err, sizeof err) == 0, "%s", err);
    test_init(&l);
    test_backward_l(&l);
    rtdetr_free(&l);
    return expect_report();
}
