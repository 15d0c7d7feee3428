"""collectives.py -- the user's own collectives (torch.distributed.all_reduce, broadcast,
all_gather, all_gather_into_tensor, reduce, barrier): COLL_LAUNCH before the call, with the
sequence number the group will give it, and COLL_DONE when it completed (a blocking call: when
it returns; async_op=True: when its future or, on NCCL, its work completes). While a blocking
call waits, the rank's live phase is "collective": the launcher's watchdog tells a hang from a
straggler by it. Patched in torch.distributed and in distributed_c10d (whose own helpers, such
as all_gather_object, call them by their module names). Calls inside ddpdbg's comm hook, and
one collective calling another, are recorded once.
"""
import functools
import inspect

import torch
import torch.distributed as dist

from ddpdbg import probe as P

# name -> (probe op, position of the tensor whose numel is recorded, or None)
WRAPPED = {
    "all_reduce": (P.OP_ALLREDUCE, "tensor"),
    "reduce": (P.OP_ALLREDUCE, "tensor"),
    "broadcast": (P.OP_BROADCAST, "tensor"),
    "all_gather": (P.OP_ALLGATHER, "tensor"),
    "all_gather_into_tensor": (P.OP_ALLGATHER, "input_tensor"),
    "_all_gather_base": (P.OP_ALLGATHER, "input_tensor"),
    "barrier": (P.OP_BARRIER, None),
}


def install(S):
    c10d = dist.distributed_c10d
    for name, (op, tensor_arg) in WRAPPED.items():
        orig = getattr(c10d, name, None)
        if orig is None:  # a name this torch does not have (all_gather_into_tensor: 1.13+)
            continue
        wrapper = wrap(S, orig, name, op, tensor_arg)
        setattr(c10d, name, wrapper)
        if getattr(dist, name, None) is orig:
            setattr(dist, name, wrapper)


def wrap(S, orig, name, op, tensor_arg):
    signature = inspect.signature(orig)

    @functools.wraps(orig)
    def collective(*args, **kwargs):
        if getattr(S.local, "quiet", False) or not S.on():
            return orig(*args, **kwargs)
        try:
            call = signature.bind(*args, **kwargs)
            group = call.arguments.get("group")
            pg = dist.distributed_c10d._get_default_group() if group in (None, dist.GroupMember.WORLD) else group
            if dist.distributed_c10d._rank_not_in_group(pg):
                return orig(*args, **kwargs)
            async_op = bool(call.arguments.get("async_op", False))
            tensor = call.arguments.get(tensor_arg) if tensor_arg else None
            numel = tensor.numel() if isinstance(tensor, torch.Tensor) else 0
            seq = S.seq_now(pg) + 1  # the number the group gives the collective it issues next
            S.launched(pg, seq, op, -1, numel, name)
            prev = S.phase
            if not async_op:
                S.set_phase(P.PHASE_COLLECTIVE)
        except Exception as e:
            S.fail(name, e)
            return orig(*args, **kwargs)
        S.local.quiet = True
        try:
            result = orig(*args, **kwargs)
        except Exception as e:
            S.local.quiet = False
            try:
                S.done(S.it, seq, op, -1, numel, name, e)
                S.set_phase(prev)
            except Exception as e2:
                S.fail(name, e2)
            raise
        S.local.quiet = False
        try:
            S.seq_recorded[pg] = max(S.seq_recorded.get(pg, 0), S.seq_now(pg))
            if async_op and result is not None:
                S.watch_future(pg, result.get_future(), result, seq, op, -1, numel, name)
            else:
                S.done(S.it, seq, op, -1, numel, name)
                S.set_phase(prev)
        except Exception as e:
            S.fail(name, e)
        return result

    collective.__wrapped__ = orig
    return collective
