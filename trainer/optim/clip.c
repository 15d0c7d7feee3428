/* clip.c -- clip_grad_norm_ (see clip.h). */
#include "trainer/optim/clip.h"

#include <math.h>

#include "kernels/base.h"
#include "trainer/optim/host_loop.h"

// The sum of squares of g[0..n), in double, in index order: the order of every thread count
// (one tensor's sum is never split across threads), so the norm is the same bit for bit.
static double sum_of_squares(const float *g, int64_t n) {
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) sum += (double)g[j] * (double)g[j];
    return sum;
}

typedef struct ScalePass {
    float **grads; // the defined grads on the host
    float coef;
} ScalePass;

HOST_LOOP_VECTORIZED
static void scale_slice(float *restrict g, float coef, int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t j = begin; j < end; j++) g[j] *= coef;
}

static void scale_piece(void *ctx, int i, int64_t begin, int64_t end) {
    const ScalePass *pass = ctx;
    scale_slice(pass->grads[i], pass->coef, begin, end);
}

float clip_grad_norm(Tensor *const *params, int n_params, double max_norm) {
    // The defined grads, all mapped to the host first, on this thread (a device's staging
    // copies are made with this thread's device current).
    size_t n = (size_t)MAX(n_params, 1);
    ScalePass pass = {.grads = xcalloc(n, sizeof(float *))};
    int64_t *lengths = xcalloc(n, sizeof(int64_t)); // 0: grad undefined
    double *sums = xcalloc(n, sizeof(double));
    int n_defined = 0;
    for (int i = 0; i < n_params; i++) {
        if (!params[i]->grad_defined) continue;
        CHECK(params[i]->grad, "parameter %d: grad_defined without a grad buffer", i);
        pass.grads[i] = host_map(params[i]->dev, params[i]->grad, params[i]->n, true);
        lengths[i] = params[i]->n;
        n_defined++;
    }
    // Each tensor's sum of squares on whichever thread of the team is free.
#pragma omp parallel for schedule(dynamic, 1) if (n_defined > 1)
    for (int i = 0; i < n_params; i++)
        if (params[i]->grad_defined) sums[i] = sum_of_squares(pass.grads[i], lengths[i]);
    // torch.norm(p.grad, 2) of each tensor, rounded to float32 like torch's result, then the
    // norm of those norms, summed in parameter order.
    double sum = 0.0;
    for (int i = 0; i < n_params; i++) {
        if (!params[i]->grad_defined) continue;
        double norm = (float)sqrt(sums[i]);
        sum += norm * norm;
    }
    float total = n_defined ? (float)sqrt(sum) : 0.0f;
    // max_norm / (total_norm + 1e-6) is Tensor.__rtruediv__: reciprocal() * max_norm
    pass.coef = (1.0f / (total + 1e-6f)) * (float)max_norm;
    if (pass.coef > 1.0f) pass.coef = 1.0f; // clamp(max=1.0); NaN passes through as in torch.clamp
    bool scale = n_defined > 0 && pass.coef != 1.0f; // multiplying by 1 changes nothing
    if (scale) host_loop_run(n_params, lengths, scale_piece, &pass);
    for (int i = 0; i < n_params; i++)
        if (params[i]->grad_defined)
            host_unmap(params[i]->dev, params[i]->grad, pass.grads[i], params[i]->n, scale);
    free(pass.grads);
    free(lengths);
    free(sums);
    return total;
}
