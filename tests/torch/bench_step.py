"""bench_step.py -- full RT-DETR training steps of rtdetr_torch's model, timed: the PyTorch side
of our benchmarks (issues 13 and 14). Run through rtdetr_torch.py:

  python3 tests/torch/rtdetr_torch.py --model rtdetr-l --imgsz 320 --batch 2 --threads 2 \\
      --steps 8 --warmup 2 [--device cpu|cuda] [--data D/data.yaml | --boxes 5] \\
      [--accumulate 1] [--profile | --count-flops] [--ddp [--nproc 2]]
  python3 tests/torch/rtdetr_torch.py --model rtdetr-x --nc 5 --params   # = ddpdbg-train params

A step is Ultralytics' (8.1.34 BaseTrainer._do_train): forward with the loss, backward, and
every --accumulate steps its optimizer_step: clip_grad_norm_(10), AdamW over its three
parameter groups (biases, decayed weights, norm weights without decay; optimizer=auto's
lr = round(0.002 * 5 / (4 + nc), 6), betas (0.9, 0.999), weight decay 5e-4 x batch x
accumulate / 64), zero_grad(set_to_none) and the ModelEMA update. fp32 throughout (no AMP;
on CUDA TF32 is off for matmuls and convolutions unless --tf32), no warmup schedule (the lr is
constant), no augmentation.

Batches: --data reads one of our synth datasets (or any YOLO-layout data.yaml with train:
images/... and labels/...): its train images in a seeded shuffled order, stretched to imgsz
(PIL), nc from the yaml. Otherwise random images with --boxes boxes each (random classes,
centres in [0.2, 0.8], sizes in [0.05, 0.3]), a new draw every step.

Output: one line per step (its time and the forward / backward / optimizer split), a
"result:" line (the median step and the peak memory, for tests/gpu/check.sh's summary), then
one JSON line: median and p90 of the step and of each part over the timed steps (not the
warmup), peak RSS, on CUDA the peak allocated memory, the torch version and the matcher.
--profile times one more step under torch.profiler and prints the time per op family (conv,
GEMM/linear, deformable attention, norms, elementwise and the rest, loss/matcher, optimizer)
beside its FLOPs (flops.py); --count-flops prints the FLOP table alone.
--ddp wraps the model in DistributedDataParallel (gloo on CPU, NCCL on CUDA) in a process
started with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (LOCAL_RANK picks the GPU), each
rank its own batches, the loss multiplied by the world size as Ultralytics does; rank 0
prints. --nproc N starts the N ranks itself on this machine and stops them all when one
fails. Collectives time out after 600 s.
"""
import argparse
import copy
import datetime
import json
import math
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn

