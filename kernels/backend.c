/* backend.c -- backend_get(): the only place in kernels/ that knows which backends this build
 * has (USE_CUDA). */
#include "kernels/backend.h"
#include "kernels/base.h"

extern const Backend backend_cpu;
#ifdef USE_CUDA
extern const Backend backend_cuda;
#endif

const Backend *backend_get(Device dev) {
    switch (dev) {
    case DEV_CPU: return &backend_cpu;
#ifdef USE_CUDA
    case DEV_CUDA: return &backend_cuda;
#else
    case DEV_CUDA: return NULL;
#endif
    }
    return NULL;
}

const Backend *backend_need(Device dev) {
    const Backend *be = backend_get(dev);
    if (!be) DIE(2, "device %s is not available in this build (built without CUDA)",
                 dev == DEV_CUDA ? "cuda" : "cpu");
    return be;
}
