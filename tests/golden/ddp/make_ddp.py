#!/usr/bin/env python3
"""make_ddp.py [OUTDIR] -- runs real PyTorch DistributedDataParallel (2 ranks, Gloo, CPU) on a
tiny 4-layer model for each scenario in SCENARIOS and writes OUTDIR/<scenario>.txt (default:
the folder of this script): bucket layouts as launched, losses, error and warning texts,
final parameters. The format and the scenarios are documented in README.md beside it.

Needs Debian's python3-torch (1.13, CPU): /usr/bin/python3 tests/golden/ddp/make_ddp.py
Each scenario runs in two fresh processes (this script with --worker), started here with
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun is broken on this Python), because
TORCH_DISTRIBUTED_DEBUG is read once per process. A scenario still running after
SCENARIO_TIMEOUT_S seconds is killed and reported ("outcome ... status=killed"), and the
script then exits 1. Running it twice gives identical files.
"""
import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from datetime import timedelta

WORLD = 2
LR = 0.1
PG_TIMEOUT_S = 15          # Gloo timeout: a rank left alone in a collective ends by then
SCENARIO_TIMEOUT_S = 30    # both processes of one scenario, start to exit
EXIT_DELAY_S = 1.0         # a rank that raised waits this long before it exits (see worker)
DEFAULT_FIRST = 1048576    # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES (1 MiB)
DEFAULT_CAP = 26214400     # bucket_cap_mb=25
SMALL_FIRST = 64
SMALL_CAP = 128


def scenario(name, iters, find_unused=0, static_graph=0, grad_as_view=0,
             first=SMALL_FIRST, cap=SMALL_CAP, debug="OFF", twice=0, no_sync=(),
             unused=None, comm_hook=1, about=""):
    """unused: {rank: set of iterations where that rank runs with use_d=0}."""
    unused = unused or {}
    use_d = [[0 if it in unused.get(r, ()) else 1 for it in range(iters)] for r in range(WORLD)]
    return dict(name=name, iters=iters, find_unused=find_unused, static_graph=static_graph,
                grad_as_view=grad_as_view, first=first, cap=cap, debug=debug, twice=twice,
                no_sync=tuple(no_sync), use_d=use_d, comm_hook=comm_hook, about=about)


SCENARIOS = [
    scenario("default", 3, first=DEFAULT_FIRST, cap=DEFAULT_CAP,
             about="find_unused=False, default caps: one bucket before and after the rebuild"),
    scenario("small_caps", 3,
             about="find_unused=False, caps 64/128: one bucket at iteration 0, the rebuilt "
                   "gradient-ready-order layout from iteration 1"),
    scenario("find_unused_small", 4, find_unused=1, unused={1: {1}},
             about="find_unused=True, caps 64/128, rank 1 skips d at iteration 1: completes; "
                   "the [first, cap] layout in reversed definition order is never rebuilt"),
    scenario("unused_rank0_off", 3, unused={0: {1}}, debug="OFF",
             about="rank 0 skips d at iteration 1: rank 0 raises at iteration 2's forward, "
                   "rank 1 waits in iteration 1's backward until rank 0 is gone"),
    scenario("unused_rank0_info", 3, unused={0: {1}}, debug="INFO",
             about="as unused_rank0_off, TORCH_DISTRIBUTED_DEBUG=INFO (names in the text)"),
    scenario("unused_rank0_detail", 3, unused={0: {1}}, debug="DETAIL",
             about="as unused_rank0_off, TORCH_DISTRIBUTED_DEBUG=DETAIL (wrapper process "
                   "group: rank 1 fails in its monitored barrier)"),
    scenario("unused_rank0_nohook", 3, unused={0: {1}}, comm_hook=0,
             about="as unused_rank0_off without the recording comm hook: rank 1's text as "
                   "DDP's built-in allreduce gives it (no bucket records)"),
    scenario("unused_all", 3, unused={0: {1}, 1: {1}},
             about="both ranks skip d at iteration 1: both raise at iteration 2's forward"),
    scenario("static", 6, static_graph=1, unused={0: {3}},
             about="static_graph=True, rank 0 skips d at iteration 3"),
    scenario("static_more", 3, static_graph=1, unused={0: {0}, 1: {0}},
             about="static_graph=True, d unused on both ranks at iteration 0, used at 1"),
    scenario("twice_off", 2, first=DEFAULT_FIRST, cap=DEFAULT_CAP, twice=1, debug="OFF",
             about="forward returns (c(h), d(h)), two backwards per step: marked ready twice"),
    scenario("twice_info", 2, first=DEFAULT_FIRST, cap=DEFAULT_CAP, twice=1, debug="INFO",
             about="as twice_off, TORCH_DISTRIBUTED_DEBUG=INFO"),
    scenario("twice_noretain", 2, first=DEFAULT_FIRST, cap=DEFAULT_CAP, twice=2, debug="OFF",
             about="as twice_off, but l1.backward() without retain_graph"),
    scenario("find_unused_none", 2, find_unused=1, first=DEFAULT_FIRST, cap=DEFAULT_CAP,
             about="find_unused=True with nothing unused: the reducer's TORCH_WARN_ONCE"),
    scenario("no_sync", 4, no_sync=[1],
             about="iteration 1 inside ddp.no_sync() on both ranks, no step: its grads add "
                   "into iteration 2's synced backward"),
    scenario("grad_as_view", 3, grad_as_view=1,
             about="gradient_as_bucket_view=True, caps 64/128"),
]

