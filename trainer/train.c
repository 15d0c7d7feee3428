/* train.c -- the single-process training loop (train.h): setup (data, model, optimizer,
 * schedule, EMA, resume), then per epoch the batches of BaseTrainer._do_train and, at the
 * epoch's end, validation of the EMA model, the LambdaLR step and the checkpoint.
 *
 * Randomness is a pure function of (seed, position): the sampler's order of (seed, epoch),
 * augmentation of (seed, epoch, image), denoising noise of (seed, iteration). So the
 * checkpoint needs no generator state, and a resumed run draws what the straight one drew. */
#include "trainer/train.h"

#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/base.h" // CHECK, xmalloc
#include "trainer/checkpoint.h"
#include "trainer/device.h"
#include "trainer/data/batch.h"
#include "trainer/data/image.h"
#include "trainer/data/sampler.h"
#include "trainer/dist/rendezvous.h"
#include "trainer/trace.h"
#include "trainer/train_faults.h"
#include "trainer/optim/clip.h"
#include "trainer/optim/schedule.h"
#include "trainer/validate.h"

void train_config_default(TrainConfig *c) {
    *c = (TrainConfig){.imgsz = 640,
                       .batch = 16,
                       .epochs = 100,
                       .optimizer = "auto",
                       .lr0 = 0.01,
                       .lrf = 0.01,
                       .momentum = 0.937,
                       .weight_decay = 5e-4,
                       .warmup_epochs = 3.0,
                       .warmup_momentum = 0.8,
                       .warmup_bias_lr = 0.1,
                       .nbs = 64,
                       .max_grad_norm = 10.0,
                       .augment = true,
                       .aug = augment_default(),
                       .val = true,
                       .conf = 0.001,
                       .threads = 1,
                       .out_dir = "runs/detect/train",
                       .backend = "gloo",
                       .rdzv_timeout_s = 120,
                       .log = stdout,
                       .log_rows = 10};
    ddp_config_default(&c->ddp);
}

// Everything one run holds; torn down by run_free whatever setup reached.
typedef struct Run {
    const TrainConfig *c;
    Dataset train, val;
    int n_corrupt;            // train + val images dropped at the scan
    Rtdetr model; // validation runs it with the EMA weights swapped in (ema_swap)
    bool model_ok;
    Optimizer opt;
    bool opt_ok;
    Ema ema;
    bool ema_ok;
    ScheduleConfig sched;
    Checkpoint ck;
    DeviceChoice device; // where parameters, activations and gradients live
    PgMemory pg_memory;  // that device's memory as the process group sees it (its lifetime)
    Arena step_arena;
    Tape tape;
    bool tape_ok;
    AugmentConfig aug;
    int64_t nb, nw; // batches per epoch, warmup iterations (-1: none)
    double t_start;
    // DDP: rank and world (1: no group), the rendezvous and the wrapper
    int rank, world;
    Dist dist;
    bool dist_ok;
    Ddp ddp;
    bool ddp_ok;
    FILE *log;      // c->log on rank 0; /dev/null on the others (Ultralytics prints on rank 0)
    FILE *null_log;
    TrainTrace trace; // the probe (off when no trace directory)
    FaultObserver observer; // the reducer's observer: the trace, and fault=kill's timing
    char last_path[4096], best_path[4096];
} Run;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The denoising noise seed of iteration ni and the augmentation seed of an epoch: distinct
// streams of one seed (rng_init mixes them further with splitmix64).
static uint64_t step_seed(uint64_t seed, int64_t ni) {
    return (seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)ni + 1) * 0xBF58476D1CE4E5B9ull;
}
static uint64_t augment_seed(uint64_t seed, int64_t epoch) {
    return (seed * 0x94D049BB133111EBull) ^ ((uint64_t)epoch + 1) * 0x2545F4914F6CDD1Dull;
}
// Ultralytics seeds each rank with seed + 1 + RANK; one process keeps seed itself.
static uint64_t rank_seed(const Run *r) {
    return r->world > 1 ? r->c->seed + 1 + (uint64_t)r->rank : r->c->seed;
}

