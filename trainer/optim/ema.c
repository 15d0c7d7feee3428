/* ema.c -- ModelEMA (see ema.h). */
#include "trainer/optim/ema.h"

#include <math.h>
#include <string.h>

#include "kernels/base.h"

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

// v *= d; v += (1 - d) * m: torch casts both Python scalars to float32 and rounds each op.
// v: host (the EMA's copy); m: the model's tensor, mapped to the host for the loop.
static void average(float *v, const Tensor *t, float d, float one_minus_d) {
    int64_t n = t->n;
    const float *m = host_map(t->dev, t->data, n, true);
    for (int64_t j = 0; j < n; j++) {
        float scaled = v[j] * d;
        float pulled = one_minus_d * m[j];
        v[j] = scaled + pulled;
    }
    host_unmap(t->dev, t->data, (float *)m, n, false);
}

void ema_update(Ema *e, const Registry *model) {
    CHECK(model->n_params == e->n_params && model->n_buffers == e->n_buffers,
          "EMA made from another model (%d/%d params, %d/%d buffers)", model->n_params, e->n_params,
          model->n_buffers, e->n_buffers);
    e->updates++;
    double d = ema_decay_at(e, e->updates);
    float df = (float)d, one_minus_d = (float)(1.0 - d);
    for (int i = 0; i < e->n_params; i++)
        average(e->params + e->param_offset[i], model->params[i], df, one_minus_d);
    for (int b = 0; b < e->n_buffers; b++) {
        const RegBuffer *rb = &model->buffers[b];
        if (rb->t) average(e->buffers + e->buffer_offset[b], rb->t, df, one_minus_d);
    }
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
    CHECK(model->n_params == e->n_params && model->n_buffers == e->n_buffers,
          "EMA made from another model");
    for (int i = 0; i < e->n_params; i++) swap_values(e->params + e->param_offset[i], model->params[i]);
    for (int b = 0; b < e->n_buffers; b++) {
        RegBuffer *rb = &model->buffers[b];
        if (rb->t) {
            swap_values(e->buffers + e->buffer_offset[b], rb->t);
        } else {
            int64_t keep = *rb->count;
            *rb->count = e->counters[b];
            e->counters[b] = keep;
        }
    }
}
