#!/usr/bin/env bash
# check.sh [OUT] -- every GPU check of issue 13 in one run, at most 8 minutes on one H200, from a
# checkout that carries the kit of `make gpu-carry` (build/gpu-carry/kit.tar.xz: that machine has
# none of our Debian libraries, so nothing is built there). On the device tool:
#   run(command="bash tests/gpu/check.sh", carry=["build/gpu-carry"], timeout_s=540)
# Steps, each under its own time limit, in order of what they prove; a step that fails does not
# stop the next, and one that would not finish inside the 8 minutes is skipped, saying so:
#   parity         test_parity: every CUDA kernel against its CPU twin (the harness's own test
#                  first: test_parity_harness)
#   memcheck       compute-sanitizer memcheck over test_parity's conv, attention, deformable and
#                  reduction rows, and racecheck over the block reductions
#   comm, cupti    test_comm_nccl (2 ranks on the one GPU, per-rank NCCL_HOSTID) and
#                  test_probe_cupti
#   step           one rtdetr-tiny step on the GPU and on the CPU from the same seed: the losses
#                  agree within 1e-3 relative (fp32 kernels in another order; 4 printed digits)
#   device-step    test_device_step cuda: one rtdetr-tiny step's 12 loss terms within 1e-4
#                  relative and every parameter's gradient within 2e-3 of its largest
#                  magnitude, CUDA against the CPU (the tolerance's reasons: the test's header)
#   step-memcheck  compute-sanitizer memcheck over that GPU step
#   field-report   the field report on ONE GPU: 3 ranks of rtdetr-l over Gloo (CUDA tensors
#                  staged through host memory), rank 0's batch without boxes at iteration 1;
#                  `ddpdbg report` must find rank 0's 43 unused parameters
#   nccl           2 ranks over NCCL on the one GPU (per-rank host ids, the explicit opt-in)
#   attach         tests/cli/attach*.sh, once with gloo and once with NCCL (if present)
#   bench          rtdetr-l, 640 px, batch 16: our step time against PyTorch's on the same GPU
#                  (tests/torch/rtdetr_torch.py, if present)
# It writes OUT/summary.txt (one line per step: PASS/FAIL/SKIP, seconds, what it measured) and
# OUT/steps.log (every step's output); OUT is $OUT (the device tool's) or build/gpu-check.
# Exit status: 0 when no step failed. The commands of the trainer on a GPU (device=0,
# backend=nccl, the NCCL host-id opt-in) are written as issue 13 documents them; see NCCL_OPT.
set -u
t_start=$SECONDS
BUDGET=${BUDGET:-470} # seconds: 8 minutes less a margin for the summary
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
step() {
    local name=$1 cap=$2 fn=$3
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
if [ -f build/gpu-carry/kit.tar.xz ]; then
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
note "gpu   $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)

export MEMCHECK_ROWS=conv,attention,msdeform,grid_sample,maxpool,layernorm,batchnorm,sum_dim,binary/add,permute,gather
export kit work train ddpdbg sanitizer
# The run of one rtdetr-tiny iteration (8 training images, batch 8) the step checks use.
export tiny="model=rtdetr-tiny.yaml data=$work/tiny/data.yaml imgsz=96 batch=8 epochs=1 val=false seed=0"
# NCCL refuses two ranks of one communicator on one GPU of one host ("Duplicate GPU detected"):
# each rank claims a host of its own. NCCL_OPT is that explicit opt-in, as a train argument.
export NCCL_OPT=${NCCL_OPT:-nccl_hostid=rank}

# ---- data: synthetic datasets, made by our binary ----
"$train" synth out="$work/tiny" n=10 imgsz=96 classes=3 empty=0 seed=3 >>"$log" 2>&1 &&
    "$train" synth out="$work/field" n=12 imgsz=160 classes=4 empty=0 seed=7 >>"$log" 2>&1 ||
    { note "FAIL  data: ddpdbg-train synth (steps.log)"; failed=1; }

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
    "$train" train $tiny device=cpu out="$work/cpu" >"$work/cpu.log" 2>&1 || { cat "$work/cpu.log"; return 1; }
    "$train" train $tiny device=0 out="$work/gpu" >"$work/gpu.log" 2>&1 || { cat "$work/gpu.log"; return 1; }
    local c g
    c=$(losses "$work/cpu.log") g=$(losses "$work/gpu.log")
    echo "result: giou cls l1: cpu [$c] gpu [$g] (1e-3 relative)"
    [ -n "$c" ] && [ -n "$g" ] && echo "$c $g" | awk '{
        for (i = 1; i <= 3; i++) { d = $i - $(i + 3); if (d < 0) d = -d; m = $i < 0 ? -$i : $i;
            if (d > 1e-3 * m + 1e-4) exit 1 } }'
}
device_step() {
    "$kit/run/test_device_step" cuda >"$work/device_step.out"
    local rc=$?
    cat "$work/device_step.out"
    echo "result: $(grep -a '^cuda vs cpu' "$work/device_step.out" | tail -1)"
    return $rc
}
step_memcheck() {
    "$sanitizer" --tool memcheck --error-exitcode 9 --leak-check no --target-processes all \
        "$train" train $tiny device=0 out="$work/memcheck"
}
field_report() {
    "$ddpdbg" run --nproc-per-node 3 --no-tui --trace "$work/field-trace" -- train \
        model=rtdetr-l.yaml data="$work/field/data.yaml" imgsz=160 batch=1 epochs=1 val=false \
        device=0 backend=gloo fault=nogt:rank=0,iter=1 out="$work/field-run"
    echo "ddpdbg run exited $? (rank 0's error is expected)"
    "$ddpdbg" report "$work/field-trace" --json >"$work/report.json"
    "$ddpdbg" report "$work/field-trace" | head -20
    grep -q '"kind": "unused_some_ranks"' "$work/report.json" &&
        grep -q 'never marked 43 parameters ready' "$work/report.json" || return 1
    echo "result: the trace says rank 0 never marked 43 parameters ready (unused on some ranks)"
}
nccl_run() {
    "$ddpdbg" run --nproc-per-node 2 --no-tui --no-trace -- train $tiny device=0 backend=nccl \
        $NCCL_OPT out="$work/nccl-run" >"$work/nccl.log" 2>&1
    local rc=$?
    cat "$work/nccl.log"
    grep -q 'parameters identical on all 2 ranks' "$work/nccl.log" &&
        echo "result: 2 NCCL ranks on one GPU ended with identical parameters"
    return $rc
}
attach() { bash "$ATTACH_SCRIPT" "$train"; }
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
            val=false augment=false device=0 threads=8 out="$work/bench$iters" >"$work/bench$iters.log" 2>&1 ||
            { tail -5 "$work/bench$iters.log"; return 1; }
        t1=$(date +%s.%N)
        echo "$t0 $t1" | awk '{printf "%.3f\n", $2 - $1}' >"$work/t$iters"
    done
    local ms
    ms=$(awk -v a="$(cat "$work/t6")" -v b="$(cat "$work/t2")" 'BEGIN {printf "%.0f", (a - b) * 1000 / 4}')
    echo "runs: 6 iterations $(cat "$work/t6") s, 2 iterations $(cat "$work/t2") s"
    echo "result: rtdetr-l 640 px batch 16 on this GPU: ours $ms ms per step (data loading in)"
}
# The PyTorch rendering times its own steps; DDPDBG_BENCH_TF32=0 asks it to keep TF32 off, as ours.
bench_pytorch() {
    DDPDBG_BENCH_TF32=0 python3 tests/torch/rtdetr_torch.py --bench --imgsz 640 --batch 16 --device cuda
}