// Ultralytics' verify_image_label drops an image it cannot decode with a warning: decodes every
// image once (in parallel), warns on stderr for each failure and removes it from ds.
static int drop_corrupt_images(Dataset *ds) {
    int n = ds->n_images;
    char *errs = xcalloc((size_t)n, 512);
    uint8_t *bad = xcalloc((size_t)n, 1);
#pragma omp parallel for schedule(dynamic)
    for (int i = 0; i < n; i++) {
        Image im = {0};
        if (image_load(&im, ds->image_paths[i], errs + (size_t)i * 512, 512)) bad[i] = 1;
        image_free(&im);
    }
    int kept = 0, kept_boxes = 0;
    for (int i = 0; i < n; i++) {
        if (bad[i]) {
            fprintf(stderr, "WARNING: ignoring corrupt image: %s\n", errs + (size_t)i * 512);
            free(ds->image_paths[i]);
            continue;
        }
        int first = ds->box_start[i], count = ds->box_start[i + 1] - first;
        memmove(ds->boxes + kept_boxes, ds->boxes + first, sizeof(Box) * (size_t)count);
        ds->image_paths[kept] = ds->image_paths[i];
        ds->box_start[kept] = kept_boxes;
        kept_boxes += count;
        kept++;
    }
    ds->box_start[kept] = kept_boxes;
    ds->n_images = kept;
    free(bad);
    free(errs);
    return n - kept;
}

// Loads one split and scans it; prints Ultralytics' "N images, N backgrounds, N corrupt".
static int load_split(Run *r, Dataset *ds, const char *split, char *err, size_t errlen) {
    if (dataset_load_yaml(ds, r->c->data, split, err, errlen)) return -1;
    int corrupt = drop_corrupt_images(ds);
    r->n_corrupt += corrupt;
    if (ds->n_images == 0) {
        snprintf(err, errlen, "%s: the %s split has no readable image (%d corrupt)", r->c->data,
                 split, corrupt);
        return -1;
    }
    int backgrounds = 0;
    for (int i = 0; i < ds->n_images; i++)
        backgrounds += ds->box_start[i + 1] == ds->box_start[i];
    fprintf(r->log, "%s: %d images, %d backgrounds, %d corrupt\n", split, ds->n_images,
            backgrounds, corrupt);
    return 0;
}

// build_optimizer: the kind, lr and momentum (optimizer=auto decides them, and warmup_bias_lr
// becomes 0), the scaled weight decay, and Ultralytics' summary line.
static int setup_optimizer(Run *r, char *err, size_t errlen) {
    const TrainConfig *c = r->c;
    int nc = r->train.nc;
    int global_batch = c->batch * r->world; // Ultralytics' batch: all ranks together
    int accumulate = schedule_base_accumulate(c->nbs, global_batch);
    double decay = schedule_weight_decay(c->weight_decay, global_batch, accumulate, c->nbs);
    OptimKind kind;
    double lr = c->lr0, momentum = c->momentum, warmup_bias_lr = c->warmup_bias_lr;
    if (strcmp(c->optimizer, "auto") == 0) {
        int64_t iterations = optim_auto_iterations(r->train.n_images, global_batch, c->nbs, c->epochs);
        OptimChoice ch = optim_auto_choice(iterations, nc);
        kind = ch.kind;
        lr = ch.lr;
        momentum = ch.momentum;
        warmup_bias_lr = 0.0;
        fprintf(r->log,
                "optimizer: 'optimizer=auto' found, ignoring 'lr0=%g' and "
                "'momentum=%g' and determining best 'optimizer', 'lr0' and 'momentum' "
                "automatically...\n",
                c->lr0, c->momentum);
    } else if (optim_parse_kind(c->optimizer, &kind)) {
        snprintf(err, errlen, "optimizer=%s: expected auto, AdamW or SGD", c->optimizer);
        return -1;
    }
    Registry *reg = &r->model.reg;
    optim_init(&r->opt, kind, reg->params, reg->names, reg->n_params, lr, momentum, decay);
    r->opt_ok = true;
    fprintf(r->log,
            "optimizer: %s(lr=%g, momentum=%g) with parameter groups %d weight(decay=0.0), "
            "%d weight(decay=%g), %d bias(decay=0.0)\n",
            optim_kind_name(kind), lr, momentum, optim_group_size(&r->opt, OPTIM_GROUP_NORM),
            optim_group_size(&r->opt, OPTIM_GROUP_DECAY), decay,
            optim_group_size(&r->opt, OPTIM_GROUP_BIAS));
    r->sched = (ScheduleConfig){.epochs = c->epochs,
                                .lrf = c->lrf,
                                .warmup_epochs = c->warmup_epochs,
                                .warmup_bias_lr = warmup_bias_lr,
                                .warmup_momentum = c->warmup_momentum,
                                .momentum = c->momentum,
                                .nbs = c->nbs,
                                .batch = global_batch};
    r->ck.progress.accumulate = accumulate;
    return 0;
}

