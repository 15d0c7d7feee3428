/* cublas_v2.h -- the CUDA emulation's stand-in for the header of that name (tests/cuda_emu/emu.h). */
#include "tests/cuda_emu/emu.h"