import flops
import rtdetr_loss
import rtdetr_torch


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="rtdetr_torch.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="rtdetr-l", help="a yaml path or built-in name (trainer/models/)")
    p.add_argument("--imgsz", type=int, default=320)
    p.add_argument("--batch", type=int, default=2, help="images per step (per rank under --ddp)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--steps", type=int, default=8, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--data", help="a data.yaml (our synth's layout); default: random batches")
    p.add_argument("--boxes", type=int, default=5, help="boxes per random image")
    p.add_argument("--nc", type=int, help="classes of random batches (default: the yaml's)")
    p.add_argument("--accumulate", type=int, default=1, help="optimizer step every N steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="time per op family of one more step")
    p.add_argument("--count-flops", action="store_true", help="print the step's FLOPs and exit")
    p.add_argument("--ddp", action="store_true", help="DistributedDataParallel (see above)")
    p.add_argument("--nproc", type=int, help="with --ddp: start this many local ranks")
    p.add_argument("--find-unused-parameters", action="store_true", help="DDP's setting")
    p.add_argument("--bench", action="store_true",
                   help="the timed steps: the default mode, named for scripts (tests/gpu/check.sh)")
    p.add_argument("--tf32", action="store_true",
                   help="CUDA: let matmuls and convolutions use TF32 (off: fp32 throughout, as ours)")
    p.add_argument("--params", action="store_true",
                   help="print the parameter listing as `ddpdbg-train params` does, and exit")
    a = p.parse_args(argv)
    for name in ("imgsz", "batch", "threads", "steps", "accumulate"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1, got %d" % (name, getattr(a, name)))
    if a.imgsz % 32:
        p.error("--imgsz must be a multiple of the stride 32, got %d" % a.imgsz)
    if a.warmup < 0 or a.boxes < 0:
        p.error("--warmup and --boxes must be >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch %s sees no CUDA device" % torch.__version__)
    if a.nproc is not None and not a.ddp:
        p.error("--nproc needs --ddp")
    if a.bench and (a.count_flops or a.params):
        p.error("--bench times steps; --count-flops and --params do not")
    return a


def die(message):
    """Bad input: one line on stderr, exit status 2."""
    print("rtdetr_torch.py: " + message, file=sys.stderr)
    sys.exit(2)


# ---- batches ----

class RandomBatches:
    def __init__(self, batch, imgsz, boxes, nc, seed):
        self.batch, self.imgsz, self.boxes, self.nc = batch, imgsz, boxes, nc
        self.g = torch.Generator().manual_seed(seed)

    def next(self):
        n = self.batch * self.boxes
        centre = torch.rand(n, 2, generator=self.g) * 0.6 + 0.2
        size = torch.rand(n, 2, generator=self.g) * 0.25 + 0.05
        return {"img": torch.rand(self.batch, 3, self.imgsz, self.imgsz, generator=self.g),
                "batch_idx": torch.arange(self.batch).repeat_interleave(self.boxes).float(),
                "cls": torch.randint(0, self.nc, (n, 1), generator=self.g).float(),
                "bboxes": torch.cat([centre, size], 1)}


def read_data_yaml(path):
    """(nc, train image paths) of a YOLO data.yaml whose train: is one folder of images."""
    import yaml
    try:
        with open(path) as f:
            spec = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        die("%s: cannot read: %s" % (path, str(e).splitlines()[0]))
    if not isinstance(spec, dict) or "train" not in spec or "nc" not in spec:
        die("%s: expected a data yaml with train: and nc:" % path)
    root = spec.get("path") or os.path.dirname(os.path.abspath(path))
    folder = os.path.join(root, spec["train"])
    if not os.path.isdir(folder):
        die("%s: train: %s is not a folder" % (path, folder))
    images = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                    if f.lower().endswith((".png", ".jpg", ".jpeg", ".bmp")))
    if not images:
        die("%s: no images in %s" % (path, folder))
    return int(spec["nc"]), images


class DatasetBatches:
    """Our synth's train split, shuffled by seed, one shard per rank (DistributedSampler's
    rank::world), stretched to imgsz; labels from the parallel labels/ folder."""

    def __init__(self, path, batch, imgsz, seed, rank=0, world=1):
        try:
            from PIL import Image
        except ImportError:
            die("--data needs PIL to decode images (Debian: python3-pil)")
        self.Image, self.batch, self.imgsz = Image, batch, imgsz
        self.nc, images = read_data_yaml(path)
        random.Random(seed).shuffle(images)
        self.images = images[rank::world]
        self.at = 0

    def load(self, image_path):
        img = self.Image.open(image_path).convert("RGB").resize((self.imgsz, self.imgsz),
                                                                 self.Image.BILINEAR)
        x = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8)
        x = x.view(self.imgsz, self.imgsz, 3).permute(2, 0, 1).float() / 255
        label = image_path.replace("/images/", "/labels/").rsplit(".", 1)[0] + ".txt"
        rows = []
        if os.path.exists(label):
            with open(label) as f:
                rows = [list(map(float, line.split())) for line in f if line.strip()]
        return x, torch.tensor(rows, dtype=torch.float32).view(-1, 5)

    def next(self):
        imgs, labels = [], []
        for _ in range(self.batch):
            x, rows = self.load(self.images[self.at % len(self.images)])
            self.at += 1
            imgs.append(x)
            labels.append(rows)
        counts = torch.tensor([len(r) for r in labels])
        rows = torch.cat(labels)
        return {"img": torch.stack(imgs), "batch_idx": torch.repeat_interleave(
                    torch.arange(self.batch), counts).float(),
                "cls": rows[:, :1], "bboxes": rows[:, 1:]}


def to_device(batch, device):
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


# ---- the optimizer step (Ultralytics' build_optimizer, optimizer_step, ModelEMA) ----

def build_optimizer(model, nc, batch, accumulate, nbs=64, weight_decay=5e-4):
    norms = tuple(v for k, v in nn.__dict__.items() if "Norm" in k)
    biases, decayed, norm_weights = [], [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if "bias" in name:
                biases.append(p)
            elif isinstance(module, norms):
                norm_weights.append(p)
            else:
                decayed.append(p)
    lr = round(0.002 * 5 / (4 + nc), 6)
    opt = torch.optim.AdamW(biases, lr=lr, betas=(0.9, 0.999), weight_decay=0.0)
    opt.add_param_group({"params": decayed, "weight_decay": weight_decay * batch * accumulate / nbs})
    opt.add_param_group({"params": norm_weights, "weight_decay": 0.0})
    return opt


class ModelEMA:
    def __init__(self, model, decay=0.9999, tau=2000):
        self.ema = copy.deepcopy(model).eval()
        for p in self.ema.parameters():
            p.requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, 0

    @torch.no_grad()
    def update(self, model):
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.tau))
        msd = model.state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v *= d
                v += (1 - d) * msd[k].detach()


def optimizer_step(model, opt, ema):
    nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ema.update(model)


# ---- the run ----

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one_step(model, batches, opt, ema, device, world, step_optimizer):
    """(forward, backward, optimizer) seconds of one step."""
    batch = to_device(batches.next(), device)
    sync(device)
    t0 = time.perf_counter()
    with torch.profiler.record_function("forward_and_loss"):
        loss, _ = model(batch)
        loss = loss * world
    sync(device)
    t1 = time.perf_counter()
    with torch.profiler.record_function("backward"):
        loss.backward()
    sync(device)
    t2 = time.perf_counter()
    if step_optimizer:
        with torch.profiler.record_function("optimizer"):
            optimizer_step(model.module if world > 1 else model, opt, ema)
        sync(device)
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def quantiles(xs):
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]
    return {"median": round(statistics.median(xs), 4), "p90": round(p90, 4),
            "min": round(xs[0], 4), "max": round(xs[-1], 4)}


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def spawn_ranks(nproc, argv):
    """--nproc: this script once per rank with torchrun's variables; the worst exit status.
    The port is a free one in 20000-31999, below Linux's ephemeral ports, which outgoing
    connections may hold (tests/cli/lib.sh's convention)."""
    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
    procs = []  # the ranks get argv as it is: with RANK set, --nproc starts nothing
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                   LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(sys.argv[0])] + argv, env=env))
    # A rank that fails leaves the others waiting in a collective: stop them, as a launcher does.
    while any(p.poll() is None for p in procs):
        if any(p.poll() not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        time.sleep(0.1)
    return max(abs(p.returncode) for p in procs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if a.params:
        print("\n".join(rtdetr_torch.params_listing(rtdetr_torch.build_model(a.model, nc=a.nc))))
        return 0
    if a.nproc is not None and "RANK" not in os.environ:
        sys.exit(spawn_ranks(a.nproc, argv))
    torch.set_num_threads(a.threads)
    rank, world = 0, 1
    device = torch.device(a.device)
    if a.ddp:
        import torch.distributed as dist
        for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            if k not in os.environ:
                die("--ddp: %s is not set (start each rank with RANK, WORLD_SIZE, MASTER_ADDR, "
                    "MASTER_PORT, or give --nproc)" % k)
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if a.device == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo",
                                timeout=datetime.timedelta(seconds=600))
    torch.manual_seed(a.seed + rank)
    if device.type == "cuda":  # torch's defaults differ: matmul fp32, cuDNN convolutions TF32
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32

    if a.data:
        batches = DatasetBatches(a.data, a.batch, a.imgsz, a.seed, rank, world)
        nc = batches.nc
    else:
        nc = a.nc
        batches = None
    model = rtdetr_torch.build_model(a.model, nc=nc)
    nc = model.nc
    if batches is None:
        batches = RandomBatches(a.batch, a.imgsz, a.boxes, nc, a.seed + rank)
    model.to(device).train()

    if a.count_flops:
        table = flops.count_step(model, to_device(batches.next(), device))
        if rank == 0:
            flops.print_table(table, None)
        return 0

    if a.ddp:
        ids = [device.index] if device.type == "cuda" else None
        train_model = nn.parallel.DistributedDataParallel(
            model, device_ids=ids, find_unused_parameters=a.find_unused_parameters)
    else:
        train_model = model
    opt = build_optimizer(model, nc, a.batch * world, a.accumulate)
    ema = ModelEMA(model)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    say = print if rank == 0 else (lambda *x, **k: None)
    say("# torch %s, %s, %s %d px, batch %d%s, %d threads, %s, matcher: %s" % (
        torch.__version__, device, a.model, a.imgsz, a.batch,
        " x %d ranks" % world if world > 1 else "", a.threads,
        "data %s" % a.data if a.data else "random batches, %d boxes per image" % a.boxes,
        rtdetr_loss.MATCHER))
    parts = []
    for i in range(a.warmup + a.steps):
        f, b, o = one_step(train_model, batches, opt, ema, device, world, (i + 1) % a.accumulate == 0)
        tag = "warmup" if i < a.warmup else "step"
        say("%s %d: %.3f s (forward+loss %.3f, backward %.3f, optimizer %.3f)" % (
            tag, i, f + b + o, f, b, o), flush=True)
        if i >= a.warmup:
            parts.append((f + b + o, f, b, o))

    result = {"model": a.model, "imgsz": a.imgsz, "batch": a.batch, "world": world,
              "threads": a.threads, "device": str(device), "torch": torch.__version__,
              "steps": a.steps, "accumulate": a.accumulate, "matcher": rtdetr_loss.MATCHER,
              "tf32": bool(a.tf32 and device.type == "cuda"),
              "batches": a.data or "random, %d boxes per image" % a.boxes,
              "step_s": quantiles([p[0] for p in parts]),
              "forward_s": quantiles([p[1] for p in parts]),
              "backward_s": quantiles([p[2] for p in parts]),
              "optimizer_s": quantiles([p[3] for p in parts]),
              "peak_rss_mb": round(peak_rss_mb(), 1)}
    if device.type == "cuda":
        result["peak_cuda_allocated_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        result["peak_cuda_reserved_mb"] = round(torch.cuda.max_memory_reserved(device) / 2**20, 1)
    if world > 1:
        import torch.distributed as dist
        every = [None] * world
        dist.all_gather_object(every, result["peak_rss_mb"])
        result["peak_rss_mb_per_rank"] = every
    if a.profile:
        table = flops.profile_step(lambda: one_step(train_model, batches, opt, ema, device, world, True),
                                   model, device)
        if rank == 0:
            flops.print_table(table, result)
    memory = ("peak %.0f MiB allocated on the GPU" % result["peak_cuda_allocated_mb"]
              if device.type == "cuda" else "peak RSS %.0f MB" % result["peak_rss_mb"])
    say("result: %s %d px batch %d%s on %s, torch %s: median %.3f s a step (p90 %.3f), %s" % (
        a.model, a.imgsz, a.batch, " x %d ranks" % world if world > 1 else "", device,
        torch.__version__, result["step_s"]["median"], result["step_s"]["p90"], memory))
    say(json.dumps(result), flush=True)
    if a.ddp:
        import torch.distributed as dist
        dist.barrier()
        # No destroy_process_group: in torch 1.13 it can deadlock here (seen once under load):
        # ~Reducer drops the last reference to ProcessGroupGloo, whose destructor joins a worker
        # thread that waits for the GIL the destroying thread holds. Every rank has passed the
        # barrier and printed its result, so the process ends without running destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