// Tokens of the three encoder levels (strides 8, 16, 32) at a square imgsz.
static int64_t encoder_tokens(int imgsz) {
    int64_t n = 0;
    for (int stride = 8; stride <= 32; stride *= 2)
        n += (int64_t)(imgsz / stride) * (imgsz / stride);
    return n;
}

// The launcher's environment: one process, or a rank of a DDP run (rendezvous, group).
static int setup_dist(Run *r, char *err, size_t errlen) {
    const TrainConfig *c = r->c;
    DistEnv env;
    r->log = c->log;
    r->world = 1;
    if (dist_env_read(&env, err, errlen)) return -1;
    r->rank = env.rank;
    r->world = env.world;
    if (r->rank != 0) { // only rank 0 prints progress and tables
        r->null_log = fopen("/dev/null", "w");
        if (r->null_log) r->log = r->null_log;
    }
    for (int k = 0; k < c->n_faults; k++)
        if (c->faults[k].rank >= r->world) {
            snprintf(err, errlen,
                     "ddpdbg-train train: fault rank=%d: no such rank (WORLD_SIZE=%d: ranks 0..%d)",
                     c->faults[k].rank, r->world, r->world - 1);
            return -1;
        }
    // CUPTI records the GPU activity of every run on a CUDA device (kernels and copies; under
    // NCCL also its kernels, tied to their collectives), whatever the backend and world size
    trace_open(&r->trace, c->trace_dir, r->rank, r->world, r->device.dev == DEV_CUDA, c->argc,
               c->argv);
    if (r->world == 1) return 0;
    // PyTorch's timeout= (its default per backend: pg_default_timeout_ms). memory: the
    // device's, whose buckets NCCL reduces in place and Gloo stages (the kernels run on the
    // default stream: NULL).
    PgOptions pg = {.timeout_ms = c->timeout_s > 0 ? c->timeout_s * 1000
                                                   : pg_default_timeout_ms(c->backend),
                    .memory = pg_memory_of_backend(backend_need(r->device.dev), r->device.index,
                                                   NULL, &r->pg_memory),
                    .nccl_hostid_per_rank = c->nccl_hostid_per_rank};
    if (dist_open(&r->dist, &env, c->backend, c->rdzv_timeout_s * 1000, &pg, err, errlen))
        return -1;
    r->dist_ok = true;
    return 0;
}