PARAM_NAMES = ["a.weight", "a.bias", "b.weight", "b.bias",
               "c.weight", "c.bias", "d.weight", "d.bias"]


# ---- the model and data, shared by the parent (initial values) and the workers ----
def make_net():
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 8)
            self.b = nn.Linear(8, 8)
            self.c = nn.Linear(8, 2)
            self.d = nn.Linear(8, 2)

        def forward(self, x, use_d, twice=False):
            h = torch.relu(self.a(x))
            h = torch.relu(self.b(h))
            if twice:
                return self.c(h), self.d(h)
            y = self.c(h)
            if use_d:
                y = y + self.d(h)
            return y

    torch.manual_seed(0)
    net = Net()
    assert [n for n, _ in net.named_parameters()] == PARAM_NAMES
    return net


def make_x(rank, it):
    """Input of shape [3, 4] for (rank, iteration)."""
    import torch
    g = torch.Generator().manual_seed(1000 + 100 * rank + it)
    return torch.randn(3, 4, generator=g)


def fmt(v):
    return "%.9g" % v


def floats(t):
    return " ".join(fmt(v) for v in t.detach().reshape(-1).tolist())


def escape(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def normalise(text, port):
    """Run-dependent parts of error texts: the peer's address and port become <addr>:<port>;
    in Python stack traces quoted by the text ("At:" lines), the torch install folder becomes
    <torch>/ and this script's path and line numbers <make_ddp.py>(<line>)."""
    text = re.sub(r"\[[0-9a-fA-F.:]+\]:\d+", "[<addr>]:<port>", text)
    text = re.sub(r"\b\d{1,3}(\.\d{1,3}){3}:\d+\b", "<addr>:<port>", text)
    text = text.replace(str(port), "<port>")
    text = text.replace(os.path.abspath(__file__), "<make_ddp.py>")
    text = re.sub(r"<make_ddp\.py>\(\d+\)", "<make_ddp.py>(<line>)", text)
    import torch
    return text.replace(os.path.dirname(os.path.abspath(torch.__file__)) + "/", "<torch>/")


# ---- worker: one rank of one scenario ----
class Recorder:
    """Appends finished record lines to this rank's file, flushed at once (a rank may die)."""

    def __init__(self, path):
        self.f = open(path, "w", buffering=1)

    def __call__(self, line):
        self.f.write(line + "\n")
        self.f.flush()


def worker(name, out_path):
    sc = next(s for s in SCENARIOS if s["name"] == name)
    rank = int(os.environ["RANK"])
    port = int(os.environ["MASTER_PORT"])
    rec = Recorder(out_path)
    warnings.simplefilter("default")

    def show_warning(message, category, filename, lineno, *rest):
        rec("warning rank=%d source=python at=%s:%d text=%s" % (
            rank, os.path.basename(filename), lineno,
            escape("%s: %s" % (category.__name__, message))))
    warnings.showwarning = show_warning
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=PG_TIMEOUT_S))
    assert dist.get_rank() == rank and dist.get_world_size() == WORLD
    dist._DEFAULT_FIRST_BUCKET_BYTES = sc["first"]

    net = make_net()
    params = list(net.parameters())
    index_of = {p.data_ptr(): i for i, p in enumerate(params)}
    ddp = DDP(net, bucket_cap_mb=sc["cap"] / 1048576,
              find_unused_parameters=bool(sc["find_unused"]),
              gradient_as_bucket_view=bool(sc["grad_as_view"]),
              static_graph=bool(sc["static_graph"]))
    assert ddp.bucket_bytes_cap == sc["cap"]
    state = {"iter": 0}

    def hook(_state, bucket):
        """Records the launched bucket, then does what DDP's default (no hook) does: divide
        by the world size and SUM-allreduce (default_hooks.allreduce_hook)."""
        idx = [index_of[p.data_ptr()] for p in bucket.parameters()]
        assert all(params[i] is p for i, p in zip(idx, bucket.parameters()))
        rec("bucket rank=%d iter=%d index=%d numel=%d params=%s" % (
            rank, state["iter"], bucket.index(), bucket.buffer().numel(),
            ",".join(map(str, idx))))
        return default_hooks.allreduce_hook(None, bucket)

    if sc["comm_hook"]:
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)

    def logging_records():
        try:
            data = ddp._get_ddp_logging_data()
        except Exception as e:  # noqa: BLE001 (recorded, not fatal)
            rec("# _get_ddp_logging_data failed: %s" % escape(str(e)))
            return
        for key in LOGGING_KEYS:
            if key in data:
                rec("logging rank=%d key=%s value=%s" % (rank, key, escape(str(data[key]))))

    def note_rebuild(before, it):
        if ddp._has_rebuilt_buckets and not before:
            rec("rebuilt rank=%d iter=%d" % (rank, it))

    phase = "forward"
    try:
        for it in range(sc["iters"]):
            state["iter"] = it
            x = make_x(rank, it)
            use_d = sc["use_d"][rank][it]
            sync = it not in sc["no_sync"]
            ctx = contextlib.nullcontext() if sync else ddp.no_sync()
            with ctx:
                phase = "forward"
                rebuilt = ddp._has_rebuilt_buckets
                if sc["twice"]:
                    y1, y2 = ddp(x, use_d, True)
                    l1 = (y1 * y1).mean()
                    l2 = (y2 * y2).mean()
                    note_rebuild(rebuilt, it)
                    rec("loss rank=%d iter=%d %s" % (rank, it, fmt(float(l1 + l2))))
                    phase = "backward"
                    l1.backward(retain_graph=(sc["twice"] == 1))
                    phase = "backward2"
                    l2.backward()
                else:
                    y = ddp(x, use_d)
                    loss = (y * y).mean()
                    note_rebuild(rebuilt, it)
                    rec("loss rank=%d iter=%d %s" % (rank, it, fmt(float(loss))))
                    phase = "backward"
                    loss.backward()
            if sync:
                phase = "step"
                opt.step()
                opt.zero_grad(set_to_none=True)
    except Exception as e:  # noqa: BLE001 (the point of the scenario)
        where = "backward" if phase == "backward2" else phase
        rec("error rank=%d iter=%d where=%s type=%s text=%s" % (
            rank, it, where, type(e).__name__, escape(normalise(str(e), port))))
        if phase == "backward2":
            rec("# rank %d: raised in the second backward (l2.backward()) of iteration %d"
                % (rank, it))
        for i, p in enumerate(params):
            rec("at_error rank=%d param=%d : %s" % (rank, i, floats(p)))
        logging_records()
        rec("outcome rank=%d status=raised" % rank)
        # Leave while a peer may be blocked in a collective with us. Waiting first lets Gloo's
        # loop thread read what the peer already sent, so that our exit closes the sockets
        # cleanly and the peer reads "Connection closed by peer": exiting with unread bytes
        # makes the kernel reset the connection ("Connection reset by peer") instead, at
        # random.
        time.sleep(EXIT_DELAY_S)
        os._exit(1)
    for i, p in enumerate(params):
        rec("final rank=%d param=%d : %s" % (rank, i, floats(p)))
    logging_records()
    rec("outcome rank=%d status=finished" % rank)
    try:
        dist.barrier()  # the peer may still be reading our last allreduce's data
    except Exception:  # noqa: BLE001 (the peer raised and left: nothing to wait for)
        pass
    os._exit(0)


