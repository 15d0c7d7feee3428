/* backend.c -- backend_get(): the only place in kernels/ that knows which backends this build
 * has (USE_CUDA). */
#include "kernels/backend.h"
#include "kernels/base.h"

extern const Backend backend_cpu;
extern const Backend backend_fake;
#ifdef USE_CUDA
extern const Backend backend_cuda;
#endif

const Backend *backend_get(Device dev) {
    switch (dev) {
    case DEV_CPU: return &backend_cpu;
    case DEV_FAKE: return &backend_fake;
#ifdef USE_CUDA
    case DEV_CUDA: return &backend_cuda;
#else
    case DEV_CUDA: return NULL;
#endif
    }
    return NULL;
}

const char *device_name(Device dev) {
    switch (dev) {
    case DEV_CPU: return "cpu";
    case DEV_CUDA: return "cuda";
    case DEV_FAKE: return "fake";
    }
    return "?";
}

const Backend *backend_need(Device dev) {
    const Backend *be = backend_get(dev);
    if (!be) DIE(2, "device %s is not available in this build (built without CUDA: make CUDA=1)",
                 device_name(dev));
    return be;
}
