/* adamw.h -- the optimizers Ultralytics' build_optimizer makes for RT-DETR: torch.optim.AdamW
 * (and torch.optim.SGD with Nesterov momentum, which optimizer=auto picks on long runs), over
 * Ultralytics' three parameter groups, with PyTorch 1.13's per-parameter state and its exact
 * float32 operation order (single-tensor path, foreach off, amsgrad off, maximize off).
 * torch >= 2.0 computes exp_avg with lerp_ (m + (1-b1)*(g - m)), which can differ from 1.13's
 * mul_/add_ by an ulp; we follow 1.13, the version tests/golden/optim.bin comes from.
 * Not here: the lr/momentum schedule (schedule.h), clipping (clip.h), EMA (ema.h).
 * State lives in host memory and the loops are host loops over the parameters and gradients
 * mapped to the host (host_map: the memory itself on the CPU, staging copies on a device, all of
 * a step's at once), on the backend's threads and vector unit with the same bits for any thread
 * count (host_loop.h). */
#ifndef TRAINER_OPTIM_ADAMW_H
#define TRAINER_OPTIM_ADAMW_H

#include <stdbool.h>
#include <stdint.h>

#include "trainer/tensor.h"

typedef enum { OPTIM_SGD, OPTIM_ADAMW } OptimKind;

// The groups in the order of Ultralytics' optimizer.param_groups ("lr/pg0".."lr/pg2" in its
// logs). build_optimizer collects g[0] decay weights, g[1] norm weights, g[2] biases, then
// makes the optimizer from g[2] and adds g[0] and g[1]: so pg0 = biases, pg1 = decay, pg2 = norm.
typedef enum {
    OPTIM_GROUP_BIAS = 0,  // every name containing "bias": no weight decay; warmup lr from warmup_bias_lr
    OPTIM_GROUP_DECAY = 1, // everything else (conv/linear weights, in_proj_weight, embeddings)
    OPTIM_GROUP_NORM = 2,  // the weights of *Norm* modules (BatchNorm2d, LayerNorm): no decay
    OPTIM_N_GROUPS = 3
} OptimGroupId;

// One entry of optimizer.param_groups.
typedef struct OptimGroup {
    double lr;           // the lr the next step uses (schedule.h sets it)
    double initial_lr;   // LambdaLR's base lr (= the lr given to optim_init)
    double weight_decay; // AdamW: decoupled, p *= 1 - lr*wd; SGD: L2, g += wd*p
    double momentum;     // SGD: momentum (warmup ramps it); AdamW: betas[0], never ramped
    double beta2;        // AdamW: betas[1]; unused by SGD
} OptimGroup;

typedef struct Optimizer {
    OptimKind kind;
    int n_params;
    Tensor **params;    // borrowed, the model's parameter order
    uint8_t *group;     // OptimGroupId of each parameter
    OptimGroup groups[OPTIM_N_GROUPS];
    double eps;         // AdamW, 1e-8
    bool nesterov;      // SGD
    int64_t *offset;    // offset[i]: where parameter i's elements start in the state arrays
    int64_t numel;      // total parameter elements
    // PyTorch's optimizer.state[p], per parameter:
    int64_t *step;            // steps taken on this parameter (AdamW's state['step'])
    uint8_t *has_state;       // state exists: AdamW after its first step; SGD once momentum_buffer exists
    float *exp_avg;           // AdamW, numel floats (zero while has_state is 0)
    float *exp_avg_sq;        // AdamW, numel floats
    float *momentum_buffer;   // SGD, numel floats
} Optimizer;

// Ultralytics' group of a parameter from its state-dict name: "bias" anywhere -> BIAS; the
// weight of a Norm module -> NORM; else DECAY. Norm modules are recognised by the names our
// nn/ gives them (the registry records no module types): the last module component is "bn"
// (Conv's BatchNorm2d) or "norm" plus digits (LayerNorms of AIFI and the decoder layers), or
// the module is "input_proj.<k>.1" (BatchNorm2d in a Sequential) or "enc_output.1" (LayerNorm).
OptimGroupId optim_group_of(const char *name);

// Ultralytics' optimizer="auto": > 10000 iterations -> SGD(lr 0.01, momentum 0.9); otherwise
// AdamW(lr round(0.002*5/(4+nc), 6), betas (0.9, 0.999)). Auto also sets warmup_bias_lr = 0
// (the caller's job: schedule.h's ScheduleConfig).
typedef struct OptimChoice {
    OptimKind kind;
    double lr, momentum;
} OptimChoice;
OptimChoice optim_auto_choice(int64_t iterations, int nc);
// The `iterations` Ultralytics passes: ceil(dataset_len / max(batch, nbs)) * epochs.
int64_t optim_auto_iterations(int64_t dataset_len, int batch, int nbs, int epochs);
// "SGD" or "AdamW" (Ultralytics' spelling) -> 0; anything else -> -1.
int optim_parse_kind(const char *name, OptimKind *kind);
const char *optim_kind_name(OptimKind kind);

// build_optimizer: groups by optim_group_of(names[i]); every group gets `lr` (initial_lr too)
// and `momentum` (AdamW: betas = (momentum, 0.999), eps 1e-8; SGD: nesterov); DECAY gets
// weight_decay, BIAS and NORM 0. Borrows params and names (n_params of each).
void optim_init(Optimizer *o, OptimKind kind, Tensor **params, const char **names, int n_params,
                double lr, double momentum, double weight_decay);
void optim_free(Optimizer *o);
// Number of parameters in group g.
int optim_group_size(const Optimizer *o, OptimGroupId g);

// optimizer.step(): updates every parameter whose grad is defined; a parameter whose grad is
// None (grad_defined false) is skipped entirely: no step count, no moment decay, no decay.
void optim_step(Optimizer *o);
// optimizer.zero_grad(set_to_none): torch 1.13's default is false (grads become zeros and
// stay defined, so later steps update those parameters); torch 2.x's default is true (None).
void optim_zero_grad(Optimizer *o, bool set_to_none);

#endif
