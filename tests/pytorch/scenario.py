"""scenario.py CASE [--iters N] -- one rank of a 2-rank gloo DDP job on TinyDetector
(detect_model.py), started with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) by `ddpdbg run` in tests/cli/attach*.sh. CASE:
  nogt          rank 0's batch at iteration 1 has no ground-truth box (the field report)
  find_unused   the same, with find_unused_parameters=True: trains through it
  uneven        rank 1 has one batch more than rank 0, which then waits at a barrier (a hang)
  kill          rank 1 SIGKILLs itself in the middle of iteration 1's backward
  healthy       every batch has boxes
Prints "rank R: done, loss L" at the end; the parameters' checksum with --checksum. Options
that exercise the attach's edges: --loader-workers N (batches from a DataLoader with N forked
workers), --comm-hook default|builtin (the user's own hook: default_hooks.allreduce_hook, or the
builtin C++ ALLREDUCE), --second-ddp (a second DDP of another model, built and used once).
On a GPU (tests/gpu/check.sh): --device cuda puts the model and batches on cuda:LOCAL_RANK modulo
the GPUs there are, --backend nccl (default gloo) with --nccl-hostid: each rank claims a host of
its own (NCCL_HOSTID), NCCL's explicit opt-in for several ranks on one GPU.
"""
import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from detect_model import TinyDetector, make_batch  # noqa: E402


class Batches(torch.utils.data.Dataset):
    """Iteration it's batch of this rank (an Ultralytics-style dict)."""

    def __init__(self, rank, n, case):
        self.rank, self.n, self.case = rank, n, case

    def __len__(self):
        return self.n

    def __getitem__(self, it):
        if it >= self.n:
            raise IndexError(it)  # the end of plain iteration over a Dataset
        empty = self.case in ("nogt", "find_unused") and self.rank == 0 and it == 1
        return make_batch(self.rank, it, boxes_per_image=0 if empty else 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["nogt", "find_unused", "uneven", "kill", "healthy"])
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--checksum", action="store_true")
    ap.add_argument("--loader-workers", type=int, default=0)
    ap.add_argument("--comm-hook", choices=["default", "builtin"])
    ap.add_argument("--second-ddp", action="store_true")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--nccl-hostid", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if args.nccl_hostid:
        os.environ["NCCL_HOSTID"] = "ddpdbg-rank%s" % os.environ.get("RANK", "0")
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    model = TinyDetector().to(device)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=args.case == "find_unused")
    if args.comm_hook == "default":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif args.comm_hook == "builtin":
        register = getattr(ddp, "_register_builtin_comm_hook", None) or ddp.register_builtin_comm_hook
        register(dist.BuiltinCommHookType.ALLREDUCE)
    if args.second_ddp:
        other = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
        other(torch.ones(1, 4)).sum().backward()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    iters = args.iters + (1 if args.case == "uneven" and rank == 1 else 0)
    loss = torch.zeros(())
    batches = Batches(rank, iters, args.case)
    if args.loader_workers:
        batches = torch.utils.data.DataLoader(batches, batch_size=None,
                                              num_workers=args.loader_workers)
    for it, batch in enumerate(batches):
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        loss = ddp(batch)
        if args.case == "kill" and rank == 1 and it == 1:
            # die in the middle of the backward: when the first layer's gradient is computed,
            # after the other parameters' hooks ran
            model.backbone[0].weight.register_hook(lambda g: os.kill(os.getpid(), signal.SIGKILL))
        opt.zero_grad()
        loss.backward()
        opt.step()
    if args.case == "uneven":
        dist.barrier()
    if args.checksum:
        total = sum(float(p.double().sum().cpu()) for p in model.parameters())
        print("rank %d: checksum %.17g" % (rank, total))
    print("rank %d: done, loss %.6f" % (rank, float(loss)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
