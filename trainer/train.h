/* train.h -- single-process RT-DETR training, Ultralytics 8.1.34's BaseTrainer._do_train
 * (rtdetr.md §5): shuffled batches, warmup and the per-epoch LambdaLR, gradient accumulation,
 * clip 10, the optimizer, EMA, validation of the EMA model at every epoch end (mAP, map.h) and
 * a checkpoint per epoch (checkpoint.h) from which a resumed run continues bit for bit.
 * Gradients are cleared as torch 2.x's zero_grad(set_to_none=True) does: a parameter that no
 * gradient reached since the last step is skipped by the next one (no decay, no moment decay).
 * Prints Ultralytics-like progress rows and validation tables.
 * DDP: when the launcher's environment names a world larger than 1 (rendezvous.h), every rank
 * runs this loop over its DistributedSampler shard with the model wrapped in DDP (ddp.h), as
 * Ultralytics 8.1's trainer does: `batch` is per rank, accumulate and the weight-decay scale
 * use the global batch (batch x world), the loss is multiplied by world before backward, and
 * rank 0 alone prints, validates and writes checkpoints, then broadcasts whether to stop.
 * A DDP error (e.g. "Expected to have finished reduction ...") stops the rank with exit 1 and
 * PyTorch's text; the others then fail in their collectives or are stopped by the launcher.
 * Not here: the command line (cmd_train.c), the training transforms (augment.h). */
#ifndef TRAINER_TRAIN_H
#define TRAINER_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trainer/data/augment.h"
#include "trainer/dist/ddp.h"
#include "trainer/eval/map.h"
#include "trainer/fault.h"
#include "trainer/nn/loss.h"

typedef struct TrainEpochReport {
    int epoch;           // 0-based epoch just finished
    int epochs;          // the run's total
    int64_t iterations;  // batches run so far, all epochs (the next ni)
    float giou, cls, l1; // the epoch's mean displayed losses
    bool validated;      // val=true: the fields below hold this epoch's metrics
    double precision, recall, map50, map50_95, fitness; // fitness = 0.1 mAP50 + 0.9 mAP50-95
    double seconds;                                     // since the run started (this process)
} TrainEpochReport;

// Ultralytics' cfg/default.yaml names; train_config_default fills its defaults.
typedef struct TrainConfig {
    const char *model; // yaml path or built-in name ("rtdetr-l")
    const char *data;  // data yaml (datayaml.c)
    int imgsz, batch, epochs;
    const char *optimizer; // "auto", "AdamW" or "SGD"
    double lr0, lrf, momentum, weight_decay;
    double warmup_epochs, warmup_momentum, warmup_bias_lr;
    int nbs;              // nominal batch size: accumulate = max(round(nbs / batch), 1)
    double max_grad_norm; // 10
    bool augment;         // the training transforms (false: none of them)
    AugmentConfig aug;    // Mosaic, RandomPerspective, RandomHSV, flip (augment.h; defaults:
                          // augment_default(), Ultralytics' for rtdetr-*)
    uint64_t seed;        // model init, shuffling, augmentation and denoising noise
    bool val;             // validate every epoch (the last epoch is always validated)
    double conf;          // validation confidence threshold, 0.001
    int threads;          // >= 1
    // device= as Ultralytics spells it (trainer/device.h): "cpu", "fake", "0", "0,1" (the
    // rank takes entry LOCAL_RANK); NULL: DDPDBG_DEVICE, else cpu.
    const char *device;
    const char *out_dir;  // last.ckpt and best.ckpt go here (created)
    // NULL or a checkpoint (last.ckpt) to continue from. Its model layout, nc and optimizer
    // kind are verified; the other arguments (data, imgsz, batch, epochs, seed, ...) must be
    // the ones it was made with for the continuation to equal the uninterrupted run.
    const char *resume;
    // DDP (used when WORLD_SIZE > 1): the DDP arguments, the process-group backend ("gloo" or
    // "nccl"), the collective timeout (0: PyTorch's default, 1800 s Gloo / 600 s NCCL) and
    // the start-up timeout (store connection and join).
    DdpConfig ddp;
    const char *backend;
    int timeout_s, rdzv_timeout_s;
    // nccl_hostid=rank: each NCCL rank poses as a host of its own (PgOptions), test-only.
    bool nccl_hostid_per_rank;
    const Fault *faults; // fault injection (fault.h), n_faults of them
    int n_faults;
    // The probe (trace.h): trace_dir NULL or "" is off; argc/argv are recorded as metadata.
    const char *trace_dir;
    int argc;
    char **argv;
    FILE *log;    // progress and tables (stdout); warnings go to stderr
    int log_rows; // progress rows per epoch when log is not a tty (>= 1)
    // Optional observers (NULL: none). on_step sees every iteration's loss items after its
    // backward; on_epoch sees the report after the epoch's checkpoint is written and
    // returns false to stop the run there (a clean stop: exit status 0).
    void (*on_step)(void *user, int64_t ni, const LossItems *items);
    bool (*on_epoch)(void *user, const TrainEpochReport *r);
    void *user;
} TrainConfig;

// imgsz 640, batch 16, epochs 100, optimizer auto, lr0 0.01, lrf 0.01, momentum 0.937,
// weight_decay 5e-4, warmup_epochs 3, warmup_momentum 0.8, warmup_bias_lr 0.1, nbs 64, grad
// clip 10, augment on, seed 0, val on, conf 0.001, threads 1, out_dir "runs/detect/train",
// log stdout with 10 rows per epoch, PyTorch's DDP defaults, backend gloo, rendezvous
// timeout 120 s, no faults. model and data are NULL.
void train_config_default(TrainConfig *c);

// Runs the training. Returns 0 when done (or stopped by on_epoch); 2 with one line in err
// for bad input (a missing or malformed file, a bad label line, an empty dataset, a
// checkpoint that is truncated, foreign or already finished; a failed rendezvous or ranks
// that disagree on the model or the DDP settings); 1 with err when a loss term or the
// gradient norm is not finite (naming the iteration and the term), or when DDP raised
// ("RuntimeError: " and PyTorch's text, which may span lines: size err generously).
int train_run(const TrainConfig *c, char *err, size_t errlen);

#endif