static int run_setup(Run *r, char *err, size_t errlen) {
    const TrainConfig *c = r->c;
    CHECK(c->model && c->data && c->imgsz % 32 == 0 && c->batch >= 1 && c->epochs >= 1 &&
              c->threads >= 1 && c->log_rows >= 1,
          "bad TrainConfig");
    r->t_start = now_seconds();
    const char *device = c->device ? c->device : device_default_spec();
    const char *local_rank = getenv("LOCAL_RANK");
    if (device_parse(device, local_rank ? atoi(local_rank) : 0, &r->device, err, errlen) ||
        device_open(r->device, err, errlen))
        return -1;
    backend_need(r->device.dev)->set_threads(c->threads);
    if (setup_dist(r, err, errlen)) return -1;
    if (load_split(r, &r->train, "train", err, errlen)) return -1;
    if (load_split(r, &r->val, "val", err, errlen)) return -1;
    // fault=shape: this rank's model has one class more (class-dependent tensors change shape)
    bool shape_fault = fault_hits(c->faults, c->n_faults, FAULT_SHAPE, r->rank, -1);
    if (rtdetr_init_on(&r->model, r->device.dev, c->model, r->train.nc + shape_fault, c->seed,
                       err, errlen))
        return -1;
    r->model_ok = true;
    // The decoder selects nq of the encoder's tokens: levels at strides 8, 16 and 32 (every
    // RT-DETR yaml) must hold at least that many, else the head's CHECK would abort.
    const ModelSpec *spec = &r->model.spec;
    int nq = spec->layers[spec->n_layers - 1].decoder.nq;
    int min_size = 32;
    while (encoder_tokens(min_size) < nq)
        min_size += 32;
    if (c->imgsz < min_size) {
        snprintf(err, errlen,
                 "imgsz=%d: too small for %s: %lld encoder tokens for %d queries "
                 "(need imgsz >= %d)",
                 c->imgsz, spec->name, (long long)encoder_tokens(c->imgsz), nq, min_size);
        return -1;
    }
    arena_init(&r->step_arena, r->device.dev, 0);
    tape_init(&r->tape, &r->step_arena, c->threads);
    r->tape.release_activations = true; // the loop reads no activation after backward
    r->tape_ok = true;
    for (int k = 0; k < c->n_faults; k++) { // fault=unused must name real parameters
        if (c->faults[k].kind != FAULT_UNUSED) continue;
        int hits = 0;
        for (int i = 0; i < r->model.reg.n_params; i++)
            hits += fnmatch(c->faults[k].param, r->model.reg.names[i], 0) == 0;
        if (!hits) {
            snprintf(err, errlen, "fault=unused: param=%s matches no parameter of %s (see "
                                  "`ddpdbg-train params model=%s`)",
                     c->faults[k].param, c->model, c->model);
            return -1;
        }
    }
    trace_params(&r->trace, &r->model.reg);
    if (r->world > 1) { // DistributedDataParallel(model): checks, rank 0's weights everywhere
        DdpConfig ddp = c->ddp;
        const Fault *cap = fault_find(c->faults, c->n_faults, FAULT_BUCKET_CAP, r->rank, -1);
        if (cap) // fault=bucket_cap: this rank alone uses another cap (first bucket included)
            ddp.reducer.bucket_bytes_cap = ddp.reducer.first_bucket_bytes_cap =
                (int64_t)(cap->mb * 1024 * 1024);
        trace_ddp_settings(&r->trace, &ddp, c->backend);
        r->observer = (FaultObserver){.trace = &r->trace,
                                      .faults = c->faults,
                                      .n_faults = c->n_faults,
                                      .rank = r->rank,
                                      .n_params = r->model.reg.n_params};
        if (ddp_init(&r->ddp, r->dist.pg, &r->model.reg, &r->tape, &ddp, fault_observer,
                     &r->observer)) {
            snprintf(err, errlen, "rank %d: RuntimeError: %s", r->rank, ddp_error(&r->ddp));
            r->ddp_ok = true;
            return -1;
        }
        r->ddp_ok = true;
    }
    char failed[4096];
    int e = mkdir_p(c->out_dir, failed, sizeof failed);
    if (e == ENAMETOOLONG) snprintf(err, errlen, "out=%s: path too long", c->out_dir);
    else if (e == ENOTDIR) snprintf(err, errlen, "out=%s: %s is not a folder", c->out_dir, failed);
    else if (e)
        snprintf(err, errlen, "out=%s: cannot create %s: %s", c->out_dir, failed, strerror(e));
    if (e) return -1;
    // Said before the first epoch, so that a run that fails or hangs does not leave a folder
    // (by default runs/detect/train under the working directory) nobody was told about.
    fprintf(r->log, "Results will be saved to %s (out= chooses the folder)\n", c->out_dir);
    snprintf(r->last_path, sizeof r->last_path, "%s/last.ckpt", c->out_dir);
    snprintf(r->best_path, sizeof r->best_path, "%s/best.ckpt", c->out_dir);

    r->ck = (Checkpoint){.model_name = r->model.spec.name,
                         .nc = r->train.nc,
                         .model = &r->model.reg,
                         .opt = &r->opt,
                         .ema = &r->ema};
    if (setup_optimizer(r, err, errlen)) return -1;
    CheckpointProgress *p = &r->ck.progress;
    p->last_opt_step = -1;
    p->best_fitness = -1.0; // no validation yet
    schedule_lambda_init(&r->sched, &r->opt, &p->scheduler_last_epoch);
    ema_init(&r->ema, &r->model.reg);
    r->ema_ok = true;
    if (c->resume) {
        if (checkpoint_load(c->resume, &r->ck, err, errlen)) return -1;
        if (p->epoch >= c->epochs) {
            snprintf(err, errlen,
                     "resume=%s: training to %d epochs is finished, nothing to "
                     "resume (give a larger epochs=)",
                     c->resume, c->epochs);
            return -1;
        }
        fprintf(r->log, "Resuming training from %s from epoch %lld to %d total epochs\n", c->resume,
                (long long)p->epoch + 1, c->epochs);
    }
    // The rank's shard: DistributedSampler's num_samples, equal on every rank.
    Sampler s;
    sampler_init(&s, r->train.n_images, r->world, r->rank, true, c->seed);
    r->nb = (s.per_rank + c->batch - 1) / c->batch;
    r->nw = schedule_warmup_iters(c->warmup_epochs, r->nb);
    r->aug = c->aug;
    return 0;
}

