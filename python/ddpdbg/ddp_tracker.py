"""ddp_tracker.py -- the per-DDP half of the attach: wraps DistributedDataParallel's __init__,
forward, register_comm_hook and register_builtin_comm_hook, and torch.autograd.backward, and
records, for the first DDP of the process (in trace schema terms, traces/README.md):
- META: every DDP setting; PARAM: the parameter table in the reducer's index order (so that our
  indices are those of PyTorch's error texts); LAYOUT: the buckets at construction (generation
  0) and after the rebuild (1), read from the reducer itself;
- FORWARD_BEGIN/END, BACKWARD_BEGIN/END, FINALIZE and the iteration (training forwards - 1);
  BATCH: boxes per image of an Ultralytics-style batch dict (img, batch_idx) given to forward;
- GRAD_READY for every gradient-ready hook, in order: a hook on each parameter's AccumulateGrad
  node registered before DDP's constructor runs before the reducer's own (torch 2.1+:
  register_post_accumulate_grad_hook, which runs inside AccumulateGrad, before any post hook);
  MARK_READY for find_unused_parameters' unused parameters (marked at the first hook, from the
  same graph search the reducer does); BUCKET_READY when a bucket's last parameter is marked;
- COLL_LAUNCH/COLL_DONE of every bucket, from a comm hook that runs the reducer's default
  allreduce (or the user's own hook) and returns its future unchanged;
- the collectives DDP issues inside PyTorch (construction, rebuild, buffers) from the group's
  sequence numbers; ERROR with the full text of errors in construction, forward and backward.
"""
import functools
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpdbg import probe as P
from ddpdbg.attach import pg_backend


def install(S):
    orig_init = DDP.__init__
    orig_forward = DDP.forward
    orig_register = DDP.register_comm_hook
    # the builtin (C++) hooks: _register_builtin_comm_hook in 1.13-2.x, without the underscore
    # in some versions; whichever this torch has
    builtin_name = next((n for n in ("_register_builtin_comm_hook", "register_builtin_comm_hook")
                         if hasattr(DDP, n)), None)
    orig_builtin = getattr(DDP, builtin_name) if builtin_name else None
    orig_backward = torch.autograd.backward

    @functools.wraps(orig_init)
    def __init__(self, module, *args, **kwargs):
        tracker = None
        try:
            tracker = DdpTracker.before_init(S, self, module, args, kwargs)
        except Exception as e:
            S.fail("DistributedDataParallel.__init__", e)
        try:
            orig_init(self, module, *args, **kwargs)
        except Exception as e:
            if tracker is not None:
                tracker.init_failed(e)
            raise
        if tracker is not None:
            tracker.after_init()

    @functools.wraps(orig_forward)
    def forward(self, *inputs, **kwargs):
        tracker = S.tracker
        if tracker is None or tracker.ddp is not self or not S.on() or not torch.is_grad_enabled():
            return orig_forward(self, *inputs, **kwargs)
        tracker.guard(tracker.begin_forward, inputs, kwargs)
        try:
            output = orig_forward(self, *inputs, **kwargs)
        except Exception as e:
            tracker.guard(tracker.forward_failed, e)
            raise
        tracker.guard(tracker.end_forward, output)
        return output

    @functools.wraps(orig_register)
    def register_comm_hook(self, state, hook):
        tracker = S.tracker
        if tracker is None or tracker.ddp is not self or not tracker.hook_registered:
            if tracker is not None and tracker.ddp is self:
                if hasattr(self, "_check_comm_hook"):
                    self._check_comm_hook(hook)  # DDP's own checks, on the user's hook
                tracker.user_hook = (state, hook)  # ours runs it
                return orig_register(self, state, tracker.comm_hook)
            return orig_register(self, state, hook)
        # Ours is registered (at the first forward): the user's hook replaces the default inside
        # it, with DDP's own checks and its one-hook rule.
        if tracker.user_hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")
        if hasattr(self, "_check_comm_hook"):
            self._check_comm_hook(hook)
        tracker.user_hook = (state, hook)

    def register_builtin_comm_hook(self, comm_hook_type):
        tracker = S.tracker
        if tracker is not None and tracker.ddp is self:
            tracker.builtin_hook = True
            P.say("register_builtin_comm_hook(%s) installs a C++ hook ddpdbg cannot observe: this "
                  "DDP's bucket allreduces are not traced" % (comm_hook_type,))
        return orig_builtin(self, comm_hook_type)

    @functools.wraps(orig_backward)
    def backward(*args, **kwargs):
        tracker = S.tracker
        if tracker is None or not tracker.expect_backward or not S.on():
            return orig_backward(*args, **kwargs)
        tracker.guard(tracker.begin_backward)
        tracker.defer_errors = True
        try:
            result = orig_backward(*args, **kwargs)
        except Exception as e:
            tracker.guard(tracker.backward_failed, e)
            raise
        finally:  # whatever ended the backward (an interrupt too), nothing stays deferred
            exc, tracker.defer_errors, tracker.deferred_error = tracker.deferred_error, False, None
        if exc is not None:  # a bucket's allreduce failed: raised where the reducer would
            tracker.guard(tracker.backward_failed, exc)
            raise exc
        tracker.guard(tracker.end_backward)
        return result

    DDP.__init__ = __init__
    DDP.forward = forward
    DDP.register_comm_hook = register_comm_hook
    if builtin_name:
        setattr(DDP, builtin_name, functools.wraps(orig_builtin)(register_builtin_comm_hook))
    torch.autograd.backward = backward