# _get_ddp_logging_data() keys worth comparing (1.13): the rest are timings, versions, host.
LOGGING_KEYS = [
    "bucket_cap_bytes", "bucket_sizes", "has_rebuilt_buckets", "rebuilt_bucket_sizes",
    "rebuilt_per_bucket_param_indices", "prev_iteration_ms_param_indices",
    "find_unused_parameters", "static_graph", "gradient_as_bucket_view",
    "is_multi_device_module", "unused_parameter_size", "can_set_static_graph",
    "num_parameter_tensors", "total_parameter_size_bytes", "dtypes",
]


# ---- parent: runs the scenarios and writes the files ----
def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(sc, rank, port):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCH_", "NCCL_", "GLOO_", "OMP_", "MASTER_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), TORCH_DISTRIBUTED_DEBUG=sc["debug"],
               TORCH_SHOW_CPP_STACKTRACES="0", OMP_NUM_THREADS="1",
               PYTHONHASHSEED="0", PYTHONWARNINGS="default")
    return env


# One line of C++ logging on stderr. Debian's torch logs through glog:
#   W20261201 11:08:33.860574 31228 reducer.cpp:1298] Warning: ... (function operator())
# (upstream wheels print "[W reducer.cpp:1298] Warning: ..." instead; both are read).
GLOG_LINE = re.compile(r"^([IWEF])\d{4,8} \d\d:\d\d:\d\d\.\d+ +\d+ ([\w.]+:\d+)\] (.*)$")
C10_LINE = re.compile(r"^\[([IWEF]) ([\w.]+:\d+)\] (.*)$")


