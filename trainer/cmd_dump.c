/* cmd_dump.c -- the `dump` command: one training step's forward and backward, written out for
 * another implementation to repeat (tests/torch/check_same_loss.py runs it in PyTorch):
 *   DIR/model.ckpt  the weights and buffers the step started from (checkpoint.h; no
 *                   optimizer): freshly initialised from seed, or read from weights=PATH (a
 *                   checkpoint of the same model with no optimizer or EMA section, as this
 *                   command writes; tests/torch/ writes perturbed ones)
 *   DIR/step.bin    named float32 arrays in tests/golden/README.md's format: "images"
 *                   (B,3,S,S), "counts" (B), "cls" (N), "bboxes" (N,4), the denoising
 *                   group's noisy rows "dn_cls" (2GN) and "dn_box_logits" (2GN,4) when it ran,
 *                   "loss" (12 keys, loss.h's order), and "grad/<i>" for every parameter i
 *                   that received a gradient (absent: PyTorch's grad is None).
 * The batch is the first `batch` images of the train split, not augmented; the step runs
 * in training mode (batch statistics) and its noise is drawn from seed. */
#include "trainer/cmd_dump.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/base.h" // DIE
#include "trainer/checkpoint.h"
#include "trainer/cli.h"
#include "trainer/data/batch.h"
#include "trainer/nn/cdn.h"
#include "trainer/nn/loss.h"

#define DUMP_MAGIC 0x47444450 // "PDDG", tests/golden/README.md
#define DUMP_VERSION 1
#define DUMP_NAME_LEN 64
#define DUMP_MAX_DIMS 6

typedef struct Dump {
    FILE *f;
    const char *path;
    int n_arrays;
} Dump;

static void dump_array(Dump *d, const char *name, int ndim, const int64_t *shape,
                       const float *data) {
    char padded[DUMP_NAME_LEN] = {0};
    CHECK(strlen(name) < DUMP_NAME_LEN && ndim <= DUMP_MAX_DIMS, "dump: bad array %s", name);
    memcpy(padded, name, strlen(name));
    int32_t dims[1 + DUMP_MAX_DIMS] = {ndim};
    int64_t n = 1;
    for (int k = 0; k < ndim; k++)
        dims[1 + k] = (int32_t)shape[k], n *= shape[k];
    if (fwrite(padded, 1, sizeof padded, d->f) != sizeof padded ||
        fwrite(dims, sizeof dims, 1, d->f) != 1 ||
        (n > 0 && fwrite(data, sizeof(float), (size_t)n, d->f) != (size_t)n))
        DIE(2, "ddpdbg-train dump: cannot write %s: %s", d->path, strerror(errno));
    d->n_arrays++;
}

static void dump_ints(Dump *d, const char *name, int n, const int *v) {
    float *f = xmalloc(sizeof(float) * (size_t)MAX(n, 1));
    for (int i = 0; i < n; i++)
        f[i] = (float)v[i];
    dump_array(d, name, 1, (int64_t[]){n}, f);
    free(f);
}

