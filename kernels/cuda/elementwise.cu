/* elementwise.cu -- unary activations and loss-side unary ops, binary ops with NumPy
 * broadcasting (forward, and the backward that sums each gradient back to its operand's
 * shape), BCE with logits, on the GPU. One element per thread; the formulas are the CPU's
 * (kernels/cpu/elementwise.c, PyTorch's operation order) with CUDA's libm, and the build
 * compiles them without contracting a*b+c into FMAs (-fmad=false), so they round as the CPU's
 * do. Every kernel is deterministic: a broadcast gradient is summed by one thread (or one
 * block's fixed tree) per gradient element, never by atomics. */
#include <math.h>

#include "kernels/cuda/cuda_util.h"

// ---- unary activations ----
// A kernel per op (its symbol is what CUPTI shows), each one line of formula.

extern "C" __global__ void relu_fwd_kernel(float *out, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

extern "C" __global__ void relu_bwd_kernel(float *dinp, const float *inp, const float *dout,
                                           int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

extern "C" __global__ void silu_fwd_kernel(float *out, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = silu_value(inp[i]);
}

extern "C" __global__ void silu_bwd_kernel(float *dinp, const float *inp, const float *dout,
                                           int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    dinp[i] = silu_grad(inp[i], dout[i]);
}

#define GELU_ALPHA ((float)M_SQRT1_2)
#define GELU_BETA ((float)(M_2_SQRTPI * M_SQRT1_2 * 0.5))

extern "C" __global__ void gelu_fwd_kernel(float *out, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = inp[i] * 0.5f * (1.0f + erff(inp[i] * GELU_ALPHA));
}

// d/dx [x Phi(x)] = Phi(x) + x phi(x)
extern "C" __global__ void gelu_bwd_kernel(float *dinp, const float *inp, const float *dout,
                                           int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    float x = inp[i];
    float cdf = 0.5f * (1.0f + erff(x * GELU_ALPHA));
    float pdf = GELU_BETA * expf(x * x * -0.5f);
    dinp[i] = dout[i] * (cdf + x * pdf);
}

extern "C" __global__ void sigmoid_fwd_kernel(float *out, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = sigmoidf(inp[i]);
}

extern "C" __global__ void sigmoid_bwd_kernel(float *dinp, const float *out, const float *dout,
                                              int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    dinp[i] = dout[i] * (1.0f - out[i]) * out[i];
}

// Ultralytics' inverse_sigmoid, eps 1e-5, as the CPU unrolls it.
#define INVSIG_EPS 1e-5f

static __device__ inline float clamp01(float x) {
    float y = x < 0.0f ? 0.0f : x;
    return y > 1.0f ? 1.0f : y;
}

extern "C" __global__ void inverse_sigmoid_fwd_kernel(float *out, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    float x = clamp01(inp[i]);
    float x1 = x < INVSIG_EPS ? INVSIG_EPS : x;
    float x2 = 1.0f - x < INVSIG_EPS ? INVSIG_EPS : 1.0f - x;
    out[i] = logf(x1 / x2);
}

// The chain autograd runs: log, div, the two clamps at eps, the rsub, the clamp to [0, 1].
extern "C" __global__ void inverse_sigmoid_bwd_kernel(float *dinp, const float *inp,
                                                      const float *dout, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    float x = clamp01(inp[i]);
    float x1 = x < INVSIG_EPS ? INVSIG_EPS : x;
    float omx = 1.0f - x;
    float x2 = omx < INVSIG_EPS ? INVSIG_EPS : omx;
    float gq = dout[i] / (x1 / x2);
    float g1 = gq / x2;
    float g2 = -gq * ((x1 / x2) / x2);
    float gx = (x >= INVSIG_EPS ? g1 : 0.0f) + -(omx >= INVSIG_EPS ? g2 : 0.0f);
    dinp[i] = inp[i] >= 0.0f && inp[i] <= 1.0f ? gx : 0.0f;
}

extern "C" __global__ void exp_fwd_kernel(float *out, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = expf(inp[i]);
}

extern "C" __global__ void exp_bwd_kernel(float *dinp, const float *out, const float *dout,
                                          int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    dinp[i] = dout[i] * out[i];
}

extern "C" __global__ void log_fwd_kernel(float *out, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = logf(inp[i]);
}

extern "C" __global__ void log_bwd_kernel(float *dinp, const float *inp, const float *dout,
                                          int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    dinp[i] = dout[i] / inp[i];
}

extern "C" __global__ void abs_fwd_kernel(float *out, const float *inp, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = fabsf(inp[i]);
}

extern "C" __global__ void abs_bwd_kernel(float *dinp, const float *inp, const float *dout,
                                          int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    float sgn = (float)(inp[i] > 0.0f) - (float)(inp[i] < 0.0f);
    dinp[i] = dout[i] * sgn;
}

// torch.pow(x, e) on a float tensor: the exponents ATen special-cases, else powf.
static __device__ inline float pow_torch(float x, float e) {
    if (e == 0.5f) return sqrtf(x);
    if (e == 2.0f) return x * x;
    if (e == 3.0f) return x * x * x;
    if (e == -0.5f) return 1.0f / sqrtf(x);
    if (e == -1.0f) return 1.0f / x;
    if (e == -2.0f) return 1.0f / (x * x);
    return powf(x, e);
}

extern "C" __global__ void pow_scalar_fwd_kernel(float *out, const float *inp, float e, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = pow_torch(inp[i], e);
}

extern "C" __global__ void pow_scalar_bwd_kernel(float *dinp, const float *inp, const float *dout,
                                                 float e, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    dinp[i] = e == 0.0f ? 0.0f : dout[i] * (e * pow_torch(inp[i], e - 1.0f)); // e 0: zeros (PyTorch)
}

extern "C" __global__ void clamp_fwd_kernel(float *out, const float *inp, float lo, float hi,
                                            int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    float y = inp[i] < lo ? lo : inp[i]; // comparisons with NaN are false: NaN stays
    out[i] = y > hi ? hi : y;
}

extern "C" __global__ void clamp_bwd_kernel(float *dinp, const float *inp, const float *dout,
                                            float lo, float hi, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    dinp[i] = inp[i] >= lo && inp[i] <= hi ? dout[i] : 0.0f;
}

extern "C" __global__ void scale_fwd_kernel(float *out, const float *inp, float s, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = s * inp[i];
}

extern "C" __global__ void add_scalar_fwd_kernel(float *out, const float *inp, float s, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    out[i] = inp[i] + s;
}

// ---- launchers of the unary kernels: nothing to do for n <= 0, else one thread per element ----

void relu_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    relu_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void relu_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
    if (n <= 0) return;
    relu_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, inp, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

void silu_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    silu_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void silu_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
    if (n <= 0) return;
    silu_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, inp, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    gelu_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
    if (n <= 0) return;
    gelu_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, inp, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

void sigmoid_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    sigmoid_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void sigmoid_bwd_cuda(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n) {
    if (n <= 0) return;
    sigmoid_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, out, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

void inverse_sigmoid_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    inverse_sigmoid_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void inverse_sigmoid_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout,
                              int64_t n) {
    if (n <= 0) return;
    inverse_sigmoid_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, inp, dout,
                                                                                  n);
    CUDA_CHECK(cudaGetLastError());
}

void exp_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    exp_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void exp_bwd_cuda(KernelCtx *kc, float *dinp, const float *out, const float *dout, int64_t n) {
    if (n <= 0) return;
    exp_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, out, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

void log_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    log_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void log_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
    if (n <= 0) return;
    log_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, inp, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

void abs_fwd_cuda(KernelCtx *kc, float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    abs_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, n);
    CUDA_CHECK(cudaGetLastError());
}

void abs_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, int64_t n) {
    if (n <= 0) return;
    abs_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, inp, dout, n);
    CUDA_CHECK(cudaGetLastError());
}

