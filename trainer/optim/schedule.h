/* schedule.h -- Ultralytics BaseTrainer's learning-rate schedule (8.1.34): the linear LambdaLR
 * stepped once per epoch, the warmup that overrides it for the first nw iterations, and the
 * gradient-accumulation count. Pure functions of their arguments (bit-exact to the Python:
 * numpy's interp and round-half-to-even), plus two that write the results into an Optimizer.
 * Not here: when the loop calls them (see the order in schedule_warmup's comment). */
#ifndef TRAINER_OPTIM_SCHEDULE_H
#define TRAINER_OPTIM_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "trainer/optim/adamw.h"

// The cfg/default.yaml values the schedule reads (defaults in comments).
typedef struct ScheduleConfig {
    int epochs;             // 100
    double lrf;             // 0.01: final lr = lr0 * lrf
    double warmup_epochs;   // 3.0; <= 0 turns warmup off
    double warmup_bias_lr;  // 0.1; optimizer=auto sets it to 0
    double warmup_momentum; // 0.8: SGD's momentum at iteration 0
    double momentum;        // args.momentum, 0.937: SGD's momentum at the end of warmup (even
                            // when auto built SGD with 0.9, as Ultralytics does)
    int nbs;                // 64: nominal batch size
    int batch;              // the batch size (Ultralytics' self.batch_size)
} ScheduleConfig;

// lf(e) = max(1 - e/epochs, 0) * (1 - lrf) + lrf (cos_lr off).
double schedule_lf(int epoch, int epochs, double lrf);
// np.interp(x, [x0, x1], [y0, y1]) with x0 < x1: y0 left of x0, y1 from x1 on, else
// slope*(x - x0) + y0 with slope = (y1 - y0)/(x1 - x0).
double schedule_interp(double x, double x0, double x1, double y0, double y1);
// nw = max(round(warmup_epochs * nb), 100), or -1 when warmup_epochs <= 0 (no warmup).
int64_t schedule_warmup_iters(double warmup_epochs, int64_t nb);
// Outside warmup: max(round(nbs / batch), 1).
int schedule_base_accumulate(int nbs, int batch);
// During warmup (ni <= nw): max(1, round(interp(ni, [0, nw], [1, nbs / batch]))).
int schedule_warmup_accumulate(int64_t ni, int64_t nw, int nbs, int batch);
// The decay build_optimizer gets: weight_decay * batch * accumulate / nbs.
double schedule_weight_decay(double weight_decay, int batch, int accumulate, int nbs);

// torch.optim.lr_scheduler.LambdaLR: construction sets last_epoch 0 and every group's lr to
// initial_lr * lf(0); each step (once per epoch, after the epoch's batches) increments
// last_epoch and sets lr = initial_lr * lf(last_epoch). Ultralytics sets last_epoch to
// start_epoch - 1 after construction (on resume) without touching the lrs.
void schedule_lambda_init(const ScheduleConfig *c, Optimizer *o, int64_t *last_epoch);
void schedule_lambda_step(const ScheduleConfig *c, Optimizer *o, int64_t *last_epoch);

// The warmup of iteration ni = i + nb*epoch, called before its forward: when ni <= nw it sets
// *accumulate, every group's lr (interp from warmup_bias_lr for the bias group, 0 for the
// others, to initial_lr * lf(epoch)) and, for SGD only (AdamW groups have no 'momentum'), the
// momentum (interp from warmup_momentum to momentum), and returns true. Otherwise it changes
// nothing and returns false. The loop steps the optimizer when ni - last_opt_step >= accumulate.
bool schedule_warmup(const ScheduleConfig *c, Optimizer *o, int64_t ni, int64_t nw, int epoch,
                     int *accumulate);

#endif
