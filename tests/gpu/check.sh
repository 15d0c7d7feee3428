#!/usr/bin/env bash
# check.sh [--dry] [OUT] -- every GPU check of issue 13 in one run, at most 8 minutes on one H200,
# from a checkout that carries the kit of `make gpu-carry` (build/gpu-carry/kit.tar.xz: that
# machine has none of our Debian libraries, so nothing is built there). On the device tool:
#   run(command="bash tests/gpu/check.sh", carry=["build/gpu-carry"], timeout_s=540)
# --dry (or DRY=1), on a machine without a GPU: the same script over the CPU build (bin/,
# build/cpu/tests), every step that can run there run as on the GPU but on the CPU (the data,
# the GPU tests' own skip paths, the step comparison's plumbing, the field report over Gloo
# diagnosed from its trace, the attach tests on gloo), the GPU-only ones reported SKIP
# "dry: needs the GPU"; it proves the script, not the GPU (tests/cli/gpu_check_dry.sh runs it).
# Steps, each under its own time limit, in order of what they prove; a step that fails does not
# stop the next, and one that would not finish inside the 8 minutes is skipped, saying so:
#   parity         test_parity: every CUDA kernel against its CPU twin (the harness's own test
#                  first: test_parity_harness)
#   memcheck       compute-sanitizer memcheck over test_parity's conv, attention, deformable and
#                  reduction rows, and racecheck over the block reductions
#   comm, cupti    test_comm_nccl (2 NCCL ranks on the one GPU with per-rank host ids, host
#                  arrays and device memory in place; 3 Gloo ranks staging device memory) and
#                  test_probe_cupti (NCCL kernels tied to their collective by stream order)
#   step           one rtdetr-tiny step on the GPU and on the CPU from the same seed: the losses
#                  agree within 1e-3 relative (fp32 kernels in another order; 4 printed digits)
#   device-step    test_device_step cuda: one rtdetr-tiny step's 12 loss terms within 1e-4
#                  relative and every parameter's gradient within 2e-3 of its largest
#                  magnitude, CUDA against the CPU (the tolerance's reasons: the test's header)
#   step-memcheck  compute-sanitizer memcheck over that GPU step
#   field-report   the field report on ONE GPU: 3 ranks of rtdetr-l over Gloo (CUDA tensors
#                  staged through host memory), rank 0's batch without boxes at iteration 1;
#                  `ddpdbg report` must find rank 0's 43 unused parameters
#   nccl           2 ranks over NCCL on the one GPU (per-rank host ids, the explicit opt-in
#                  nccl_hostid=rank), traced: CUPTI's rows, NCCL kernels tied to collectives
#   cupti-overhead the same 2-rank NCCL run untraced and traced (probe + CUPTI): both times
#   attach         a real PyTorch job (this machine's torch 2.x) under `ddpdbg run`, traced by
#                  python/ddpdbg and the kit's libddpdbg_probe.so: 2 ranks of
#                  tests/pytorch/scenario.py on the GPU, once over gloo (CUDA tensors) and once
#                  over NCCL (per-rank NCCL_HOSTID): a healthy run whose every bucket allreduce
#                  has its completion (on NCCL: the poller's Work.is_completed), and the field
#                  report's case, whose report names rank 0's box-head parameters 8..11
#   bench          rtdetr-l, 640 px, batch 16: our step time against PyTorch's on the same GPU
#                  (tests/torch/rtdetr_torch.py --bench, TF32 off in both)
# It writes OUT/summary.txt (one line per step: PASS/FAIL/SKIP, seconds, what it measured) and
# OUT/steps.log (every step's output); OUT is $OUT (the device tool's) or build/gpu-check.
# Exit status: 0 when no step failed. The commands of the trainer on a GPU (device=0,
# backend=nccl, the NCCL host-id opt-in) are written as issue 13 documents them; see NCCL_OPT.
set -u
t_start=$SECONDS
DRY=${DRY:-0}
[ "${1:-}" = --dry ] && { DRY=1; shift; }
if [ "$DRY" = 1 ]; then
    BUDGET=${BUDGET:-1800} # the CPU is slower, and nothing here is timed
    CAP_SCALE=6            # each step's limit too (2 shared cores against an H200)
    GPU=""                 # no device= argument: the CPU build trains on the CPU