static void run_free(Run *r, bool clean) {
    trace_close(&r->trace); // first: the probe stores what the rank recorded, even on failure
    if (r->ddp_ok && clean) ddp_free(&r->ddp);
    if (r->dist_ok) dist_close(&r->dist, clean);
    if (r->null_log) fclose(r->null_log);
    if (r->tape_ok) tape_free(&r->tape);
    arena_free(&r->step_arena);
    if (r->ema_ok) ema_free(&r->ema);
    if (r->opt_ok) optim_free(&r->opt);
    if (r->model_ok) rtdetr_free(&r->model);
    dataset_free(&r->val);
    dataset_free(&r->train);
}

// ---- progress rows: "      Epoch    GPU_mem  giou_loss   cls_loss    l1_loss  Instances  Size"
// ----
static void format_clock(double s, char *out, size_t len) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, len, "%02ld:%02ld", t / 60, t % 60);
}

static void print_header(FILE *f) {
    fprintf(f, "\n%11s%11s%11s%11s%11s%11s%11s\n", "Epoch", "GPU_mem", "giou_loss", "cls_loss",
            "l1_loss", "Instances", "Size");
}

// One row: the epoch's running mean losses, this batch's instances and size, and tqdm's
// "done/total [elapsed<eta, rate]". A tty gets one line redrawn in place.
static void print_row(const Run *r, int epoch, int64_t done, const double *tloss, int instances,
                      double epoch_t0, bool tty) {
    FILE *f = r->log;
    char ep[32], el[32], eta[32], rate[32];
    snprintf(ep, sizeof ep, "%d/%d", epoch + 1, r->c->epochs);
    double elapsed = now_seconds() - epoch_t0, per_it = elapsed / (double)done;
    format_clock(elapsed, el, sizeof el);
    format_clock(per_it * (double)(r->nb - done), eta, sizeof eta);
    if (per_it > 1.0)
        snprintf(rate, sizeof rate, "%.2fs/it", per_it);
    else
        snprintf(rate, sizeof rate, "%.2fit/s", 1.0 / per_it);
    fprintf(f, "%s%11s%11s%11.4g%11.4g%11.4g%11d%11d: %3d%% %lld/%lld [%s<%s, %s]%s",
            tty ? "\r" : "", ep, "0G", tloss[0], tloss[1], tloss[2], instances, r->c->imgsz,
            (int)(100 * done / r->nb), (long long)done, (long long)r->nb, el, eta, rate,
            tty ? "" : "\n");
    fflush(f);
}

// The first loss term that is not finite, or the sum: a one-line message; NULL when all are.
static const char *nonfinite_term(const LossItems *it) {
    for (int k = 0; k < LOSS_N_KEYS; k++)
        if (!isfinite(it->value[k])) return loss_key_name((LossKey)k);
    return isfinite(it->total) ? NULL : "loss (the sum)";
}