int cmd_dump(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *out = NULL, *imgsz = "128", *batch = "2", *seed = "0",
               *weights = NULL;
    const KeyArg keys[] = {{"model", &model},    {"data", &data},   {"out", &out},
                           {"imgsz", &imgsz},    {"batch", &batch}, {"seed", &seed},
                           {"weights", &weights}};
    cli_parse_keys("dump", argc, argv, keys, 7);
    if (!model || !data || !out)
        DIE(2, "ddpdbg-train dump: needs model=, data= (a data yaml) and out= (a folder)");
    int size = (int)cli_parse_int("dump", "imgsz", imgsz, 32, 8192);
    if (size % 32) DIE(2, "ddpdbg-train dump: imgsz=%d is not a multiple of the stride 32", size);
    int n = (int)cli_parse_int("dump", "batch", batch, 1, 1024);
    uint64_t noise_seed = (uint64_t)cli_parse_int("dump", "seed", seed, 0, INT64_MAX);
    if (mkdir(out, 0777) && errno != EEXIST)
        DIE(2, "ddpdbg-train dump: cannot create %s: %s", out, strerror(errno));

    char err[4096];
    Dataset ds = {0};
    if (dataset_load_yaml(&ds, data, "train", err, sizeof err)) DIE(2, "%s", err);
    if (ds.n_images < n)
        DIE(2, "ddpdbg-train dump: %s has %d train images, batch=%d", data, ds.n_images, n);
    Rtdetr m;
    if (rtdetr_init(&m, model, ds.nc, noise_seed, err, sizeof err)) DIE(2, "%s", err);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.ckpt", out);
    Checkpoint ck = {.model_name = m.spec.name, .nc = ds.nc, .model = &m.reg};
    if (weights && checkpoint_load(weights, &ck, err, sizeof err)) DIE(2, "%s", err);
    if (checkpoint_save(path, &ck, err, sizeof err)) DIE(2, "%s", err);

    int64_t *indices = xmalloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        indices[i] = i;
    Batch b = {0};
    if (batch_load(&b, &ds, indices, n, size, NULL, 0, err, sizeof err)) DIE(2, "%s", err);

    Arena arena;
    arena_init(&arena, DEV_CPU, 0);
    Tape t;
    tape_init(&t, &arena, 1);
    t.training = t.grad_enabled = true;
    Tensor *images = tensor_view(t.arena, b.images, 4, (int64_t[]){n, 3, size, size});
    Targets tg = {
        .n_images = n, .n_boxes = b.n_boxes, .cls = b.cls, .bboxes = b.boxes, .counts = b.counts};
    // rtdetr_loss, with the denoising hook kept in reach to write its noisy rows.
    const DecoderArgs *a = &m.head->a;
    CdnHook h = {.cfg = {.num_dn = a->nd,
                         .cls_noise_ratio = (float)a->label_noise_ratio,
                         .box_noise_scale = (float)a->box_noise_scale},
                 .tg = &tg,
                 .seed = noise_seed};
    RtdetrDnHook hook = cdn_hook(&h);
    RtdetrOutput o;
    rtdetr_forward(&m, &t, images, &hook, &o);
    LossConfig cfg = loss_config_default(a->nc);
    LossItems items;
    Tensor *loss = loss_criterion(&t, &cfg, &o, h.active ? &h.group : NULL, &tg, NULL, &items);
    CHECK(tape_backward(&t, loss, NULL) == 0, "dump: backward failed");

    snprintf(path, sizeof path, "%s/step.bin", out);
    Dump d = {.f = fopen(path, "wb"), .path = path};
    if (!d.f) DIE(2, "ddpdbg-train dump: cannot write %s: %s", path, strerror(errno));
    int32_t header[256] = {DUMP_MAGIC, DUMP_VERSION}; // [2], the array count, is written last
    fwrite(header, sizeof header, 1, d.f);
    dump_array(&d, "images", 4, images->shape, b.images);
    dump_ints(&d, "counts", n, b.counts);
    dump_ints(&d, "cls", b.n_boxes, b.cls);
    dump_array(&d, "bboxes", 2, (int64_t[]){b.n_boxes, 4}, b.boxes);
    if (h.active) {
        int rows = (int)(2 * h.group.n_groups * h.group.n_boxes);
        dump_ints(&d, "dn_cls", rows, h.group.cls);
        dump_array(&d, "dn_box_logits", 2, (int64_t[]){rows, 4}, h.group.box_logits);
    }
    dump_array(&d, "loss", 1, (int64_t[]){LOSS_N_KEYS}, items.value);
    for (int i = 0; i < m.reg.n_params; i++) {
        Tensor *p = m.reg.params[i];
        char name[32];
        snprintf(name, sizeof name, "grad/%d", i);
        if (p->grad_defined) dump_array(&d, name, p->ndim, p->shape, p->grad);
    }
    header[2] = d.n_arrays;
    if (fseek(d.f, 0, SEEK_SET) || fwrite(header, sizeof header, 1, d.f) != 1 || fclose(d.f))
        DIE(2, "ddpdbg-train dump: cannot write %s: %s", path, strerror(errno));
    printf("dump: %s, %d images, %d boxes, loss %.6g -> %s/model.ckpt, %s\n", m.spec.name, n,
           b.n_boxes, items.total, out, path);

    tape_free(&t);
    arena_free(&arena);
    batch_free(&b);
    free(indices);
    rtdetr_free(&m);
    dataset_free(&ds);
    return 0;
}