def cpp_log_records(rank, stderr):
    """warning records for C++ warnings and log records for reducer/process-group INFO and
    ERROR lines; text = the printed line with glog's date, time and thread id replaced by
    <date> <time> <tid>. logger.cpp's lines (multi-line, with timings and ports) are left out,
    and so are the continuation lines of any multi-line message."""
    out = []
    for ln in stderr.splitlines():
        m = GLOG_LINE.match(ln)
        if m:
            text = "%s<date> <time> <tid> %s] %s" % m.groups()
        else:
            m = C10_LINE.match(ln)
            if not m:
                continue
            text = ln
        level, where = m.group(1), m.group(2)
        if where.startswith("logger.cpp"):
            continue
        if level == "W":
            out.append("warning rank=%d source=cpp at=%s text=%s" % (rank, where, escape(text)))
        else:
            out.append("log rank=%d level=%s at=%s text=%s" % (rank, level, where, escape(text)))
    return out


def run_scenario(sc, tmp):
    """Runs both ranks; returns (per-rank record lines, per-rank stderr, whether any rank
    had to be killed)."""
    port = free_port()
    procs, outs, errs = [], [], []
    for r in range(WORLD):
        out = os.path.join(tmp, "%s.%d.rec" % (sc["name"], r))
        err = open(os.path.join(tmp, "%s.%d.err" % (sc["name"], r)), "w+")
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", sc["name"], out],
            env=child_env(sc, r, port), stdout=err, stderr=subprocess.STDOUT))
        outs.append(out)
        errs.append(err)
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    killed = [False] * WORLD
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            killed[r] = True
    records, stderr = [], []
    for r in range(WORLD):
        lines = open(outs[r]).read().splitlines() if os.path.exists(outs[r]) else []
        errs[r].seek(0)
        stderr.append(errs[r].read())
        errs[r].close()
        if killed[r]:
            lines.append("outcome rank=%d status=killed" % r)
        elif not any(ln.startswith("outcome ") for ln in lines):
            lines.append("outcome rank=%d status=crashed" % r)
        lines.extend(cpp_log_records(r, stderr[r]))
        records.append(lines)
    return records, stderr, any(killed)


