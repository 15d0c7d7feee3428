"""bench_attach.py -- what ddpdbg's attach costs a PyTorch DDP training step at rtdetr-l scale
(575 parameters; tests/torch/rtdetr_torch.py's rendering of rtdetr-l, with our loss), probe on
(B: traced, python/sitecustomize.py loaded as `ddpdbg run` loads it) against off (A: the same
process untraced), in ABBA blocks within one run so that drift of the machine's load falls on
both alike. Each block is a fresh 1-rank gloo DDP process: its warm-up steps are dropped, its
timed steps' median is the block's figure. Prints each block, then the medians of A and B
blocks and the overhead (B - A) / A. Timings are printed, never asserted (make bench).

  /usr/bin/python3 tests/pytorch/bench_attach.py --ddpdbg bin/ddpdbg [--rounds 2] [--steps 5]
      [--warmup 1] [--imgsz 160] [--batch 1] [--threads 2]

--worker runs one block (internal).
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(a):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(REPO, "tests", "torch"))
    import rtdetr_torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=0, world_size=1)
    model = rtdetr_torch.build_model("rtdetr-l")
    n_params = sum(1 for p in model.parameters() if p.requires_grad)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    times = []
    for step in range(a.warmup + a.steps):
        n_boxes = 5 * a.batch
        batch = {"img": torch.rand(a.batch, 3, a.imgsz, a.imgsz, generator=g),
                 "batch_idx": torch.arange(a.batch).repeat_interleave(5).float(),
                 "cls": torch.randint(0, 80, (n_boxes, 1), generator=g).float(),
                 "bboxes": torch.rand(n_boxes, 4, generator=g) * 0.3 + 0.2}
        t0 = time.perf_counter()
        loss, _ = ddp(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
    hook_s = hook_cost(n_params)
    dist.destroy_process_group()
    print(json.dumps({"params": n_params, "median_s": statistics.median(times), "steps": times,
                      "hook_s": hook_s}))


def hook_cost(n_params, rounds=20):
    """Traced blocks: the attach's gradient-ready hook timed by itself, n_params x rounds calls
    outside any backward (events of a fake iteration, into a trace that is thrown away): the
    per-step cost that is paid once per parameter, without the step's noise. None untraced."""
    try:
        from ddpdbg import attach
    except ImportError:
        return None
    S = attach.STATE
    if S is None or S.tracker is None or not S.on():
        return None
    T = S.tracker
    saved = T.in_backward, T.marking, T.order
    T.in_backward, T.marking = True, False
    t0 = time.perf_counter()
    for _ in range(rounds):
        for i in range(n_params):
            T.on_grad(i)
    dt = (time.perf_counter() - t0) / (rounds * n_params)
    S.probe.flush()
    T.in_backward, T.marking, T.order = saved
    return dt


def environment(ddpdbg, traced, trace_dir):
    """The block's environment: `ddpdbg env --trace DIR`'s exports when traced."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DDPDBG_TRACE_DIR", "DDPDBG_PROBE_LIB", "PYTHONPATH")}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    if traced:
        out = subprocess.run([ddpdbg, "env", "--trace", trace_dir], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            key, _, value = line[len("export "):].partition("=")
            value = value.split("\"${")[0].strip("'")
            env[key] = value
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ddpdbg", default=os.path.join(REPO, "bin", "ddpdbg"))
    ap.add_argument("--rounds", type=int, default=2, help="ABBA rounds (4 blocks each)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per block")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--imgsz", type=int, default=160)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    blocks = {"A": [], "B": []}
    hooks = []  # traced blocks: seconds per gradient-ready hook, timed by itself
    n_params = None
    with tempfile.TemporaryDirectory(prefix="ddpdbg-bench-attach-") as tmp:
        for r in range(a.rounds):
            for k, which in enumerate("ABBA"):
                trace = os.path.join(tmp, "r%d-%d" % (r, k))
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(a.steps),
                       "--warmup", str(a.warmup), "--imgsz", str(a.imgsz), "--batch", str(a.batch),
                       "--threads", str(a.threads)]
                out = subprocess.run(cmd, env=environment(a.ddpdbg, which == "B", trace),
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    sys.stderr.write(out.stdout + out.stderr)
                    raise SystemExit("bench_attach: a block failed (exit %d)" % out.returncode)
                result = json.loads(out.stdout.strip().splitlines()[-1])
                n_params = result["params"]
                blocks[which].append(result["median_s"])
                if result.get("hook_s"):
                    hooks.append(result["hook_s"])
                if which == "B" and not os.path.exists(os.path.join(trace, "rank0.db")):
                    raise SystemExit("bench_attach: the traced block wrote no trace")
                print("round %d block %s (%s): median step %.3f s over %d steps" % (
                    r, which, "traced" if which == "B" else "untraced", result["median_s"], a.steps))
                sys.stdout.flush()
    a_med, b_med = statistics.median(blocks["A"]), statistics.median(blocks["B"])
    print("rtdetr-l (%d parameters), %d px, batch %d, %d threads, 1 gloo rank: untraced %.3f s, "
          "traced %.3f s a step: attach overhead %+.2f %%" % (
              n_params, a.imgsz, a.batch, a.threads, a_med, b_med, 100 * (b_med - a_med) / a_med))
    if hooks:
        per_hook = statistics.median(hooks)
        print("the gradient-ready hook by itself: %.2f us; x %d parameters = %.2f ms a step, %.3f %% "
              "of the untraced step" % (per_hook * 1e6, n_params, per_hook * n_params * 1e3,
                                        100 * per_hook * n_params / a_med))


if __name__ == "__main__":
    main()