void pow_scalar_fwd_cuda(KernelCtx *kc, float *out, const float *inp, float e, int64_t n) {
    if (n <= 0) return;
    pow_scalar_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, e, n);
    CUDA_CHECK(cudaGetLastError());
}

void pow_scalar_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float e,
                         int64_t n) {
    if (n <= 0) return;
    pow_scalar_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, inp, dout, e, n);
    CUDA_CHECK(cudaGetLastError());
}

void clamp_fwd_cuda(KernelCtx *kc, float *out, const float *inp, float lo, float hi, int64_t n) {
    if (n <= 0) return;
    clamp_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, lo, hi, n);
    CUDA_CHECK(cudaGetLastError());
}

void clamp_bwd_cuda(KernelCtx *kc, float *dinp, const float *inp, const float *dout, float lo,
                    float hi, int64_t n) {
    if (n <= 0) return;
    clamp_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dinp, inp, dout, lo, hi, n);
    CUDA_CHECK(cudaGetLastError());
}

void scale_fwd_cuda(KernelCtx *kc, float *out, const float *inp, float s, int64_t n) {
    if (n <= 0) return;
    scale_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, s, n);
    CUDA_CHECK(cudaGetLastError());
}

void add_scalar_fwd_cuda(KernelCtx *kc, float *out, const float *inp, float s, int64_t n) {
    if (n <= 0) return;
    add_scalar_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, inp, s, n);
    CUDA_CHECK(cudaGetLastError());
}