ORDER = ["rebuilt", "bucket", "loss", "error", "warning", "log", "final", "at_error", "logging",
         "outcome"]


def write_file(sc, records, path):
    net = make_net()
    o = []
    o.append("# tests/golden/ddp/%s.txt -- written by make_ddp.py (torch %s, Gloo, CPU); "
             "format in README.md" % (sc["name"], _torch_version()))
    o.append("# %s" % sc["about"])
    o.append("config world=%d find_unused=%d static_graph=%d grad_as_view=%d "
             "first_bucket_bytes=%d bucket_cap_bytes=%d debug=%s iters=%d lr=%s twice=%d "
             "no_sync=%s comm_hook=%d" % (
                 WORLD, sc["find_unused"], sc["static_graph"], sc["grad_as_view"], sc["first"],
                 sc["cap"], sc["debug"], sc["iters"], fmt(LR), sc["twice"],
                 ",".join(map(str, sc["no_sync"])) or "-", sc["comm_hook"]))
    for r in range(WORLD):
        o.append("use_d rank=%d %s" % (r, " ".join(map(str, sc["use_d"][r]))))
    for i, (name, p) in enumerate(net.named_parameters()):
        o.append("param %d %s %d %s : %s" % (i, name, p.dim(), " ".join(map(str, p.shape)),
                                            floats(p)))
    for r in range(WORLD):
        for it in range(sc["iters"]):
            o.append("x rank=%d iter=%d : %s" % (r, it, floats(make_x(r, it))))
    comments = [ln for lines in records for ln in lines if ln.startswith("#")]
    for kind in ORDER:
        for lines in records:
            o.extend(ln for ln in lines if ln.split(" ", 1)[0] == kind)
    o.extend(comments)
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def _torch_version():
    import torch
    return torch.__version__


def summary(sc, records):
    out = []
    for lines in records:
        for ln in lines:
            kind = ln.split(" ", 1)[0]
            if kind == "outcome":
                out.append(ln.split(" ", 1)[1])
            elif kind == "error":
                head, text = ln.split(" text=", 1)
                out.append("%s text=%s..." % (head[6:], text[:60]))
    return "; ".join(out)


def main(argv):
    if len(argv) >= 2 and argv[1] == "--worker":
        try:
            worker(argv[2], argv[3])
        except Exception:  # noqa: BLE001 (setup failure: the parent reports "crashed")
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)
        return 0
    outdir = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    only = set(argv[2:])
    unknown = only - {sc["name"] for sc in SCENARIOS}
    if unknown:
        sys.exit("make_ddp.py: unknown scenario %s; expected one of: %s"
                 % (", ".join(sorted(unknown)), " ".join(sc["name"] for sc in SCENARIOS)))
    bad = 0
    with tempfile.TemporaryDirectory(prefix="make_ddp.") as tmp:
        for sc in SCENARIOS:
            if only and sc["name"] not in only:
                continue
            t0 = time.monotonic()
            records, stderr, killed = run_scenario(sc, tmp)
            write_file(sc, records, os.path.join(outdir, sc["name"] + ".txt"))
            crashed = any("status=crashed" in ln for lines in records for ln in lines)
            print("%-20s %5.1fs  %s" % (sc["name"], time.monotonic() - t0, summary(sc, records)))
            if killed or crashed:
                bad = 1
                for r, text in enumerate(stderr):
                    print("---- %s rank %d output (last 2000 chars):\n%s"
                          % (sc["name"], r, text[-2000:]))
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv))