else
    BUDGET=${BUDGET:-470} # seconds: 8 minutes less a margin for the summary
    CAP_SCALE=1
    GPU="device=0"       # Ultralytics' spelling; under `ddpdbg run` each rank takes LOCAL_RANK's GPU
fi
out=${1:-${OUT:-build/gpu-check}}
mkdir -p "$out"
summary=$out/summary.txt log=$out/steps.log
: >"$summary"
: >"$log"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

note() { echo "$*" | tee -a "$summary"; }
# step NAME CAP FUNCTION: runs the shell function FUNCTION (in a bash of its own, with the
# variables exported below) under a limit of min(CAP, the time left); its output goes to the
# log, and its last line starting "result:" to the summary beside PASS/FAIL/SKIP (exit 77).
# ONLY=name,name,...: only those steps run, the others say SKIP (tests/cli/gpu_check_dry.sh).
# gpu_step: the same, reported SKIP in the dry mode.
gpu_step() {
    if [ "$DRY" = 1 ]; then note "SKIP  $1: dry: needs the GPU"; return; fi
    step "$@"
}
step() {
    local name=$1 cap=$(($2 * CAP_SCALE)) fn=$3
    if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then note "SKIP  $name: not in ONLY"; return; fi
    local left=$((BUDGET - (SECONDS - t_start)))
    if [ $left -lt 20 ]; then note "SKIP  $name: no time left (${left}s of ${BUDGET}s)"; return; fi
    [ "$cap" -gt $left ] && cap=$left
    local t0=$SECONDS
    echo "===== $name (limit ${cap}s)" >>"$log"
    timeout -k 5 "$cap" bash -c "set -u; $(declare -f "$fn" losses); $fn" >"$work/step.log" 2>&1
    local rc=$?
    cat "$work/step.log" >>"$log"
    local result dt=$((SECONDS - t0))
    result=$(grep -a '^result:' "$work/step.log" | tail -1 | cut -c8-)
    if [ $rc -eq 0 ]; then note "PASS  $name (${dt}s)${result:+:$result}"
    elif [ $rc -eq 77 ]; then note "SKIP  $name (${dt}s): $(grep -a '^skip:' "$work/step.log" | tail -1)"
    else
        [ $rc -eq 124 ] && result=" timed out after ${cap}s;$result"
        note "FAIL  $name (${dt}s, exit $rc)${result:+:$result}"
        failed=1
    fi
}

# ---- the kit: our binaries and libraries, and NVIDIA's libraries of this machine ----
kit=$work/kit
if [ "$DRY" = 1 ]; then # a build of this checkout: DRY_BIN, DRY_TESTS (the CPU build's)
    dry_bin=${DRY_BIN:-bin} dry_tests=${DRY_TESTS:-build/cpu/tests}
    if [ ! -x "$dry_bin/ddpdbg-train" ] || [ ! -x "$dry_bin/ddpdbg" ]; then
        note "FAIL  kit: no $dry_bin/ddpdbg-train (make)"
        exit 1
    fi
    mkdir -p "$kit/lib/cxx" && ln -s "$(realpath "$dry_bin")" "$kit/bin" &&
        ln -s "$(realpath "$dry_tests")" "$kit/tests"
    note "kit   dry: $dry_bin and $dry_tests of this checkout (no GPU)"
elif [ -f build/gpu-carry/kit.tar.xz ]; then
    mkdir -p "$kit"
    tar -C "$kit" -xJf build/gpu-carry/kit.tar.xz 2>/dev/null || # without xz(1): python's lzma
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            build/gpu-carry/kit.tar.xz "$kit" ||
        { note "FAIL  kit: cannot unpack build/gpu-carry/kit.tar.xz"; exit 1; }
    note "kit   build/gpu-carry (revision $(cat build/gpu-carry/revision 2>/dev/null); checkout $(git rev-parse --short HEAD 2>/dev/null))"
elif [ -x build/cuda/bin/ddpdbg-train ]; then # a machine that builds: use its CUDA build
    mkdir -p "$kit/lib/cxx" && ln -s "$PWD/build/cuda/bin" "$kit/bin" && ln -s "$PWD/build/cuda/tests" "$kit/tests"
    note "kit   build/cuda (built here)"
else
    note "FAIL  kit: no build/gpu-carry/kit.tar.xz (run \`make gpu-carry\` where the build works and carry build/gpu-carry)"
    exit 1
fi
nvidia_dirs=
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/extras/CUPTI/lib64; do
    [ -d "$d" ] && nvidia_dirs=$nvidia_dirs:$d