step parity-harness 60 parity_harness
step parity 120 parity
if [ -n "$sanitizer" ]; then
    step memcheck 150 memcheck
    step racecheck 60 racecheck
else
    note "FAIL  memcheck: compute-sanitizer not found"
    failed=1
fi
step comm_nccl 90 comm_nccl
step probe_cupti 60 probe_cupti
step step 120 step_agreement
step device-step 120 device_step
[ -n "$sanitizer" ] && step step-memcheck 120 step_memcheck
step field-report 150 field_report
tar -C "$work" -czf "$out/field-trace.tar.gz" field-trace 2>/dev/null
step nccl 120 nccl_run
attach_scripts=$(ls tests/cli/attach*.sh 2>/dev/null)
[ -z "$attach_scripts" ] && note "SKIP  attach: no tests/cli/attach*.sh in this checkout"
for ATTACH_SCRIPT in $attach_scripts; do
    export ATTACH_SCRIPT
    for DDPDBG_ATTACH_BACKEND in gloo nccl; do
        export DDPDBG_ATTACH_BACKEND DDPDBG_ATTACH_DEVICE=cuda
        step "attach $(basename "$ATTACH_SCRIPT" .sh) $DDPDBG_ATTACH_BACKEND" 90 attach
    done
done
step bench-ours 150 bench_ours
if [ -f tests/torch/rtdetr_torch.py ]; then
    step bench-pytorch 120 bench_pytorch
else
    note "SKIP  bench-pytorch: tests/torch/rtdetr_torch.py is missing (the PyTorch rendering of rtdetr-l)"
fi

note "total $((SECONDS - t_start))s; $([ $failed = 0 ] && echo 'no step failed' || echo 'FAILED (see steps.log)')"
exit $failed
