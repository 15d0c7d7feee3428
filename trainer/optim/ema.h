/* ema.h -- Ultralytics' ModelEMA (utils/torch_utils.py, 8.1.34): an exponential moving average
 * of the model's state dict, updated after every optimizer step, with decay
 * d = decay * (1 - exp(-updates / tau)) (0.9999, 2000) so that early updates follow the model.
 * Floating-point entries (every parameter, BatchNorm running_mean/var) are averaged:
 *     v *= d; v += (1 - d) * model_v           (float32, in that order, as torch).
 * Integer entries (num_batches_tracked) are skipped, exactly as ModelEMA's
 * `if v.dtype.is_floating_point`: they keep the value they had when the EMA was made (0 for a
 * fresh model; a checkpoint's on resume). Host copies, read and written through
 * the backend (tensor_read / tensor_write), so the model may be on any device; an update maps
 * the model's tensors to the host (host_map) and averages on the backend's threads, the same
 * bits on any number of them (host_loop.h). */
#ifndef TRAINER_OPTIM_EMA_H
#define TRAINER_OPTIM_EMA_H

#include <stdint.h>

#include "trainer/nn/module.h"

typedef struct Ema {
    int n_params, n_buffers;     // the registry it was made from
    int64_t *param_offset;       // param i's elements start at params + param_offset[i]
    float *params;               // the averaged parameters
    int64_t *buffer_offset;      // float buffer b at buffers + buffer_offset[b]; -1 for counters
    float *buffers;              // the averaged float buffers (NULL when there are none)
    int64_t *counters;           // counters[b] for the int64 buffers (copied, never averaged)
    int64_t n_param_floats, n_buffer_floats;
    int64_t updates;             // ModelEMA.updates
    double decay, tau;           // 0.9999, 2000
} Ema;

// deepcopy(model): copies every parameter and buffer; updates 0.
void ema_init(Ema *e, const Registry *model);
void ema_free(Ema *e);
// d(updates) = decay * (1 - exp(-updates / tau)).
double ema_decay_at(const Ema *e, int64_t updates);
// ModelEMA.update: updates += 1, then averages with d(updates). model: the registry ema_init saw.
void ema_update(Ema *e, const Registry *model);
// Exchanges the values of the EMA's parameters, float buffers and counters with the model's
// (same layout): afterwards the model holds the EMA weights and the EMA the model's; a second
// call restores both bit for bit. Validation runs the training model between two swaps, as
// Ultralytics validates its EMA copy, with no second model in memory (rtdetr-l: 126 MB).
void ema_swap(Ema *e, Registry *model);

#endif
