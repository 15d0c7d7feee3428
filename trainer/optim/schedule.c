/* schedule.c -- Ultralytics' lr schedule, warmup and accumulation (see schedule.h). Python's
 * round() and numpy's .round() both round half to even: nearbyint() in the default mode. */
#include "trainer/optim/schedule.h"

#include <math.h>

#include "kernels/base.h"

double schedule_lf(int epoch, int epochs, double lrf) {
    CHECK(epochs > 0, "epochs %d", epochs);
    double left = 1.0 - (double)epoch / (double)epochs;
    return MAX(left, 0.0) * (1.0 - lrf) + lrf;
}

double schedule_interp(double x, double x0, double x1, double y0, double y1) {
    CHECK(x0 < x1, "interp needs x0 < x1 (%g, %g)", x0, x1);
    if (x <= x0) return y0; // numpy: left value, and exactly y0 at x0
    if (x >= x1) return y1;
    double slope = (y1 - y0) / (x1 - x0);
    return slope * (x - x0) + y0;
}

int64_t schedule_warmup_iters(double warmup_epochs, int64_t nb) {
    if (warmup_epochs <= 0) return -1;
    int64_t nw = (int64_t)nearbyint(warmup_epochs * (double)nb);
    return MAX(nw, 100);
}

int schedule_base_accumulate(int nbs, int batch) {
    CHECK(batch > 0, "batch %d", batch);
    int a = (int)nearbyint((double)nbs / (double)batch);
    return MAX(a, 1);
}

int schedule_warmup_accumulate(int64_t ni, int64_t nw, int nbs, int batch) {
    CHECK(batch > 0 && nw > 0, "batch %d nw %lld", batch, (long long)nw);
    double a = schedule_interp((double)ni, 0.0, (double)nw, 1.0, (double)nbs / (double)batch);
    int r = (int)nearbyint(a);
    return MAX(1, r);
}

double schedule_weight_decay(double weight_decay, int batch, int accumulate, int nbs) {
    return weight_decay * batch * accumulate / nbs; // left to right, in double, as Python
}

static void set_lrs(const ScheduleConfig *c, Optimizer *o, int64_t epoch) {
    double lf = schedule_lf((int)epoch, c->epochs, c->lrf);
    for (int g = 0; g < OPTIM_N_GROUPS; g++) o->groups[g].lr = o->groups[g].initial_lr * lf;
}

void schedule_lambda_init(const ScheduleConfig *c, Optimizer *o, int64_t *last_epoch) {
    *last_epoch = 0;
    set_lrs(c, o, 0);
}

void schedule_lambda_step(const ScheduleConfig *c, Optimizer *o, int64_t *last_epoch) {
    ++*last_epoch;
    set_lrs(c, o, *last_epoch);
}

bool schedule_warmup(const ScheduleConfig *c, Optimizer *o, int64_t ni, int64_t nw, int epoch,
                     int *accumulate) {
    if (ni > nw) return false;
    double x = (double)ni, x1 = (double)nw;
    *accumulate = schedule_warmup_accumulate(ni, nw, c->nbs, c->batch);
    double lf = schedule_lf(epoch, c->epochs, c->lrf);
    for (int g = 0; g < OPTIM_N_GROUPS; g++) {
        OptimGroup *gr = &o->groups[g];
        double start = g == OPTIM_GROUP_BIAS ? c->warmup_bias_lr : 0.0;
        gr->lr = schedule_interp(x, 0.0, x1, start, gr->initial_lr * lf);
        if (o->kind == OPTIM_SGD)
            gr->momentum = schedule_interp(x, 0.0, x1, c->warmup_momentum, c->momentum);
    }
    return true;
}
