/* clip.c -- clip_grad_norm_ (see clip.h). */
#include "trainer/optim/clip.h"

#include <math.h>

#include "kernels/base.h"
#include "trainer/optim/host_loop.h"

// The sum of squares is taken in blocks of SQ_BLOCK elements, each block over SQ_LANES lanes
// (element j into lane j % SQ_LANES) and its lanes added in lane order, then a tensor's blocks
// added in block order: a fixed order of double operations, so the norm is the same bit for bit
// on any thread count and any vector width (lanes are independent; optim/ is compiled without
// FMA contraction). One serial chain of double adds ran at ~4 cycles an element (25 ms a step
// on rtdetr-l's 33M gradients); lanes and blocks let both the vector unit and the threads in.
#define SQ_LANES 16
#define SQ_BLOCK ((int64_t)1 << 16)

HOST_LOOP_VECTORIZED
static double sum_of_squares(const float *restrict g, int64_t n) {
    double lane[SQ_LANES] = {0};
    int64_t j = 0;
    for (; j + SQ_LANES <= n; j += SQ_LANES) {
#pragma omp simd
        for (int l = 0; l < SQ_LANES; l++) lane[l] += (double)g[j + l] * (double)g[j + l];
    }
    for (int l = 0; j < n; j++, l++) lane[l] += (double)g[j] * (double)g[j];
    double sum = 0.0;
    for (int l = 0; l < SQ_LANES; l++) sum += lane[l];
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
    // The blocks of every tensor, on whichever thread of the team is free; then each tensor's
    // sum of its blocks' sums, in block order.
    int64_t n_blocks = 0;
    int64_t *first_block = xcalloc(n + 1, sizeof(int64_t));
    for (int i = 0; i < n_params; i++) {
        first_block[i] = n_blocks;
        n_blocks += (lengths[i] + SQ_BLOCK - 1) / SQ_BLOCK;
    }
    first_block[n_params] = n_blocks;
    double *block_sums = xcalloc((size_t)MAX(n_blocks, 1), sizeof(double));
#pragma omp parallel for schedule(dynamic, 1) if (n_blocks > 1)
    for (int64_t blk = 0; blk < n_blocks; blk++) {
        int lo = 0, hi = n_params; // the tensor i with first_block[i] <= blk < first_block[i + 1]
        while (hi - lo > 1) {
            int mid = (lo + hi) / 2;
            if (first_block[mid] <= blk) lo = mid; else hi = mid;
        }
        int64_t begin = (blk - first_block[lo]) * SQ_BLOCK;
        block_sums[blk] = sum_of_squares(pass.grads[lo] + begin, MIN(SQ_BLOCK, lengths[lo] - begin));
    }
    for (int i = 0; i < n_params; i++)
        for (int64_t blk = first_block[i]; blk < first_block[i + 1]; blk++) sums[i] += block_sums[blk];
    free(block_sums);
    free(first_block);
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