// ---- binary ops with broadcasting ----
// The shapes are padded to nd <= BC_MAX dims; a stride is 0 along a dim an operand broadcasts.
#define BC_MAX 8

typedef struct Bcast {
    int nd;
    int64_t out_shape[BC_MAX];
    int64_t out_stride[BC_MAX];     // contiguous strides of the output (and of dout)
    int64_t sa[BC_MAX], sb[BC_MAX]; // strides of a and b along the output's dims
    int64_t n;                      // numel of the output
} Bcast;

static Bcast bcast_make(int ndim, const int64_t *as, const int64_t *bs) {
    CHECK(ndim >= 0 && ndim <= BC_MAX, "broadcast: ndim %d out of range", ndim);
    Bcast bc = {};
    bc.nd = ndim;
    int64_t ra = 1, rb = 1, ro = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        CHECK(as[d] == bs[d] || as[d] == 1 || bs[d] == 1, "broadcast: dim %d is %lld vs %lld", d,
              (long long)as[d], (long long)bs[d]);
        bc.out_shape[d] = MAX(as[d], bs[d]);
        if (as[d] == 0 || bs[d] == 0) bc.out_shape[d] = 0;
        bc.out_stride[d] = ro;
        bc.sa[d] = as[d] == 1 ? 0 : ra;
        bc.sb[d] = bs[d] == 1 ? 0 : rb;
        ro *= bc.out_shape[d];
        ra *= as[d];
        rb *= bs[d];
    }
    bc.n = ro;
    return bc;
}

enum BinaryOp { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAXIMUM, OP_MINIMUM };

// PyTorch's maximum/minimum propagate NaN from either side.
static __device__ inline float binary_value(int op, float x, float y) {
    switch (op) {
    case OP_ADD:
        return x + y;
    case OP_SUB:
        return x - y;
    case OP_MUL:
        return x * y;
    case OP_DIV:
        return x / y;
    case OP_MAXIMUM:
        return isnan(x) ? x : isnan(y) ? y : (x > y ? x : y);
    default:
        return isnan(x) ? x : isnan(y) ? y : (x < y ? x : y);
    }
}

// The gradient term of operand `which` (0: a, 1: b) at one output element: g = dout there,
// x and y the operands there. derivatives.yaml: maximum's grad is where(a == b, g / 2, g)
// masked to 0 where the operand lost.
static __device__ inline float binary_grad(int op, int which, float g, float x, float y) {
    switch (op) {
    case OP_ADD:
        return g;
    case OP_SUB:
        return which ? -g : g;
    case OP_MUL:
        return which ? g * x : g * y;
    case OP_DIV:
        return which ? -g * ((x / y) / y) : g / y;
    case OP_MAXIMUM:
        return x == y ? g / 2.0f : ((which ? y < x : x < y) ? 0.0f : g);
    default:
        return x == y ? g / 2.0f : ((which ? y > x : x > y) ? 0.0f : g);
    }
}

// Offsets into a and b of output element i.
static __device__ inline void bcast_offsets(const Bcast &bc, int64_t i, int64_t *oa, int64_t *ob) {
    int64_t a = 0, b = 0;
    for (int d = bc.nd - 1; d >= 0; d--) {
        int64_t k = i % bc.out_shape[d];
        i /= bc.out_shape[d];
        a += k * bc.sa[d];
        b += k * bc.sb[d];
    }
    *oa = a;
    *ob = b;
}

static __device__ inline void binary_fwd_one(int op, float *out, const float *a, const float *b,
                                             const Bcast &bc) {
    int64_t i = thread_index(), oa, ob;
    if (i >= bc.n) return;
    bcast_offsets(bc, i, &oa, &ob);
    out[i] = binary_value(op, a[oa], b[ob]);
}