// One batch of _do_train: warmup, forward + loss, backward, and every `accumulate` iterations
// clip, optimizer step, zero_grad (set_to_none, torch 2.x's default: a parameter no gradient
// reaches this window is skipped by the step) and EMA update. Returns 0, or 1 with err set.
static int run_batch(Run *r, int epoch, int64_t i, const int64_t *order, int64_t n_order,
                     double *tloss, int *instances, char *err, size_t errlen) {
    const TrainConfig *c = r->c;
    CheckpointProgress *p = &r->ck.progress;
    int64_t ni = p->iteration;
    int accumulate = (int)p->accumulate;
    schedule_warmup(&r->sched, &r->opt, ni, r->nw, epoch, &accumulate);
    p->accumulate = accumulate;

    int64_t first = i * c->batch;
    int n = (int)(n_order - first < c->batch ? n_order - first : c->batch);
    trace_iteration(&r->trace, ni);
    r->observer.iter = ni;
    r->observer.hooks = 0;
    trace_phase(&r->trace, 0, PROBE_PHASE_DATA);
    Batch b = {0};
    AugmentConfig aug = r->aug; // close_mosaic: no Mosaic in the last epochs
    if (!augment_mosaic_on(&aug, epoch, c->epochs)) aug.mosaic = 0;
    if (batch_load(&b, &r->train, order + first, n, c->imgsz, c->augment ? &aug : NULL,
                   augment_seed(rank_seed(r), epoch), err, errlen))
        return 2;
    Tape *t = &r->tape;
    tape_reset(t);
    t->training = true;
    t->grad_enabled = true;
    // DDP._pre_forward: here the prior iteration's unfinished reduction raises.
    trace_phase(&r->trace, PROBE_FORWARD_BEGIN, PROBE_PHASE_FORWARD);
    if (r->ddp_ok && ddp_pre_forward(&r->ddp)) {
        batch_free(&b);
        snprintf(err, errlen, "RuntimeError: %s", ddp_error(&r->ddp));
        return 1;
    }
    fault_kill_point(c->faults, c->n_faults, r->rank, ni, FAULT_PHASE_FORWARD);
    const Fault *slow = fault_find(c->faults, c->n_faults, FAULT_SLOW, r->rank, -1);
    if (slow) fault_sleep_ms(slow->ms); // a straggler
    bool no_sync = r->ddp_ok && fault_hits(c->faults, c->n_faults, FAULT_NO_SYNC, r->rank, ni);
    if (no_sync) {
        fprintf(stderr, "fault no_sync: rank %d runs iteration %lld under no_sync()\n", r->rank,
                (long long)ni);
        ddp_no_sync(&r->ddp, true);
    }
    // The batch upload: the loader's host images into the step arena on the device.
    Tensor *images = tensor_4d(t->arena, n, 3, c->imgsz, c->imgsz);
    tensor_write(images, b.images);
    Targets tg = {
        .n_images = n, .n_boxes = b.n_boxes, .cls = b.cls, .bboxes = b.boxes, .counts = b.counts};
    if (fault_hits(c->faults, c->n_faults, FAULT_NOGT, r->rank, ni)) {
        // The same images, no labels: a background-only batch, as the field report's rank had.
        tg.n_boxes = 0;
        for (int k = 0; k < n; k++)
            b.counts[k] = 0;
        fprintf(stderr, "fault nogt: rank %d, iteration %lld: %d images, their %d boxes removed\n",
                r->rank, (long long)ni, n, b.n_boxes);
    }
    trace_batch(&r->trace, n, order + first, b.counts);
    LossItems items;
    Tensor *loss = rtdetr_loss(&r->model, t, images, &tg, step_seed(rank_seed(r), ni), &items);
    *instances = tg.n_boxes;
    const char *bad = nonfinite_term(&items);
    if (bad) {
        batch_free(&b);
        snprintf(err, errlen,
                 "train: %s is not finite at iteration %lld (epoch %d, batch "
                 "%lld/%lld): stopping",
                 bad, (long long)ni, epoch + 1, (long long)i + 1, (long long)r->nb);
        trace_error(&r->trace, err);
        return 1;
    }
    // fault=unused: the parameters leave the graph inside the forward, as a detached head
    // does, so DDP's post-forward search (find_unused_parameters) finds them unused.
    const Fault *unused = fault_find(c->faults, c->n_faults, FAULT_UNUSED, r->rank, -1);
    if (unused) fault_cut_params(t, &r->model.reg, unused->param);
    if (r->ddp_ok) {
        // DDP._post_forward sees the model's output (Ultralytics: the loss); the trainer then
        // scales it by world, as BaseTrainer does (`self.loss *= world_size`).
        ddp_post_forward(&r->ddp, &loss, 1);
        loss = op_scale(t, loss, (float)r->world);
    }
    trace_phase(&r->trace, PROBE_FORWARD_END, PROBE_PHASE_FORWARD);
    if (fault_hits(c->faults, c->n_faults, FAULT_SKIP_BACKWARD, r->rank, ni)) {
        // `continue` before backward: no hook fires, so this rank's reducer has nothing to
        // finalize and raises nothing; its collectives fall one iteration behind the others'.
        fprintf(stderr, "fault skip_backward: rank %d skips backward and the step at iteration "
                        "%lld\n", r->rank, (long long)ni);
        batch_free(&b);
        p->iteration++;
        return 0;
    }
    trace_phase(&r->trace, PROBE_BACKWARD_BEGIN, PROBE_PHASE_BACKWARD);
    int backward = tape_backward(t, loss, NULL);
    if (no_sync) ddp_no_sync(&r->ddp, false);
    batch_free(&b);
    if (backward) {
        CHECK(r->ddp_ok, "the loss does not require grad");
        snprintf(err, errlen, "RuntimeError: %s", ddp_error(&r->ddp));
        return 1;
    }
    trace_phase(&r->trace, PROBE_BACKWARD_END, PROBE_PHASE_OPTIM);
    if (c->on_step) c->on_step(c->user, ni, &items);

    if (ni - p->last_opt_step >= p->accumulate) {
        float norm = clip_grad_norm(r->model.reg.params, r->model.reg.n_params, c->max_grad_norm);
        if (!isfinite(norm)) {
            snprintf(err, errlen,
                     "train: the gradient norm is not finite at iteration %lld "
                     "(epoch %d, batch %lld/%lld): stopping",
                     (long long)ni, epoch + 1, (long long)i + 1, (long long)r->nb);
            return 1;
        }
        optim_step(&r->opt);
        optim_zero_grad(&r->opt, true);
        ema_update(&r->ema, &r->model.reg);
        p->last_opt_step = ni;
        trace_phase(&r->trace, PROBE_OPTIM_STEP, PROBE_PHASE_OPTIM);
    }
    const float shown[3] = {items.giou, items.cls, items.l1};
    for (int k = 0; k < 3; k++)
        tloss[k] = (tloss[k] * (double)i + shown[k]) / (double)(i + 1);
    p->iteration++;
    return 0;
}