done
# PyTorch's wheels bring NCCL, cuBLAS, CUPTI and the runtime under site-packages/nvidia/.
nvidia_dirs=$nvidia_dirs:$(python3 - <<'PY' 2>/dev/null
import os
want = {"libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2", "libcupti.so.13"}
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
dirs = [d for r in roots for d, _, files in os.walk(r) if want & set(files)]
print(":".join(dict.fromkeys(dirs)))
PY
)
libs=$kit/lib$nvidia_dirs
# Ours are the older libstdc++: it joins only when the machine's lacks what our build needs.
sys_cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 /{print $NF; exit}')
if [ -z "$sys_cxx" ] || ! grep -qa GLIBCXX_3.4.30 "$sys_cxx"; then libs=$kit/lib/cxx:$libs; fi
# Wrappers in run/: our binaries see our libraries; python and everything else do not.
mkdir -p "$kit/run"
for f in "$kit"/bin/* "$kit"/tests/test_*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
        "$libs" "$f" >"$kit/run/$(basename "$f")"
    chmod +x "$kit/run/$(basename "$f")"
done
train=$kit/run/ddpdbg-train ddpdbg=$kit/run/ddpdbg
missing=$(LD_LIBRARY_PATH=$libs ldd "$kit/bin/ddpdbg-train" "$kit"/tests/* 2>&1 | grep 'not found' | sort -u)
[ -n "$missing" ] && note "FAIL  kit: libraries not found: $(echo $missing)" && failed=1
[ "$DRY" = 1 ] || note "gpu   $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)

export MEMCHECK_ROWS=conv,attention,msdeform,grid_sample,maxpool,layernorm,batchnorm,sum_dim,binary/add,permute,gather
export kit work train ddpdbg sanitizer GPU DRY
# The run of one rtdetr-tiny iteration (8 training images, batch 8) the step checks use.
export tiny="model=rtdetr-tiny.yaml data=$work/tiny/data.yaml imgsz=96 batch=8 epochs=1 val=false seed=0"
# NCCL refuses two ranks of one communicator on one GPU of one host ("Duplicate GPU detected"):
# each rank claims a host of its own. NCCL_OPT is that explicit opt-in, as a train argument.
export NCCL_OPT=${NCCL_OPT:-nccl_hostid=rank}
# The ranks of one machine talk over lo (the network transport the host ids force).
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}

# ---- data: synthetic datasets, made by our binary ----
if [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *,step,* || ",$ONLY," == *,field-report,* ||
    ",$ONLY," == *,nccl,* || ",$ONLY," == *,step-memcheck,* ]]; then
    if ! "$train" synth out="$work/tiny" n=10 imgsz=96 classes=3 empty=0 seed=3 >>"$log" 2>&1 ||
        ! "$train" synth out="$work/field" n=12 imgsz=160 classes=4 empty=0 seed=7 >>"$log" 2>&1; then
        note "FAIL  data: ddpdbg-train synth (steps.log)"
        failed=1
    fi
fi

# ---- the steps ----
parity_harness() { "$kit/run/test_parity_harness"; }
parity() {
    "$kit/run/test_parity" >"$work/parity.out"
    local rc=$?
    cat "$work/parity.out"
    echo "result: $(grep -a ' rows: ' "$work/parity.out" | tail -1)"
    return $rc
}
memcheck() { # the kernels with the most index arithmetic, every row of each, in one process
    "$sanitizer" --tool memcheck --error-exitcode 9 --leak-check no --target-processes all \
        "$kit/run/test_parity" -o "$MEMCHECK_ROWS" >"$work/memcheck.out" 2>&1
    local rc=$?
    tail -40 "$work/memcheck.out"
    echo "result: $(grep -a 'ERROR SUMMARY' "$work/memcheck.out" | tail -1) in the rows of $MEMCHECK_ROWS"
    return $rc
}
racecheck() { # the shared-memory trees of the block reductions
    "$sanitizer" --tool racecheck --error-exitcode 9 --target-processes all "$kit/run/test_parity" -o softmax
}
comm_nccl() { "$kit/run/test_comm_nccl"; }
probe_cupti() { "$kit/run/test_probe_cupti"; }
# The losses of the last progress line of epoch 1/1: giou, cls, l1.
losses() { tr '\r' '\n' <"$1" | grep -a ' 1/1 ' | tail -1 | awk '{print $3, $4, $5}'; }
step_agreement() {
    "$train" train $tiny ${GPU:+device=cpu} out="$work/cpu" >"$work/cpu.log" 2>&1 || { cat "$work/cpu.log"; return 1; }
    "$train" train $tiny $GPU out="$work/gpu" >"$work/gpu.log" 2>&1 || { cat "$work/gpu.log"; return 1; }
    local c g
    c=$(losses "$work/cpu.log") g=$(losses "$work/gpu.log")
    echo "result: giou cls l1: cpu [$c] gpu [$g] (1e-3 relative)"
    [ -n "$c" ] && [ -n "$g" ] && echo "$c $g" | awk '{
        for (i = 1; i <= 3; i++) { d = $i - $(i + 3); if (d < 0) d = -d; m = $i < 0 ? -$i : $i;
            if (d > 1e-3 * m + 1e-4) exit 1 } }'
}
device_step() { # dry: the fake device against the CPU (bit for bit) instead of CUDA
    local which=cuda
    [ "$DRY" = 1 ] && which=
    "$kit/run/test_device_step" $which >"$work/device_step.out"
    local rc=$?
    cat "$work/device_step.out"
    echo "result: $(grep -a '^[a-z]* vs cpu' "$work/device_step.out" | tail -1)"
    return $rc
}
step_memcheck() {
    "$sanitizer" --tool memcheck --error-exitcode 9 --leak-check no --target-processes all \
        "$train" train $tiny $GPU out="$work/memcheck"
}
field_report() {
    "$ddpdbg" run --nproc-per-node 3 --no-tui --trace "$work/field-trace" -- train \
        model=rtdetr-l.yaml data="$work/field/data.yaml" imgsz=160 batch=1 epochs=1 val=false \
        $GPU backend=gloo fault=nogt:rank=0,iter=1 out="$work/field-run"
    echo "ddpdbg run exited $? (rank 0's error is expected)"
    "$ddpdbg" report "$work/field-trace" --json >"$work/report.json"
    "$ddpdbg" report "$work/field-trace" | head -20
    grep -q '"kind": "unused_some_ranks"' "$work/report.json" &&
        grep -q 'never marked 43 parameters ready' "$work/report.json" || return 1
    echo "result: the trace says rank 0 never marked 43 parameters ready (unused on some ranks)"
}
nccl_run() { # traced: CUPTI records the GPU (every traced run on a CUDA device turns it on)
    "$ddpdbg" run --nproc-per-node 2 --no-tui --trace "$work/nccl-trace" -- train $tiny $GPU \
        backend=nccl $NCCL_OPT out="$work/nccl-run" >"$work/nccl.log" 2>&1
    local rc=$?
    cat "$work/nccl.log"
    grep -q 'parameters identical on all 2 ranks' "$work/nccl.log" || rc=1
    "$ddpdbg" export "$work/nccl-trace" --chrome "$work/nccl-trace.json" 2>/dev/null
    local db=$work/nccl-trace/rank0.db tied kernels meta
    if command -v sqlite3 >/dev/null; then
        kernels=$(sqlite3 "$db" "SELECT count(*) FROM named_events WHERE kind = 'GPU_KERNEL'")
        tied=$(sqlite3 "$db" "SELECT count(*) FROM named_events k JOIN named_events x ON
            x.kind = 'GPU_CORRELATION' AND x.iter = k.iter AND x.b = 1 JOIN named_events l ON
            l.kind = 'COLL_LAUNCH' AND l.c = x.c WHERE k.kind = 'GPU_KERNEL'")
        meta=$(sqlite3 "$db" "SELECT group_concat(key || '=' || value, ' ') FROM meta WHERE key LIKE 'cupti%'")
    else # python's sqlite3 module (the GPU machine has python, maybe not the sqlite3 tool)
        read -r kernels tied meta < <(python3 - "$db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
q = lambda s: db.execute(s).fetchone()[0]
print(q("SELECT count(*) FROM named_events WHERE kind = 'GPU_KERNEL'"),
      q("""SELECT count(*) FROM named_events k JOIN named_events x ON x.kind = 'GPU_CORRELATION'
           AND x.iter = k.iter AND x.b = 1 JOIN named_events l ON l.kind = 'COLL_LAUNCH'
           AND l.c = x.c WHERE k.kind = 'GPU_KERNEL'"""),
      q("SELECT group_concat(key || '=' || value, ' ') FROM meta WHERE key LIKE 'cupti%'"))
PY
        )
    fi
    echo "rank 0's trace: $kernels GPU kernels, $tied NCCL kernels tied to a bucket's collective; $meta"
    grep -o '"cat":"gpu"[^}]*"collective":[1-9][0-9]*' "$work/nccl-trace.json" | head -3
    [ "${tied:-0}" -ge 1 ] || rc=1
    echo "result: 2 NCCL ranks on one GPU (nccl_hostid=rank): identical parameters; rank 0: $kernels kernels, $tied NCCL kernels tied to their collective"
    return $rc
}
# The same run untraced and traced: the probe's and CUPTI's cost together (issue 13: <= 0.5 %).
# Two runs of a few iterations each: start-up is in both, so the difference is the overhead.
cupti_overhead() {
    local n t0 t1 plain traced
    "$train" synth out="$work/ov" n=60 imgsz=320 classes=3 empty=0 seed=5 >/dev/null || return 1
    for n in plain traced; do
        local trace_arg=--no-trace
        [ $n = traced ] && trace_arg="--trace $work/ov-trace"
        t0=$(date +%s.%N)
        "$ddpdbg" run --nproc-per-node 2 --no-tui $trace_arg -- train model=rtdetr-l.yaml \
            data="$work/ov/data.yaml" imgsz=320 batch=8 epochs=1 val=false augment=false $GPU \
            backend=nccl $NCCL_OPT out="$work/ov-$n" >"$work/ov-$n.log" 2>&1 || { tail -5 "$work/ov-$n.log"; return 1; }
        t1=$(date +%s.%N)
        eval "$n=$(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')"
    done
    echo "result: rtdetr-l 320 px batch 8, 2 NCCL ranks, 3 iterations: untraced ${plain} s, traced ${traced} s ($(echo "$plain $traced" | awk '{printf "%+.1f %%", ($2 - $1) * 100 / $1}'), start-up included)"
}
# attach_run BACKEND: the two runs of the attach step; python3 is this machine's (torch 2.x).
# In the dry mode: gloo on the CPU, with the python that imports torch and the CPU build's probe.
attach_run() {
    local backend=$1 hostid= t="$work/attach-$1" device=cuda py=python3 c
    [ "$backend" = nccl ] && hostid=--nccl-hostid
    if [ "$DRY" = 1 ]; then
        device=cpu py=
        for c in /usr/bin/python3 python3; do
            "$c" -c 'import torch.distributed' 2>/dev/null && { py=$c; break; }
        done
        [ -n "$py" ] || { echo "no python3 imports torch"; return 1; }
    fi
    local lib=$kit/lib/probe/libddpdbg_probe.so
    [ -f "$lib" ] || lib=$("$ddpdbg" env --trace x | sed -n "s/^export DDPDBG_PROBE_LIB='\(.*\)'$/\1/p")
    export DDPDBG_PROBE_LIB=$lib DDPDBG_PYTHON_DIR=$PWD/python
    "$ddpdbg" run --nproc-per-node 2 --no-tui --hang-timeout 30 --trace "$t-healthy" -- "$py" \
        tests/pytorch/scenario.py healthy --device $device --backend "$backend" $hostid --checksum || return 1
    "$ddpdbg" run --nproc-per-node 2 --no-tui --hang-timeout 30 --trace "$t-nogt" -- "$py" \
        tests/pytorch/scenario.py nogt --device $device --backend "$backend" $hostid
    echo "ddpdbg run exited $? (rank 0's error is expected)"
    "$ddpdbg" report "$t-nogt" --json >"$t-nogt.json"
    "$ddpdbg" report "$t-nogt" | head -30
    grep -q '"kind": "unused_some_ranks"' "$t-nogt.json" &&
        tr -d '\n' <"$t-nogt.json" | grep -q '"ranks": \[0\], "iteration": 1, "bucket": 0,[^]]*"parameters": \[8, 9, 10, 11\]' ||
        { echo "the field report's finding is missing"; return 1; }
    "$py" - "$t-healthy" <<'PY' || return 1
import sqlite3, sys
for r in (0, 1):
    db = sqlite3.connect("%s/rank%d.db" % (sys.argv[1], r))
    version = db.execute("SELECT value FROM meta WHERE key = 'torch_version'").fetchone()[0]
    launched = db.execute("SELECT count(*) FROM events WHERE kind = 11 AND text = 'bucket'").fetchone()[0]
    done = db.execute("SELECT count(*) FROM events WHERE kind = 12 AND text = 'bucket' AND flags & 1").fetchone()[0]
    hooks = db.execute("SELECT count(*) FROM events WHERE kind = 8 AND flags & 2").fetchone()[0]
    print("rank %d: torch %s, %d bucket allreduces launched, %d completed, %d marking hooks"
          % (r, version, launched, done, hooks))
    if launched == 0 or done != launched or hooks != 4 * 12:
        sys.exit(1)
PY
    echo "result: $backend on $device, torch $("$py" -c 'import torch; print(torch.__version__)'): the healthy run's bucket allreduces all completed; the field report names parameters 8..11"
}
export -f attach_run # step runs each function in a bash of its own
attach_gloo() { attach_run gloo; }
attach_nccl() { attach_run nccl; }
# Ours: a run of 6 iterations less one of 2, over 4: start-up, the first iteration's cuBLAS and
# memory-pool warm-up and the data set's loading cancel; the data loading of the iterations
# themselves (8 threads) stays in. TF32 is off in ours (CUBLAS_DEFAULT_MATH).
bench_ours() {
    local iters t0 t1
    for iters in 2 6; do # 80 % of a synth set trains: 20 images give 16. synth makes at most 24
        # classes (COCO's 80 would change only the class heads' width, 300 x 80 against 300 x 24)
        "$train" synth out="$work/b$iters" n=$((iters * 20)) imgsz=640 classes=24 empty=0.1 seed=1 >/dev/null || return 1
        t0=$(date +%s.%N)
        "$train" train model=rtdetr-l.yaml data="$work/b$iters/data.yaml" imgsz=640 batch=16 epochs=1 \
            val=false augment=false $GPU threads=8 out="$work/bench$iters" >"$work/bench$iters.log" 2>&1 ||
            { tail -5 "$work/bench$iters.log"; return 1; }
        t1=$(date +%s.%N)
        echo "$t0 $t1" | awk '{printf "%.3f\n", $2 - $1}' >"$work/t$iters"
    done
    local ms
    ms=$(awk -v a="$(cat "$work/t6")" -v b="$(cat "$work/t2")" 'BEGIN {printf "%.0f", (a - b) * 1000 / 4}')
    echo "runs: 6 iterations $(cat "$work/t6") s, 2 iterations $(cat "$work/t2") s"
    echo "result: rtdetr-l 640 px batch 16 on this GPU: ours $ms ms per step (data loading in)"
}
# The PyTorch rendering times its own steps (bench_step.py: TF32 off, as ours), on our data.
bench_pytorch() {
    local data=()
    [ -f "$work/b6/data.yaml" ] && data=(--data "$work/b6/data.yaml")
    python3 tests/torch/rtdetr_torch.py --bench --model rtdetr-l --imgsz 640 --batch 16 \
        --device cuda --threads 8 --steps 6 --warmup 2 --nc 24 "${data[@]}"
}

step parity-harness 60 parity_harness
gpu_step parity 120 parity
if [ "$DRY" = 1 ]; then
    note "SKIP  memcheck, racecheck: dry: needs the GPU"
elif [ -n "$sanitizer" ]; then
    step memcheck 150 memcheck
    step racecheck 60 racecheck
elif [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *,memcheck,* ]]; then
    note "FAIL  memcheck: compute-sanitizer not found"
    failed=1
fi
step comm_nccl 90 comm_nccl
step probe_cupti 60 probe_cupti
step step 120 step_agreement
step device-step 120 device_step
[ -n "$sanitizer" ] && gpu_step step-memcheck 120 step_memcheck
step field-report 150 field_report
tar -C "$work" -czf "$out/field-trace.tar.gz" field-trace 2>/dev/null
gpu_step nccl 120 nccl_run
tar -C "$work" -czf "$out/nccl-trace.tar.gz" nccl-trace 2>/dev/null
step attach-gloo 120 attach_gloo # the dry mode runs it on the CPU
gpu_step attach-nccl 120 attach_nccl
gpu_step bench-ours 150 bench_ours
gpu_step bench-pytorch 120 bench_pytorch
gpu_step cupti-overhead 100 cupti_overhead

note "total $((SECONDS - t_start))s; $([ $failed = 0 ] && echo 'no step failed' || echo 'FAILED (see steps.log)')"
exit $failed