extern "C" __global__ void add_fwd_kernel(float *out, const float *a, const float *b, Bcast bc) {
    binary_fwd_one(OP_ADD, out, a, b, bc);
}
extern "C" __global__ void sub_fwd_kernel(float *out, const float *a, const float *b, Bcast bc) {
    binary_fwd_one(OP_SUB, out, a, b, bc);
}
extern "C" __global__ void mul_fwd_kernel(float *out, const float *a, const float *b, Bcast bc) {
    binary_fwd_one(OP_MUL, out, a, b, bc);
}
extern "C" __global__ void div_fwd_kernel(float *out, const float *a, const float *b, Bcast bc) {
    binary_fwd_one(OP_DIV, out, a, b, bc);
}
extern "C" __global__ void maximum_fwd_kernel(float *out, const float *a, const float *b,
                                              Bcast bc) {
    binary_fwd_one(OP_MAXIMUM, out, a, b, bc);
}
extern "C" __global__ void minimum_fwd_kernel(float *out, const float *a, const float *b,
                                              Bcast bc) {
    binary_fwd_one(OP_MINIMUM, out, a, b, bc);
}

typedef void (*BinaryFwdKernel)(float *, const float *, const float *, Bcast);
static const BinaryFwdKernel fwd_kernels[] = {add_fwd_kernel,     sub_fwd_kernel,
                                              mul_fwd_kernel,     div_fwd_kernel,
                                              maximum_fwd_kernel, minimum_fwd_kernel};

static void binary_fwd(KernelCtx *kc, int op, float *out, const float *a, const float *b, int ndim,
                       const int64_t *as, const int64_t *bs) {
    Bcast bc = bcast_make(ndim, as, bs);
    if (bc.n == 0) return;
    fwd_kernels[op]<<<blocks_for(bc.n), CUDA_THREADS, 0, stream_of(kc)>>>(out, a, b, bc);
    CUDA_CHECK(cudaGetLastError());
}

// One operand's gradient: its element i (in its own contiguous layout) sums the term over the
// output elements that read it: the dims it keeps fix their index, the dims it broadcasts
// (reduced: size 1 in the operand, more in the output) run over row-major, as the CPU's sum.
typedef struct GradArgs {
    Bcast bc;
    int which;               // 0: a's gradient, 1: b's
    int64_t x_shape[BC_MAX]; // that operand's shape, padded to bc.nd
    int64_t nx, n_red;       // its numel; output elements per gradient element
} GradArgs;

// Offsets into dout, a and b of the first output element that reads operand element i.
static __device__ inline void grad_base(const GradArgs &ga, int64_t i, int64_t *o, int64_t *a,
                                        int64_t *b) {
    *o = *a = *b = 0;
    for (int d = ga.bc.nd - 1; d >= 0; d--) {
        if (ga.x_shape[d] == 1) continue; // reduced (or a size-1 dim of both): index 0
        int64_t k = i % ga.x_shape[d];
        i /= ga.x_shape[d];
        *o += k * ga.bc.out_stride[d], *a += k * ga.bc.sa[d], *b += k * ga.bc.sb[d];
    }
}

// Offsets of the r-th (row-major) combination of the reduced dims, added to the base.
static __device__ inline void grad_step(const GradArgs &ga, int64_t r, int64_t *o, int64_t *a,
                                        int64_t *b) {
    for (int d = ga.bc.nd - 1; d >= 0; d--) {
        if (ga.x_shape[d] != 1 || ga.bc.out_shape[d] == 1) continue;
        int64_t k = r % ga.bc.out_shape[d];
        r /= ga.bc.out_shape[d];
        *o += k * ga.bc.out_stride[d], *a += k * ga.bc.sa[d], *b += k * ga.bc.sb[d];
    }
}

// Small reductions: one thread per gradient element sums its n_red terms in order (double).
static __device__ inline void binary_grad_thread(int op, float *dx, const float *dout,
                                                 const float *a, const float *b,
                                                 const GradArgs &ga) {
    int64_t i = thread_index(), o0, a0, b0;
    if (i >= ga.nx) return;
    grad_base(ga, i, &o0, &a0, &b0);
    double s = 0;
    for (int64_t r = 0; r < ga.n_red; r++) {
        int64_t o = o0, oa = a0, ob = b0;
        grad_step(ga, r, &o, &oa, &ob);
        s += binary_grad(op, ga.which, dout[o], a[oa], b[ob]);
    }
    dx[i] += (float)s;
}