// Validates the EMA weights: swaps them into the model, runs the val split, swaps them back,
// prints the table.
static int run_validate(Run *r, bool final, TrainEpochReport *rep, char *err, size_t errlen) {
    MapResult res = {0};
    int vbatch = r->c->batch * 2;
    ema_swap(&r->ema, &r->model.reg);
    int rc = validate_run(&r->model, &r->tape, &r->val, r->c->imgsz, vbatch, r->c->conf, &res, err,
                          errlen);
    ema_swap(&r->ema, &r->model.reg);
    if (rc) return 2;
    validate_print_table(r->log, &res, &r->val, final);
    rep->validated = true;
    rep->precision = res.precision;
    rep->recall = res.recall;
    rep->map50 = res.map50;
    rep->map50_95 = res.map50_95;
    rep->fitness = validate_fitness(&res);
    map_result_free(&res);
    return 0;
}

// Rank 0's decision to stop, to every rank (Ultralytics' broadcast_object_list([self.stop])).
static int broadcast_stop(Run *r, bool *stop, char *err, size_t errlen) {
    float flag = *stop ? 1.0f : 0.0f;
    char why[1024];
    Reducer *red = &r->ddp.reducer;
    uint64_t seq = pg_seq(r->dist.pg) + 1;
    reducer_note_collective(red, "broadcast", "stop", 1, seq, false, true);
    int rc = pg_broadcast(r->dist.pg, &flag, 1, 0, why, sizeof why);
    reducer_note_collective(red, "broadcast", "stop", 1, seq, true, rc == 0);
    if (rc) {
        snprintf(err, errlen, "RuntimeError: %s", why);
        return 1;
    }
    *stop = flag != 0.0f;
    return 0;
}

// One epoch and its end: validation, LambdaLR step, last.ckpt (and best.ckpt when the fitness
// improved). The checkpoint is written after the scheduler step with progress.epoch pointing
// at the next epoch, so that loading it resumes exactly where this run goes on.
static int run_epoch(Run *r, int epoch, int64_t *order, bool *stop, char *err, size_t errlen) {
    const TrainConfig *c = r->c;
    Sampler s;
    sampler_init(&s, r->train.n_images, r->world, r->rank, true, c->seed);
    sampler_epoch(&s, epoch, order);
    optim_zero_grad(&r->opt, true); // a window left open by the last epoch is dropped
    double tloss[3] = {0, 0, 0}, t0 = now_seconds();
    bool tty = isatty(fileno(r->log));
    int64_t row_every = (r->nb + c->log_rows - 1) / c->log_rows;
    print_header(r->log);
    int64_t nb = r->nb; // fault=uneven: this rank's shard is shorter
    const Fault *uneven = fault_find(c->faults, c->n_faults, FAULT_UNEVEN, r->rank, -1);
    if (uneven) nb = uneven->batches >= nb ? 0 : nb - uneven->batches;
    for (int64_t i = 0; i < nb; i++) {
        int instances = 0;
        int rc = run_batch(r, epoch, i, order, s.per_rank, tloss, &instances, err, errlen);
        if (rc) {
            if (tty) fputc('\n', r->log);
            return rc;
        }
        if (tty || (i + 1) % row_every == 0 || i + 1 == r->nb)
            print_row(r, epoch, i + 1, tloss, instances, t0, tty);
    }
    if (tty) fputc('\n', r->log);
    if (r->n_corrupt)
        fprintf(r->log, "%d corrupt images ignored (see the warnings)\n", r->n_corrupt);

    TrainEpochReport rep = {.epoch = epoch,
                            .epochs = c->epochs,
                            .giou = (float)tloss[0],
                            .cls = (float)tloss[1],
                            .l1 = (float)tloss[2]};
    bool final = epoch + 1 == c->epochs;
    if (r->rank == 0 && (c->val || final)) { // the other ranks wait in the stop broadcast
        trace_phase(&r->trace, 0, PROBE_PHASE_VALIDATE);
        int rc = run_validate(r, final, &rep, err, errlen);
        if (rc) return rc;
    }
    CheckpointProgress *p = &r->ck.progress;
    schedule_lambda_step(&r->sched, &r->opt, &p->scheduler_last_epoch);
    p->epoch = epoch + 1;
    bool best = rep.validated && rep.fitness > p->best_fitness;
    if (best) p->best_fitness = rep.fitness;
    if (r->rank == 0) {
        trace_phase(&r->trace, 0, PROBE_PHASE_CHECKPOINT);
        if (checkpoint_save(r->last_path, &r->ck, err, errlen)) return 2;
        if (best && checkpoint_save(r->best_path, &r->ck, err, errlen)) return 2;
    }
    rep.iterations = p->iteration;
    rep.seconds = now_seconds() - r->t_start;
    if (r->rank == 0 && c->on_epoch && !c->on_epoch(c->user, &rep)) *stop = true;
    if (r->world > 1) return broadcast_stop(r, stop, err, errlen);
    return 0;
}