def power_of_two(n):
    return n > 0 and n & (n - 1) == 0


def reducer_parameters(module, ignore):
    """(names, parameters) in the reducer's index order: DDP._build_params_for_reducer (1.13
    and 2.x alike): named_modules in pre-order, each module's own parameters that require grad
    and are not ignored, shared ones kept at their first occurrence."""
    names, params, memo = [], [], set()
    for module_name, m in module.named_modules():
        for param_name, p in m.named_parameters(recurse=False):
            fqn = "%s.%s" % (module_name, param_name) if module_name else param_name
            if not p.requires_grad or fqn in ignore or p in memo:
                continue
            memo.add(p)
            names.append(fqn)
            params.append(p)
    return names, params


def grad_accumulator(p):
    """The parameter's AccumulateGrad node (created if it has none yet)."""
    with torch.enable_grad():
        return p.expand_as(p).grad_fn.next_functions[0][0]


class DdpTracker:
    @staticmethod
    def before_init(S, ddp, module, args, kwargs):
        """Runs before DDP's constructor: opens the probe and registers the gradient hooks, so
        that they run before the reducer's. None when this DDP is not traced."""
        if S.off:
            return None
        if S.tracker is not None:
            P.say("a second DistributedDataParallel in this process: only the first is traced")
            return None
        if not dist.is_initialized():
            P.say("DistributedDataParallel is built before torch.distributed is initialised "
                  "(init_process_group): this process is not traced")
            return None
        if not S.open_probe():
            return None
        T = DdpTracker(S, ddp, module, kwargs)
        S.tracker = T
        return T

    def __init__(self, S, ddp, module, kwargs):
        self.S, self.ddp, self.probe = S, ddp, S.probe
        ignore = set(getattr(module, "_ddp_params_and_buffers_to_ignore", []))
        # torch 2.1+: delay_all_reduce_named_params joins the ignored parameters
        for name, _ in kwargs.get("delay_all_reduce_named_params", None) or []:
            ignore.add(name)
        self.names, self.params = reducer_parameters(module, ignore)
        self.index_of = {p._cdata: i for i, p in enumerate(self.params)}
        self.nodes = []          # AccumulateGrad nodes: kept alive, the reducer reuses them
        self.node_index = {}     # node -> parameter index (find_unused's graph search)
        self.handles = []
        self.bucket_of = [0] * len(self.params)
        self.bucket_sizes = []   # parameters per bucket of the current layout
        self.bucket_numel = []
        self.generation = -1
        self.hook_registered = False
        self.user_hook = None    # (state, hook) the user registered
        self.builtin_hook = False
        self.expect_backward = False
        self.in_backward = False
        self.defer_errors = False   # our torch.autograd.backward runs this backward (defer)
        self.deferred_error = None  # the first bucket allreduce's error it is to raise
        self.marking = False     # the reducer's hooks mark parameters this backward
        self.unused = []         # find_unused_parameters: parameters the graph does not reach
        self.first_hook = True
        self.order = 0
        self.pending = []
        self.launched = 0
        self.rebuilt = False
        S.gap_label = "ddp_init"
        self.register_hooks()

    def guard(self, fn, *args):
        """Runs one of our steps; a failure turns the attach off, never reaches the job."""
        if not self.S.on():
            return None
        try:
            return fn(*args)
        except Exception as e:
            self.S.fail(fn.__name__, e)
            return None

    def register_hooks(self):
        use_post_accumulate = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
        for i, p in enumerate(self.params):
            node = grad_accumulator(p)
            self.nodes.append(node)
            self.node_index[node] = i
            if use_post_accumulate:
                # torch 2.1+: runs inside AccumulateGrad, before every post hook (the reducer's)
                self.handles.append(p.register_post_accumulate_grad_hook(
                    lambda param, i=i: self.on_grad(i)))
            else:
                # torch 1.13-2.0: the first Python post hook of the node; the reducer's, added
                # by its constructor later, runs after it
                self.handles.append(node.register_hook(lambda gi, go, i=i: self.on_grad(i)))

    # ---- construction ----------------------------------------------------------------------
    def init_failed(self, exc):
        try:
            self.S.fill_gap(dist.distributed_c10d._get_default_group(), self.S.seq_now(
                dist.distributed_c10d._get_default_group()))
            self.S.error(exc)
        except Exception as e:
            self.S.fail("recording the constructor's error", e)
        for h in self.handles:
            h.remove()
        self.S.tracker = None

    def after_init(self):
        S, ddp, pr = self.S, self.ddp, self.probe
        try:
            self.pg = ddp.process_group
            S.fill_gap(self.pg, S.seq_now(self.pg))
            pr.meta("find_unused_parameters", str(bool(ddp.find_unused_parameters)).lower())
            pr.meta("static_graph", str(bool(ddp.static_graph)).lower())
            pr.meta("gradient_as_bucket_view", str(bool(ddp.gradient_as_bucket_view)).lower())
            pr.meta("broadcast_buffers", str(bool(ddp.broadcast_buffers)).lower())
            pr.meta("bucket_cap_bytes", int(ddp.bucket_bytes_cap))
            pr.meta("first_bucket_bytes", int(dist._DEFAULT_FIRST_BUCKET_BYTES))
            pr.meta("ddp_backend", dist.get_backend(self.pg))
            pr.params(self.names, [tuple(p.shape) for p in self.params])
            if not self.read_layout(-1):
                raise RuntimeError("the reducer's buckets hold parameters outside our table")
        except Exception as e:
            S.fail("reading DistributedDataParallel's settings", e)
            return
        self.in_forward = False
        ddp.module.register_forward_pre_hook(lambda module, inputs: self.module_forward_began())
        S.set_phase(P.PHASE_DATA)

    def read_layout(self, it):
        """Records the reducer's current buckets as a new LAYOUT generation. The reducer lends
        them as zero-filled copies (_get_zeros_like_grad_buckets, 1.13 and 2.x): one transient
        allocation of the gradients' size, at construction and at the rebuild only."""
        with torch.no_grad():
            buckets = self.ddp.reducer._get_zeros_like_grad_buckets()
        rows_b, rows_p, rows_o = [], [], []
        sizes, numels = [0] * len(buckets), [0] * len(buckets)
        for bucket in buckets:
            b, offset = bucket.index(), 0
            for p in bucket.parameters():
                i = self.index_of.get(p._cdata)
                if i is None:
                    return False
                rows_b.append(b)
                rows_p.append(i)
                rows_o.append(offset)
                self.bucket_of[i] = b
                offset += p.numel()
                sizes[b] += 1
            numels[b] = offset
        del buckets
        self.generation += 1
        self.bucket_sizes, self.bucket_numel = sizes, numels
        self.probe.layout(it, self.generation, rows_b, rows_p, rows_o)
        return True

    # ---- forward ---------------------------------------------------------------------------
    def begin_forward(self, inputs, kwargs):
        S, ddp = self.S, self.ddp
        if not self.hook_registered:
            self.register_comm_hook()
        if self.in_backward:  # the last backward never returned here (an exception elsewhere)
            self.in_backward = False
        S.it += 1
        self.sync = bool(ddp.require_backward_grad_sync)
        self.rebuilt = bool(getattr(ddp, "_has_rebuilt_buckets", False))
        S.gap_label = "buffers"
        # Before the module's forward DDP runs collectives inside PyTorch (the rebuild's
        # broadcasts, the buffers' broadcast): the live phase says so until the module's own
        # forward starts (module_forward_began), so that a rank stuck there reads as waiting.
        self.in_forward = True
        S.set_phase(P.PHASE_COLLECTIVE, P.FORWARD_BEGIN)
        batch = ultralytics_batch(inputs, kwargs)
        if batch is not None:
            for k, n in enumerate(batch):
                self.probe.event(P.BATCH, S.it, -1, n, k)

    def module_forward_began(self):
        if self.in_forward and self.S.on():
            self.in_forward = False
            self.S.set_phase(P.PHASE_FORWARD)

    def forward_failed(self, exc):
        S = self.S
        self.in_forward = False
        S.fill_gap(self.pg, S.seq_now(self.pg))
        S.error(exc)
        self.expect_backward = False
        S.set_phase(P.PHASE_IDLE)  # not waiting any more: raising (the watchdog sees no hang)

    def end_forward(self, output):
        S, ddp = self.S, self.ddp
        self.in_forward = False
        labels = ()
        if not self.rebuilt and getattr(ddp, "_has_rebuilt_buckets", False):
            # The rebuild's two broadcasts from rank 0 (sync_bucket_indices) came first.
            labels = ("bucket_indices", "bucket_sizes")
            S.fill_gap(self.pg, S.seq_now(self.pg), labels)
            self.read_layout(S.it)
        else:
            S.fill_gap(self.pg, S.seq_now(self.pg))
        self.probe.event(P.FORWARD_END, S.it)
        self.expect_backward = True
        static_first = bool(ddp.static_graph) and getattr(ddp, "num_iterations", 0) == 1
        self.marking = self.sync and not static_first
        self.unused = []
        if self.marking and ddp.find_unused_parameters and not ddp.static_graph:
            self.unused = self.unused_parameters(output)

    def unused_parameters(self, output):
        """The reducer's search_unused_parameters: parameters whose AccumulateGrad the graph of
        the forward's output tensors does not reach."""
        try:
            from torch.nn.parallel.distributed import _find_tensors
            roots = [t.grad_fn for t in _find_tensors(output) if t.grad_fn is not None]
        except ImportError:
            roots = [output.grad_fn] if isinstance(output, torch.Tensor) and output.grad_fn else []
        seen, reached, stack = set(), set(), roots
        while stack:
            fn = stack.pop()
            if fn in seen:
                continue
            seen.add(fn)
            i = self.node_index.get(fn)
            if i is not None:
                reached.add(i)
            for nxt, _ in fn.next_functions:
                if nxt is not None and nxt not in seen:
                    stack.append(nxt)
        return [i for i in range(len(self.params)) if i not in reached]

    # ---- backward --------------------------------------------------------------------------
    def begin_backward(self):
        S = self.S
        self.in_backward = True
        self.first_hook = True
        self.order = 0
        self.launched = 0
        self.pending = list(self.bucket_sizes)
        S.set_phase(P.PHASE_BACKWARD, P.BACKWARD_BEGIN)

    def on_grad(self, i):
        """The gradient-ready hook of parameter i (hot: once per parameter per backward)."""
        S = self.S
        if S.off:
            return
        try:
            if not self.in_backward:  # a backward that did not go through torch.autograd.backward
                self.begin_backward()
            pr, it = self.probe, S.it
            if self.first_hook and self.marking:
                self.first_hook = False
                for u in self.unused:  # the reducer marks them at its first hook
                    b = self.bucket_of[u]
                    pr.event(P.MARK_READY, it, u, b, 1)
                    self.count_down(b)
            defined = 1 if self.params[i].grad is not None else 0
            if self.marking:
                b = self.bucket_of[i]
                pr.event(P.GRAD_READY, it, i, self.order, defined, b, P.FLAG_MARKED)
                self.order += 1
                self.count_down(b)
            else:
                pr.event(P.GRAD_READY, it, i, self.order, defined, 0)
                self.order += 1
        except Exception as e:
            S.fail("a gradient hook", e)

    def count_down(self, b):
        self.pending[b] -= 1
        if self.pending[b] == 0:
            self.probe.event(P.BUCKET_READY, self.S.it, 0, b)
            self.probe.flush()

    def backward_failed(self, exc):
        self.in_backward = False
        self.expect_backward = False
        self.S.error(exc)
        self.S.set_phase(P.PHASE_IDLE)

    def end_backward(self):
        S = self.S
        self.in_backward = False
        self.expect_backward = False
        if self.marking and self.launched == len(self.bucket_sizes):
            self.probe.event(P.FINALIZE, S.it)
        S.set_phase(P.PHASE_OPTIM, P.BACKWARD_END)

    # ---- the comm hook ---------------------------------------------------------------------
    def register_comm_hook(self):
        """Registers ours at the first forward (so that a user's register_comm_hook before it
        is wrapped, and a builtin hook keeps the reducer). The reducer divides by the world size
        only without a hook; ours divides as it would: by multiplying by 1 / world, exact when
        the world is a power of two. Otherwise, with gradient_as_bucket_view, the reducer
        divides aliased gradients with div_: not reproducible bit for bit, so not hooked."""
        self.hook_registered = True
        if self.builtin_hook or self.user_hook is not None:
            return
        world = self.pg.size()
        if self.ddp.gradient_as_bucket_view and not power_of_two(world):
            P.say("gradient_as_bucket_view with a world of %d: ddpdbg cannot reproduce the "
                  "reducer's division exactly, so this DDP's bucket allreduces are not traced"
                  % world)
            return
        DDP_register = type(self.ddp).register_comm_hook.__wrapped__
        DDP_register(self.ddp, None, self.comm_hook)

    def comm_hook(self, state, bucket):
        """Called by the reducer per bucket, in index order; returns the future the reducer
        waits on, as the default (or the user's hook) made it."""
        S = self.S
        if self.user_hook is not None:
            user_state, hook = self.user_hook
            S.local.quiet = True
            try:
                fut = hook(user_state, bucket)
            finally:
                S.local.quiet = False
            work = None
        else:
            return self.default_allreduce(bucket)
        try:
            if S.on():
                b, numel = bucket.index(), bucket.buffer().numel()
                seq = self.bucket_launched(b, numel)
                S.watch_future(self.pg, fut, work, seq, P.OP_ALLREDUCE, b, numel, "bucket")
        except Exception as e:
            S.fail("the comm hook", e)
        return fut

    def defer(self, exc):
        """The bucket allreduce's error exc, on the collective's thread: True when our
        torch.autograd.backward runs this backward, which then raises exc itself once the
        reducer is done (it waits for every bucket's future before backward returns), the bucket
        handed back as it is. The job sees the collective's own error, as without ddpdbg, where
        the reducer's C++ hook raises it from backward. A Python future cannot carry it there:
        torch 1.13's Future.set_exception stores the exception as the future's value, which the
        reducer reads as a Tensor ("Unable to cast <the error> to Tensor"), and a `then`
        callback that raises prefixes "Got the following error when running the callback"."""
        if not self.defer_errors:
            return False
        if self.deferred_error is None:
            self.deferred_error = exc
        return True

    def bucket_launched(self, b, numel):
        """COLL_LAUNCH of bucket b, whose allreduce the group has just issued; its seq."""
        S = self.S
        seq = S.seq_now(self.pg)
        S.launched(self.pg, seq, P.OP_ALLREDUCE, b, numel, "bucket")
        self.launched += 1
        if self.launched == len(self.bucket_sizes):
            # Every bucket is launched: what is left of the backward is the reducer waiting for
            # their results (finalize_backward).
            S.set_phase(P.PHASE_COLLECTIVE)
        return seq

    def default_allreduce(self, bucket):
        """The reducer's default: gradients times 1 / world, then a SUM allreduce on DDP's group.
        The future handed back is completed by us with the bucket; when the collective fails,
        its error is deferred to our backward (defer), else set on the future. CUDA buffers:
        the future names the device, so that its waiters sync with the NCCL stream."""
        S = self.S
        buffer = bucket.buffer()
        buffer.mul_(1.0 / self.pg.size())
        c10d = dist.distributed_c10d
        all_reduce = getattr(c10d.all_reduce, "__wrapped__", c10d.all_reduce)
        work = all_reduce(buffer, group=self.pg, async_op=True)
        result = torch.futures.Future(devices=[buffer.device]) if buffer.is_cuda else \
            torch.futures.Future()
        b, numel, seq, it = bucket.index(), buffer.numel(), None, S.it
        polled = S.poller is not None and pg_backend(self.pg) == "nccl"
        try:
            if S.on():
                seq = self.bucket_launched(b, numel)
                if polled:  # NCCL: the work's future completes at enqueue; the poller waits
                    S.poller.add(work, it, seq, P.OP_ALLREDUCE, b, numel, "bucket")
        except Exception as e:
            S.fail("the comm hook", e)

        def complete(fut):
            exc = None
            try:
                fut.value()
            except Exception as e:  # the collective's own error, as the reducer would raise it
                exc = e
            if seq is not None and not polled:
                try:
                    S.done(it, seq, P.OP_ALLREDUCE, b, numel, "bucket", exc)
                except Exception as e:
                    S.fail("a bucket's completion", e)
            if exc is not None and not self.defer(exc):
                result.set_exception(exc)
            else:
                result.set_result(buffer)

        work.get_future().then(complete)
        return result


def ultralytics_batch(inputs, kwargs):
    """Ground-truth boxes per image of an Ultralytics-style batch dict (keys img, batch_idx:
    the image of each box) among the forward's arguments, or None."""
    for x in list(inputs) + list(kwargs.values()):
        if isinstance(x, dict) and "img" in x and "batch_idx" in x:
            img, idx = x["img"], x["batch_idx"]
            if not isinstance(img, torch.Tensor) or not isinstance(idx, torch.Tensor):
                return None
            n = int(img.shape[0]) if img.dim() > 0 else 0
            counts = torch.bincount(idx.detach().reshape(-1).long().cpu(), minlength=n)
            return [int(c) for c in counts[:n].tolist()]
    return None