// Large reductions (a bias-like operand): one block per gradient element, each thread summing
// every CUDA_THREADS-th term, then the block's fixed tree.
static __device__ inline void binary_grad_block(int op, float *dx, const float *dout,
                                                const float *a, const float *b,
                                                const GradArgs &ga) {
    int64_t i = blockIdx.x, o0, a0, b0;
    if (i >= ga.nx) return; // the whole block leaves together
    grad_base(ga, i, &o0, &a0, &b0);
    double s = 0;
    for (int64_t r = threadIdx.x; r < ga.n_red; r += CUDA_THREADS) {
        int64_t o = o0, oa = a0, ob = b0;
        grad_step(ga, r, &o, &oa, &ob);
        s += binary_grad(op, ga.which, dout[o], a[oa], b[ob]);
    }
    s = block_reduce<double>(s, BLOCK_SUM);
    if (threadIdx.x == 0) dx[i] += (float)s;
}

extern "C" __global__ void add_bwd_kernel(float *dx, const float *dout, const float *a,
                                          const float *b, GradArgs ga) {
    binary_grad_thread(OP_ADD, dx, dout, a, b, ga);
}
extern "C" __global__ void sub_bwd_kernel(float *dx, const float *dout, const float *a,
                                          const float *b, GradArgs ga) {
    binary_grad_thread(OP_SUB, dx, dout, a, b, ga);
}
extern "C" __global__ void mul_bwd_kernel(float *dx, const float *dout, const float *a,
                                          const float *b, GradArgs ga) {
    binary_grad_thread(OP_MUL, dx, dout, a, b, ga);
}
extern "C" __global__ void div_bwd_kernel(float *dx, const float *dout, const float *a,
                                          const float *b, GradArgs ga) {
    binary_grad_thread(OP_DIV, dx, dout, a, b, ga);
}
extern "C" __global__ void maximum_bwd_kernel(float *dx, const float *dout, const float *a,
                                              const float *b, GradArgs ga) {
    binary_grad_thread(OP_MAXIMUM, dx, dout, a, b, ga);
}
extern "C" __global__ void minimum_bwd_kernel(float *dx, const float *dout, const float *a,
                                              const float *b, GradArgs ga) {
    binary_grad_thread(OP_MINIMUM, dx, dout, a, b, ga);
}
extern "C" __global__ void add_bwd_sum_kernel(float *dx, const float *dout, const float *a,
                                              const float *b, GradArgs ga) {
    binary_grad_block(OP_ADD, dx, dout, a, b, ga);
}
extern "C" __global__ void sub_bwd_sum_kernel(float *dx, const float *dout, const float *a,
                                              const float *b, GradArgs ga) {
    binary_grad_block(OP_SUB, dx, dout, a, b, ga);
}
extern "C" __global__ void mul_bwd_sum_kernel(float *dx, const float *dout, const float *a,
                                              const float *b, GradArgs ga) {
    binary_grad_block(OP_MUL, dx, dout, a, b, ga);
}
extern "C" __global__ void div_bwd_sum_kernel(float *dx, const float *dout, const float *a,
                                              const float *b, GradArgs ga) {
    binary_grad_block(OP_DIV, dx, dout, a, b, ga);
}
extern "C" __global__ void maximum_bwd_sum_kernel(float *dx, const float *dout, const float *a,
                                                  const float *b, GradArgs ga) {
    binary_grad_block(OP_MAXIMUM, dx, dout, a, b, ga);
}
extern "C" __global__ void minimum_bwd_sum_kernel(float *dx, const float *dout, const float *a,
                                                  const float *b, GradArgs ga) {
    binary_grad_block(OP_MINIMUM, dx, dout, a, b, ga);
}

typedef void (*BinaryBwdKernel)(float *, const float *, const float *, const float *, GradArgs);
static const BinaryBwdKernel bwd_kernels[] = {add_bwd_kernel,     sub_bwd_kernel,
                                              mul_bwd_kernel,     div_bwd_kernel,
                                              maximum_bwd_kernel, minimum_bwd_kernel};
static const BinaryBwdKernel bwd_sum_kernels[] = {add_bwd_sum_kernel,     sub_bwd_sum_kernel,
                                                  mul_bwd_sum_kernel,     div_bwd_sum_kernel,
                                                  maximum_bwd_sum_kernel, minimum_bwd_sum_kernel};

// Reductions of at least this many terms per gradient element take a block each.
#define GRAD_BLOCK_MIN 1024

