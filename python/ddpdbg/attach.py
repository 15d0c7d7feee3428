"""attach.py -- the process-wide half of the attach: installs the patches (once), opens the
rank's probe when torch.distributed is initialised, records the process group's collectives
with the group's own sequence numbers, errors and uncaught exceptions, optimiser steps, and
closes the probe at exit. The per-DDP half (parameters, layouts, hooks, buckets) is
ddp_tracker.py.

Every patch calls the original with the same arguments and returns or raises exactly what it
returned or raised; what ddpdbg does around it is guarded so that a failure of ours turns the
attach off (one line) and never reaches the job.
"""
import atexit
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

from ddpdbg import probe as P

MIN_TORCH = (1, 13)


def torch_version():
    """(major, minor) of torch.__version__ ("1.13.0a0+git..." -> (1, 13))."""
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


class State:
    """The process's attach: one probe, one traced DDP, the groups' sequence-number bases."""

    def __init__(self, trace_dir, lib_path):
        self.trace_dir, self.lib_path = trace_dir, lib_path
        self.probe = None       # P.Probe once open
        self.opened = False     # tried to open (once)
        self.off = False        # a failure of ours: everything is a pass-through from now on
        self.tracker = None     # the traced DDP's DdpTracker
        self.it = -1            # the traced DDP's iteration (its training forwards - 1)
        self.phase = P.PHASE_STARTUP
        self.seq_base = {}      # process group -> its sequence number when we first saw it
        self.seq_recorded = {}  # process group -> the last sequence number recorded
        self.gap_label = "unseen"  # what a collective we did not see was (set by the context)
        self.local = threading.local()  # .quiet: inside our own comm hook (no double records)
        self.last_error = None  # the exception whose text was recorded last, and that text
        self.last_error_text = None
        self.poller = None      # NcclPoller, for groups whose futures complete at enqueue

    # ---- failures of ours ------------------------------------------------------------------
    def fail(self, what, exc):
        if not self.off:
            self.off = True
            P.say("the attach failed (%s: %r); this rank's trace stops here, training continues"
                  % (what, exc))

    def on(self):
        return not self.off and self.probe is not None and self.probe.alive()

    # ---- the probe -------------------------------------------------------------------------
    def open_probe(self):
        """Opens the rank's probe once torch.distributed is initialised; idempotent."""
        if self.opened or self.off:
            return self.probe is not None
        if not dist.is_available() or not dist.is_initialized():
            return False
        self.opened = True
        # the default group's rank, not $RANK: processes that torch.multiprocessing.spawn starts
        # share their parent's environment
        rank = dist.get_rank()
        self.probe = P.Probe.open(self.lib_path, self.trace_dir, rank)
        if self.probe is None:
            return False
        pr = self.probe
        pr.meta("world", dist.get_world_size())
        pr.meta("host", socket.gethostname())
        pr.meta("pid", os.getpid())
        pr.meta("args", " ".join([sys.executable] + sys.argv))
        pr.meta("program", "python")
        pr.meta("torch_version", torch.__version__)
        pr.meta("python_version", sys.version.split()[0])
        pr.meta("backend", dist.get_backend())
        pr.meta("torch_distributed_debug", os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF").upper())
        self.set_phase(P.PHASE_STARTUP)
        self.group_base(default_group())
        if dist.get_backend() == "nccl":
            from ddpdbg.nccl_poller import NcclPoller
            self.poller = NcclPoller(self)
        atexit.register(self.close)
        return True

    def close(self):
        if self.probe is not None:
            try:
                if self.poller is not None:
                    self.poller.stop()
                self.probe.close()
            except Exception:
                pass

    def set_phase(self, phase, kind=0):
        self.phase = phase
        if self.on():
            self.probe.phase(phase, self.it, kind)

    def error(self, exc, it=None):
        """An ERROR record with the exception's full text, once per exception object."""
        text = str(exc) if isinstance(exc, RuntimeError) else "%s: %s" % (type(exc).__name__, exc)
        if not self.on() or exc is self.last_error or text == self.last_error_text:
            return  # one record per error, however many layers see it pass
        self.last_error, self.last_error_text = exc, text
        self.probe.text(P.ERROR, self.it if it is None else it, text)

    # ---- sequence numbers ------------------------------------------------------------------
    def group_base(self, pg):
        """The group's sequence number when first seen (gloo starts it at a random value that
        every rank shares; NCCL at 0): our numbers count from there, 1 for the first."""
        if pg not in self.seq_base:
            self.seq_base[pg] = pg._get_sequence_number_for_group()
            self.seq_recorded[pg] = 0
        return self.seq_base[pg]

    def seq_now(self, pg):
        return pg._get_sequence_number_for_group() - self.group_base(pg)

    def fill_gap(self, pg, upto, labels=()):
        """Records the group's collectives we did not see, up to seq upto (inclusive), as
        launched and completed (they were waited for inside PyTorch): labels[k] names the k-th,
        self.gap_label the rest. Broadcast is the op of every such collective DDP issues."""
        first = self.seq_recorded.get(pg, 0) + 1
        for k, s in enumerate(range(first, upto + 1)):
            what = labels[k] if k < len(labels) else self.gap_label
            self.probe.text(P.COLL_LAUNCH, self.it, what, a=P.OP_BROADCAST, b=-1, c=s)
            self.probe.text(P.COLL_DONE, self.it, what, a=P.OP_BROADCAST, b=-1, c=s, flags=P.FLAG_OK)
        if upto > self.seq_recorded.get(pg, 0):
            self.seq_recorded[pg] = upto

    def launched(self, pg, seq, op, bucket, numel, what):
        self.fill_gap(pg, seq - 1)
        self.probe.text(P.COLL_LAUNCH, self.it, what, a=op, b=bucket, c=seq, d=numel)
        self.seq_recorded[pg] = max(self.seq_recorded.get(pg, 0), seq)

    def done(self, it, seq, op, bucket, numel, what, exc=None):
        """COLL_DONE (flag ok unless exc), and exc's text as an ERROR; from any thread."""
        if not self.on():
            return
        self.probe.text(P.COLL_DONE, it, what, a=op, b=bucket, c=seq, d=numel,
                        flags=0 if exc is not None else P.FLAG_OK)
        if exc is not None:
            self.error(exc, it)

    def watch_future(self, pg, fut, work, seq, op, bucket, numel, what):
        """COLL_DONE once the collective completed: gloo's future completes with it; NCCL's at
        enqueue, so there the poller asks work.is_completed()."""
        it = self.it
        if self.poller is not None and work is not None and pg_backend(pg) == "nccl":
            self.poller.add(work, it, seq, op, bucket, numel, what)
            return

        def on_done(f):
            try:
                exc = None
                try:
                    f.value()
                except Exception as e:  # the collective failed: the job sees it from wait()
                    exc = e
                self.done(it, seq, op, bucket, numel, what, exc)
            except Exception as e:
                self.fail("a collective's completion", e)

        fut.then(on_done)


def default_group():
    return dist.distributed_c10d._get_default_group()


def pg_backend(pg):
    try:
        return dist.get_backend(pg)
    except Exception:
        return ""


STATE = None


def install():
    """Installs the patches once; a no-op without DDPDBG_TRACE_DIR or in a torch too old."""
    global STATE
    if STATE is not None:
        return
    trace_dir = os.environ.get("DDPDBG_TRACE_DIR")
    if not trace_dir:
        return
    if torch_version() < MIN_TORCH:
        P.say("torch %s is older than 1.13, which the attach needs; this job runs untraced"
              % torch.__version__)
        return
    if not dist.is_available():
        P.say("this torch has no torch.distributed; this job runs untraced")
        return
    lib = os.environ.get("DDPDBG_PROBE_LIB", "")
    if not lib:
        P.say("DDPDBG_TRACE_DIR is set but DDPDBG_PROBE_LIB is not (ddpdbg env --trace DIR prints "
              "both); this job runs untraced")
        return
    STATE = State(trace_dir, lib)
    from ddpdbg import collectives, ddp_tracker
    collectives.install(STATE)
    ddp_tracker.install(STATE)
    install_process_hooks(STATE)


def install_process_hooks(S):
    """init_process_group (opens the probe), uncaught exceptions, optimiser steps, fork."""
    c10d = dist.distributed_c10d
    orig_init = c10d.init_process_group

    def init_process_group(*args, **kwargs):
        result = orig_init(*args, **kwargs)
        try:
            S.open_probe()
        except Exception as e:
            S.fail("opening the probe", e)
        return result

    init_process_group.__wrapped__ = orig_init
    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group

    orig_hook = sys.excepthook

    def excepthook(kind, exc, tb):
        try:
            S.error(exc)
            if S.probe is not None:
                S.probe.flush()
        except Exception:
            pass
        orig_hook(kind, exc, tb)

    sys.excepthook = excepthook
    orig_thread_hook = threading.excepthook

    def thread_excepthook(args):
        try:
            if args.exc_type is not SystemExit:
                S.error(args.exc_value)
        except Exception:
            pass
        orig_thread_hook(args)

    threading.excepthook = thread_excepthook
    try:
        install_optimizer_hook(S)
    except Exception as e:  # optimiser steps are a detail: the rest of the trace stands
        P.say("optimiser steps are not traced (%r)" % (e,))
    # A forked child (a DataLoader worker) must not write into its parent's ring or database.
    os.register_at_fork(after_in_child=lambda: forget_in_child(S))


def forget_in_child(S):
    S.off = True
    if S.probe is not None:
        S.probe.forget()


def optimizer_step_began(S):
    if S.on() and S.tracker is not None:
        S.set_phase(P.PHASE_OPTIM, P.OPTIM_STEP)


def optimizer_step_ended(S):
    if S.on() and S.tracker is not None:
        S.set_phase(P.PHASE_DATA)


def install_optimizer_hook(S):
    import torch.optim.optimizer as optim
    if hasattr(optim, "register_optimizer_step_pre_hook"):
        # torch 2.0+: global optimiser step hooks
        optim.register_optimizer_step_pre_hook(lambda opt, args, kwargs: optimizer_step_began(S))
        optim.register_optimizer_step_post_hook(lambda opt, args, kwargs: optimizer_step_ended(S))
        return
    # torch 1.13: Optimizer.__init__ calls _hook_for_profile, which wraps each optimiser class's
    # step once (marking it `hooked`); ours wraps that wrapper, also once per class.
    orig_profile = torch.optim.Optimizer._hook_for_profile

    def hook_for_profile(self):
        orig_profile(self)
        cls = self.__class__
        step = cls.step
        if getattr(step, "_ddpdbg", False):
            return
        import functools

        @functools.wraps(step)
        def traced_step(*args, **kwargs):
            optimizer_step_began(S)
            try:
                return step(*args, **kwargs)
            finally:
                optimizer_step_ended(S)

        traced_step._ddpdbg = True
        cls.step = traced_step

    torch.optim.Optimizer._hook_for_profile = hook_for_profile