// After a DDP run: every rank's parameters hashed (FNV-1a over their bytes) and gathered, so a
// silent divergence (a rank that skipped a synced backward, a second backward, swapped
// same-shaped parameters) is said out loud instead of surfacing as bad accuracy later.
static int check_ranks_agree(Run *r, char *err, size_t errlen) {
    uint64_t h = 1469598103934665603ull;
    const Registry *reg = &r->model.reg;
    for (int i = 0; i < reg->n_params; i++) {
        float *host = tensor_host_copy(reg->params[i]);
        const unsigned char *b = (const unsigned char *)host;
        for (size_t k = 0; k < sizeof(float) * (size_t)reg->params[i]->n; k++)
            h = (h ^ b[k]) * 1099511628211ull;
        free(host);
    }
    uint64_t *all = xcalloc((size_t)r->world, sizeof(uint64_t));
    char why[1024];
    uint64_t seq = pg_seq(r->dist.pg) + 1;
    reducer_note_collective(&r->ddp.reducer, "allgather", "param_fingerprint", r->world, seq,
                            false, true);
    int rc = pg_allgather(r->dist.pg, &h, sizeof h, all, why, sizeof why);
    reducer_note_collective(&r->ddp.reducer, "allgather", "param_fingerprint", r->world, seq, true,
                            rc == 0);
    if (rc) {
        free(all);
        snprintf(err, errlen, "RuntimeError: %s", why);
        return 1;
    }
    int differ = 0;
    for (int k = 0; k < r->world; k++)
        differ += all[k] != all[0];
    if (differ == 0)
        fprintf(r->log, "DDP: parameters identical on all %d ranks (fingerprint %016llx)\n",
                r->world, (unsigned long long)all[0]);
    else if (r->rank == 0)
        for (int k = 1; k < r->world; k++)
            if (all[k] != all[0])
                fprintf(stderr, "WARNING: DDP: rank %d's parameters differ from rank 0's "
                                "(fingerprints %016llx, %016llx): the ranks diverged\n",
                        k, (unsigned long long)all[k], (unsigned long long)all[0]);
    free(all);
    return 0;
}

int train_run(const TrainConfig *c, char *err, size_t errlen) {
    Run r = {.c = c};
    int rc = run_setup(&r, err, errlen) ? 2 : 0;
    int64_t *order = rc ? NULL : xmalloc(sizeof(int64_t) * (size_t)r.train.n_images);
    int first_epoch = rc ? 0 : (int)r.ck.progress.epoch, epoch = first_epoch;
    bool stop = false;
    for (; rc == 0 && !stop && epoch < c->epochs; epoch++)
        rc = run_epoch(&r, epoch, order, &stop, err, errlen);
    if (rc == 0 && r.world > 1) rc = check_ranks_agree(&r, err, errlen);
    if (rc == 0)
        fprintf(r.log, "\n%d epochs completed in %.3f hours.\nResults saved to %s\n",
                epoch - first_epoch, (now_seconds() - r.t_start) / 3600.0, c->out_dir);
    free(order);
    run_free(&r, rc == 0);
    return rc;
}
