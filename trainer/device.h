/* device.h -- the `device=` argument as Ultralytics spells it, and the trainer's default.
 *
 *   device=cpu        the CPU backend
 *   device=fake       the fake device (kernels/cpu/backend_fake.c): CPU kernels over memory
 *                     host code cannot read, for proving the trainer device-agnostic
 *   device=0          CUDA device 0 (also cuda, cuda:0)
 *   device=0,1        a list: the rank with LOCAL_RANK k takes entry k (`ddpdbg run` sets
 *                     LOCAL_RANK); a single entry is shared by every local rank
 * The default is DDPDBG_DEVICE's value (`make test DEVICE=fake` sets it), else cpu. */
#ifndef TRAINER_DEVICE_H
#define TRAINER_DEVICE_H

#include <stddef.h>

#include "kernels/backend.h"

typedef struct DeviceChoice {
    Device dev;
    int index; // the CUDA ordinal; 0 for cpu and fake
} DeviceChoice;

// Parses `spec` for the rank whose LOCAL_RANK is local_rank (>= 0). Returns 0, or -1 with
// one line in err naming the value and what was expected. A CUDA device in a build without
// the CUDA backend is an error here ("... this build has no CUDA ..."), never a fallback.
int device_parse(const char *spec, int local_rank, DeviceChoice *out, char *err, size_t errlen);

// DDPDBG_DEVICE's value when set and not empty, else "cpu".
const char *device_default_spec(void);

// Makes `d` the process's device: its backend exists and d.index is selected. Returns 0, or
// -1 with one line in err.
int device_open(DeviceChoice d, char *err, size_t errlen);

#endif
