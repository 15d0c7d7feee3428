/* clip.h -- torch.nn.utils.clip_grad_norm_(parameters, max_norm) with norm_type 2, as
 * Ultralytics calls it before every optimizer step (max_norm 10). Parameters whose grad is
 * None (grad_defined false) neither count nor change. Host loops over the gradients, all mapped
 * to the host at once (host_map), on the backend's threads (host_loop.h): each tensor's sum of
 * squares in a fixed order of blocks and vector lanes (clip.c), the tensors' norms combined in
 * parameter order, so the result is the same bit for bit on any number of threads.
 * Not bit-exact to torch: torch reduces each norm in float32 in its own order; we sum in
 * double, so the total norm agrees to float32 rounding (see tests/test_optim.c). */
#ifndef TRAINER_OPTIM_CLIP_H
#define TRAINER_OPTIM_CLIP_H

#include "trainer/tensor.h"

// total = ||(||g_1||, ..., ||g_n||)||_2 over the defined grads, as a float32 (0 when none);
// coef = max_norm / (total + 1e-6) in float32, computed as torch does (1/(total + 1e-6), then
// times max_norm) and clamped to at most 1 (torch 1.13 and 2.x both clamp and multiply); every
// defined grad is multiplied by coef. Returns total, the norm before clipping (as torch).
// A NaN or Inf total spreads to the grads, as in torch.
float clip_grad_norm(Tensor *const *params, int n_params, double max_norm);

#endif
