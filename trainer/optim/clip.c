/* clip.c -- clip_grad_norm_ (see clip.h). */
#include "trainer/optim/clip.h"

#include <math.h>

#include "kernels/base.h"

// torch.norm(p.grad, 2) of one tensor, rounded to float32 like torch's result.
static float grad_norm(const Tensor *p) {
    double sum = 0.0;
    float *g = host_map(p->dev, p->grad, p->n, true);
    for (int64_t j = 0; j < p->n; j++) sum += (double)g[j] * (double)g[j];
    host_unmap(p->dev, p->grad, g, p->n, false);
    return (float)sqrt(sum);
}

float clip_grad_norm(Tensor *const *params, int n_params, double max_norm) {
    double sum = 0.0;
    int n_defined = 0;
    for (int i = 0; i < n_params; i++) {
        if (!params[i]->grad_defined) continue;
        CHECK(params[i]->grad, "parameter %d: grad_defined without a grad buffer", i);
        double norm = grad_norm(params[i]);
        sum += norm * norm;
        n_defined++;
    }
    if (n_defined == 0) return 0.0f;
    float total = (float)sqrt(sum);
    // max_norm / (total_norm + 1e-6) is Tensor.__rtruediv__: reciprocal() * max_norm
    float coef = (1.0f / (total + 1e-6f)) * (float)max_norm;
    if (coef > 1.0f) coef = 1.0f; // clamp(max=1.0); NaN passes through as in torch.clamp
    if (coef == 1.0f) return total; // multiplying by 1 changes nothing
    for (int i = 0; i < n_params; i++) {
        Tensor *p = params[i];
        if (!p->grad_defined) continue;
        float *g = host_map(p->dev, p->grad, p->n, true);
        for (int64_t j = 0; j < p->n; j++) g[j] *= coef;
        host_unmap(p->dev, p->grad, g, p->n, true);
    }
    return total;
}
