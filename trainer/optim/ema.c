/* ema.c -- ModelEMA (see ema.h). */
#include "trainer/optim/ema.h"

#include <math.h>
#include <string.h>

#include "kernels/base.h"
#include "trainer/optim/host_loop.h"

void ema_init(Ema *e, const Registry *model) {
    memset(e, 0, sizeof *e);
    e->decay = 0.9999;
    e->tau = 2000.0;
    e->n_params = model->n_params;
    e->n_buffers = model->n_buffers;
    CHECK(e->n_params > 0, "EMA of a model without parameters");
    e->param_offset = xmalloc(sizeof(int64_t) * (size_t)e->n_params);
    for (int i = 0; i < e->n_params; i++) {
        e->param_offset[i] = e->n_param_floats;
        e->n_param_floats += model->params[i]->n;
    }
    e->params = xmalloc(sizeof(float) * (size_t)e->n_param_floats);
    if (e->n_buffers > 0) {
        e->buffer_offset = xmalloc(sizeof(int64_t) * (size_t)e->n_buffers);
        e->counters = xcalloc((size_t)e->n_buffers, sizeof(int64_t));
    }
    for (int b = 0; b < e->n_buffers; b++) {
        const RegBuffer *rb = &model->buffers[b];
        e->buffer_offset[b] = rb->t ? e->n_buffer_floats : -1;
        if (rb->t) e->n_buffer_floats += rb->t->n;
    }
    if (e->n_buffer_floats > 0) e->buffers = xmalloc(sizeof(float) * (size_t)e->n_buffer_floats);
    for (int i = 0; i < e->n_params; i++)
        tensor_read(model->params[i], e->params + e->param_offset[i]);
    for (int b = 0; b < e->n_buffers; b++) {
        const RegBuffer *rb = &model->buffers[b];
        if (rb->t) tensor_read(rb->t, e->buffers + e->buffer_offset[b]);
        else e->counters[b] = *rb->count;
    }
}

void ema_free(Ema *e) {
    free(e->param_offset);
    free(e->params);
    free(e->buffer_offset);
    free(e->buffers);
    free(e->counters);
    memset(e, 0, sizeof *e);
}

double ema_decay_at(const Ema *e, int64_t updates) {
    return e->decay * (1.0 - exp(-(double)updates / e->tau));
}

// One update is one pass (host_loop.h) over the parameters, then the float buffers: array
// k < n_params is parameter k, array n_params + b is buffer b (length 0 for a counter).
typedef struct AveragePass {
    float **ema;         // array k of the EMA's copy (host)
    const float **model; // array k of the model, mapped to the host
    float d, one_minus_d;
} AveragePass;

// v[begin, end) *= d; v += (1 - d) * m: torch casts both Python scalars to float32 and rounds
// each op.
HOST_LOOP_VECTORIZED
static void average_slice(float *restrict v, const float *restrict m, float d, float one_minus_d,
                          int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t j = begin; j < end; j++) {
        float scaled = v[j] * d;
        float pulled = one_minus_d * m[j];
        v[j] = scaled + pulled;
    }
}

static void average_piece(void *ctx, int k, int64_t begin, int64_t end) {
    const AveragePass *pass = ctx;
    average_slice(pass->ema[k], pass->model[k], pass->d, pass->one_minus_d, begin, end);
}

// The model's tensor behind array k (NULL for a counter).
static Tensor *array_tensor(const Registry *model, int k) {
    return k < model->n_params ? model->params[k] : model->buffers[k - model->n_params].t;
}

// The EMA's copy of array k (host), for a parameter or a float buffer.
static float *ema_array(const Ema *e, int k) {
    return k < e->n_params ? e->params + e->param_offset[k]
                           : e->buffers + e->buffer_offset[k - e->n_params];
}

static void check_same_model(const Ema *e, const Registry *model) {
    CHECK(model->n_params == e->n_params && model->n_buffers == e->n_buffers,
          "EMA made from another model (%d/%d params, %d/%d buffers)", model->n_params, e->n_params,
          model->n_buffers, e->n_buffers);
}

void ema_update(Ema *e, const Registry *model) {
    check_same_model(e, model);
    e->updates++;
    double d = ema_decay_at(e, e->updates);
    int n_arrays = e->n_params + e->n_buffers;
    AveragePass pass = {.ema = xcalloc((size_t)n_arrays, sizeof(float *)),
                        .model = xcalloc((size_t)n_arrays, sizeof(float *)),
                        .d = (float)d,
                        .one_minus_d = (float)(1.0 - d)};
    int64_t *lengths = xcalloc((size_t)n_arrays, sizeof(int64_t));
    for (int k = 0; k < n_arrays; k++) {
        const Tensor *t = array_tensor(model, k);
        if (!t) continue;
        pass.ema[k] = ema_array(e, k);
        pass.model[k] = host_map(t->dev, t->data, t->n, true);
        lengths[k] = t->n;
    }
    host_loop_run(n_arrays, lengths, average_piece, &pass);
    for (int k = 0; k < n_arrays; k++) {
        const Tensor *t = array_tensor(model, k);
        if (t) host_unmap(t->dev, t->data, (float *)pass.model[k], t->n, false);
    }
    free(lengths);
    free(pass.ema);
    free(pass.model);
}

// v (host, the EMA's) <-> t's data, through a host mapping of t.
static void swap_values(float *v, Tensor *t) {
    float *m = host_map(t->dev, t->data, t->n, true);
    for (int64_t j = 0; j < t->n; j++) {
        float keep = m[j];
        m[j] = v[j];
        v[j] = keep;
    }
    host_unmap(t->dev, t->data, m, t->n, true);
}

void ema_swap(Ema *e, Registry *model) {
    check_same_model(e, model);
    for (int k = 0; k < e->n_params + e->n_buffers; k++) {
        Tensor *t = array_tensor(model, k);
        if (t) {
            swap_values(ema_array(e, k), t);
        } else { // a counter (buffers only)
            int b = k - e->n_params;
            int64_t keep = *model->buffers[b].count;
            *model->buffers[b].count = e->counters[b];
            e->counters[b] = keep;
        }
    }
}