static void binary_grad_launch(KernelCtx *kc, int op, int which, float *dx, const float *dout,
                               const float *a, const float *b, const Bcast &bc, const int64_t *xs) {
    GradArgs ga = {};
    ga.bc = bc;
    ga.which = which;
    ga.nx = 1;
    for (int d = 0; d < bc.nd; d++) {
        ga.x_shape[d] = xs[d];
        ga.nx *= xs[d];
    }
    ga.n_red = bc.n / ga.nx;
    if (ga.n_red >= GRAD_BLOCK_MIN)
        bwd_sum_kernels[op]<<<grid_of(ga.nx), CUDA_THREADS, 0, stream_of(kc)>>>(dx, dout, a, b, ga);
    else
        bwd_kernels[op]<<<blocks_for(ga.nx), CUDA_THREADS, 0, stream_of(kc)>>>(dx, dout, a, b, ga);
    CUDA_CHECK(cudaGetLastError());
}

static void binary_bwd(KernelCtx *kc, int op, float *da, float *db, const float *dout,
                       const float *a, const float *b, int ndim, const int64_t *as,
                       const int64_t *bs) {
    Bcast bc = bcast_make(ndim, as, bs);
    if (bc.n == 0) return; // an empty output: every gradient stays as it is
    if (da) binary_grad_launch(kc, op, 0, da, dout, a, b, bc, as);
    if (db) binary_grad_launch(kc, op, 1, db, dout, a, b, bc, bs);
}

void add_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, OP_ADD, out, a, b, ndim, a_shape, b_shape);
}
void sub_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, OP_SUB, out, a, b, ndim, a_shape, b_shape);
}
void mul_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, OP_MUL, out, a, b, ndim, a_shape, b_shape);
}
void div_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, OP_DIV, out, a, b, ndim, a_shape, b_shape);
}
void maximum_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                      const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, OP_MAXIMUM, out, a, b, ndim, a_shape, b_shape);
}
void minimum_fwd_cuda(KernelCtx *kc, float *out, const float *a, const float *b, int ndim,
                      const int64_t *a_shape, const int64_t *b_shape) {
    binary_fwd(kc, OP_MINIMUM, out, a, b, ndim, a_shape, b_shape);
}

// add and sub read neither operand: dout stands in for both (every operand offset is in
// bounds for it: an operand never has more elements than the output).
void add_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, OP_ADD, da, db, dout, dout, dout, ndim, a_shape, b_shape);
}
void sub_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, int ndim,
                  const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, OP_SUB, da, db, dout, dout, dout, ndim, a_shape, b_shape);
}
void mul_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                  const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, OP_MUL, da, db, dout, a, b, ndim, a_shape, b_shape);
}
void div_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                  const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, OP_DIV, da, db, dout, a, b, ndim, a_shape, b_shape);
}
void maximum_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                      const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, OP_MAXIMUM, da, db, dout, a, b, ndim, a_shape, b_shape);
}
void minimum_bwd_cuda(KernelCtx *kc, float *da, float *db, const float *dout, const float *a,
                      const float *b, int ndim, const int64_t *a_shape, const int64_t *b_shape) {
    binary_bwd(kc, OP_MINIMUM, da, db, dout, a, b, ndim, a_shape, b_shape);
}

// ---- BCE with logits (PyTorch 1.13's stable form, as the CPU) ----
extern "C" __global__ void bce_logits_fwd_kernel(float *out, const float *x, const float *y,
                                                 int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    float m = -x[i] > 0.0f ? -x[i] : 0.0f;
    out[i] = (1.0f - y[i]) * x[i] + m + logf(expf(-m) + expf(-x[i] - m));
}

extern "C" __global__ void bce_logits_bwd_kernel(float *dx, float *dy, const float *dout,
                                                 const float *x, const float *y, int64_t n) {
    int64_t i = thread_index();
    if (i >= n) return;
    if (dx) dx[i] += (1.0f / (1.0f + expf(-x[i])) - y[i]) * dout[i];
    if (dy) dy[i] += -x[i] * dout[i];
}

void bce_logits_fwd_cuda(KernelCtx *kc, float *out, const float *x, const float *y, int64_t n) {
    if (n <= 0) return;
    bce_logits_fwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(out, x, y, n);
    CUDA_CHECK(cudaGetLastError());
}

void bce_logits_bwd_cuda(KernelCtx *kc, float *dx, float *dy, const float *dout, const float *x,
                         const float *y, int64_t n) {
    if (n <= 0 || (!dx && !dy)) return;
    bce_logits_bwd_kernel<<<blocks_for(n), CUDA_THREADS, 0, stream_of(kc)>>>(dx, dy, dout, x, y, n);
    CUDA_CHECK(cudaGetLastError());
}
