#!/usr/bin/env bash
# torch_ref.sh TRAIN -- tests/torch/, our models in PyTorch (Debian's python3-torch under
# /usr/bin/python3; without it this test FAILS, as any missing tool in CI does):
# - the PyTorch model's parameter listing equals `TRAIN params` for all five yamls (and nc=5),
#   and its AccumulateGrad hooks fire in the order of tests/golden/params/rtdetr-l.hooks.txt
#   (which test_model.c holds our engine to), also with the real loss and denoising;
# - its assignment equals scipy's recorded answers (tests/golden/hungarian.bin);
# - one training step is the same in PyTorch as in our trainer (`TRAIN dump` then
#   check_same_loss.py: 12 loss terms, which parameters get a gradient, every gradient within
#   the tolerances stated there) on rtdetr-tiny: fresh weights; perturbed weights written by
#   PyTorch into our checkpoint format and read by TRAIN; a background-only batch; a batch of
#   one image (torch 1.13's BatchNorm gradient bug); 128 px with an empty image in the batch;
# - the step benchmark's modes run and say what they measured (never timed here): plain,
#   --data, --profile, --count-flops, --ddp --nproc 2; bad arguments are exit 2;
# - dump's bad input: one line, exit 2.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
clear_rank_env
py=/usr/bin/python3
bench="$py tests/torch/rtdetr_torch.py"
check() { # message, command...
    local msg=$1; shift
    if ! "$@"; then echo "FAIL: $msg"; fail=1; fi
}
if ! $py -c 'import torch, yaml, numpy' 2>"$tmp/import.err"; then
    echo "FAIL: $py cannot import torch, yaml and numpy (make deps installs python3-torch):"
    cat "$tmp/import.err"
    exit 1
fi

# ---- the model's parameters, as ours ----
models="rtdetr-tiny rtdetr-l rtdetr-x rtdetr-resnet50 rtdetr-resnet101"
# one process for all (building the big models takes a while); rtdetr-x:5 is nc=5
$py - "$tmp" $models rtdetr-x:5 <<'PY' || fail=1
import sys
sys.path.insert(0, "tests/torch")
import rtdetr_torch
for m in sys.argv[2:]:
    name, _, nc = m.partition(":")
    model = rtdetr_torch.build_model(name, int(nc) if nc else None)
    with open("%s/torch-%s.txt" % (sys.argv[1], m), "w") as f:
        f.write("\n".join(rtdetr_torch.params_listing(model)) + "\n")
PY
for m in $models; do
    "$train" params model=$m >"$tmp/ours-$m.txt"
    check "$m: PyTorch's parameter listing equals ours" diff -u "$tmp/ours-$m.txt" "$tmp/torch-$m.txt"
done
"$train" params model=rtdetr-x nc=5 >"$tmp/ours-x5.txt"
check "rtdetr-x nc=5: PyTorch's parameter listing equals ours" \
    diff -u "$tmp/ours-x5.txt" "$tmp/torch-rtdetr-x:5.txt"
$bench --model rtdetr-tiny --params >"$tmp/torch-cli.txt"
check "rtdetr_torch.py --params prints that listing" cmp -s "$tmp/ours-rtdetr-tiny.txt" "$tmp/torch-cli.txt"

# ---- the graph, as PyTorch's reference: the AccumulateGrad hook order DDP sees ----
$py tests/golden/params/rtdetr_hooks.py >"$tmp/hooks.txt"
check "rtdetr_hooks.py on this model rewrites rtdetr-l.hooks.txt unchanged" \
    cmp -s "$tmp/hooks.txt" tests/golden/params/rtdetr-l.hooks.txt
$py - <<'PY' >"$tmp/hooks-loss.txt" 2>&1 || fail=1  # and with the real loss and denoising
import sys
sys.path.insert(0, "tests/torch")
import torch
import rtdetr_torch
model = rtdetr_torch.build_model("rtdetr-l").train()
order, accumulators = [], []
for i, p in enumerate(model.parameters()):
    accumulators.append(p.expand_as(p).grad_fn.next_functions[0][0])
    accumulators[-1].register_hook(lambda *unused, i=i: order.append(i))
batch = {"img": torch.rand(1, 3, 160, 160), "batch_idx": torch.zeros(2), "cls": torch.tensor([3.0, 7.0]),
         "bboxes": torch.tensor([[0.3, 0.4, 0.2, 0.2], [0.6, 0.6, 0.3, 0.2]])}
model(batch)[0].backward()
golden = [l for l in open("tests/golden/params/rtdetr-l.hooks.txt") if not l.startswith("#")]
print("same" if order == list(map(int, golden[0].split())) else "different: %s" % order)
PY
check "rtdetr-l's hook order with the real loss equals rtdetr-l.hooks.txt" grep -qx same "$tmp/hooks-loss.txt"

# ---- the assignment, as scipy's ----
check "the matcher's assignments equal scipy's" $py tests/torch/check_matcher.py

# ---- one training step, as ours ----
d=$tmp/data
"$train" synth out=$d/boxes n=8 imgsz=96 classes=3 empty=0 seed=1 >/dev/null
"$train" synth out=$d/bg n=6 imgsz=96 classes=3 empty=1 seed=2 >/dev/null
"$train" synth out=$d/mixed n=12 imgsz=128 classes=3 empty=0.3 seed=4 >/dev/null
dump() { # name data imgsz batch [weights]
    "$train" dump model=rtdetr-tiny data=$d/$2/data.yaml imgsz=$3 batch=$4 seed=9 \
        ${5:+weights=$5} out=$tmp/$1 >"$tmp/$1.log" 2>&1 || { echo "FAIL: dump $1:"; cat "$tmp/$1.log"; fail=1; }
}
dump fresh boxes 96 2
$py tests/torch/check_same_loss.py perturb $tmp/fresh/model.ckpt $tmp/perturbed.ckpt 5 >/dev/null
dump boxes boxes 96 2 $tmp/perturbed.ckpt
dump background bg 96 2 $tmp/perturbed.ckpt
dump single boxes 96 1 $tmp/perturbed.ckpt
dump mixed mixed 128 4 $tmp/perturbed.ckpt
# the cases are what they claim: boxes and denoising, none, one image, an empty image among boxes
$py - "$tmp" >"$tmp/cases.txt" <<'PY'
import sys
sys.path.insert(0, "tests/torch")
import ddpdbg_files
for case in ("fresh", "boxes", "background", "single", "mixed"):
    a = ddpdbg_files.read_arrays("%s/%s/step.bin" % (sys.argv[1], case))
    print(case, [int(c) for c in a["counts"].tolist()], "dn" if "dn_cls" in a else "no-dn")
PY
check "dump cases: $(tr '\n' ';' <"$tmp/cases.txt")" grep -qx 'fresh \[1, 4\] dn' "$tmp/cases.txt"
check "background batch without boxes or denoising" grep -qx 'background \[0, 0\] no-dn' "$tmp/cases.txt"
check "single-image batch" grep -qx 'single \[1\] dn' "$tmp/cases.txt"
check "mixed batch holds an empty image" grep -Eqx 'mixed \[.*\b0\b.*\] dn' "$tmp/cases.txt"
$py tests/torch/check_same_loss.py $tmp/fresh $tmp/boxes $tmp/background $tmp/single $tmp/mixed \
    >"$tmp/same.txt" 2>&1
rc=$?
cat "$tmp/same.txt"
check "check_same_loss.py agrees on every step (exit $rc)" test $rc -eq 0
check "five steps compared" test "$(grep -c '^SAME ' "$tmp/same.txt")" -eq 5
# rtdetr-tiny's 3 decoder layers: 3 x 6 + 6 + 1 = 25 box-side tensors get no gradient without boxes
check "background: 298 of 323 parameters with a gradient" \
    grep -q "background: rtdetr-tiny.yaml: 2 images, 0 boxes, .* 298 of 323 parameters" "$tmp/same.txt"

# ---- the step benchmark (runs, not timings) ----
json() { # file key: the last JSON line's value at key (dotted)
    $py -c 'import json, sys
v = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
for k in sys.argv[2].split("."):
    v = v[k]
print(v)' "$1" "$2"
}
positive() { $py -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "$1"; }
small="--model rtdetr-tiny --imgsz 96 --batch 2 --threads 1 --steps 2 --warmup 1"
$bench $small --boxes 3 --bench >"$tmp/plain.txt" 2>&1
check "plain run: two timed steps" test "$(grep -c '^step ' "$tmp/plain.txt")" -eq 2
check "plain run: a result: line for tests/gpu/check.sh" \
    grep -q '^result: rtdetr-tiny 96 px batch 2 on cpu, torch .*: median .* s a step' "$tmp/plain.txt"
check "plain run: a median step time" positive "$(json "$tmp/plain.txt" step_s.median)"
check "plain run: a peak RSS" positive "$(json "$tmp/plain.txt" peak_rss_mb)"
check "plain run: forward, backward, optimizer split" positive "$(json "$tmp/plain.txt" optimizer_s.median)"
$bench $small --data $d/mixed/data.yaml --profile >"$tmp/profile.txt" 2>&1
check "--data: names the dataset" test "$(json "$tmp/profile.txt" batches)" = "$d/mixed/data.yaml"
for f in conv gemm deform norms loss/matcher optimizer; do
    check "--profile: time of family $f" positive "$(json "$tmp/profile.txt" families.$f.s)"
done
check "--profile: conv FLOPs" positive "$(json "$tmp/profile.txt" families.conv.gflop)"
$bench --model rtdetr-l --imgsz 320 --batch 2 --count-flops >"$tmp/flops.txt" 2>&1
check "--count-flops: rtdetr-l 320 px batch 2 counts 150-300 GFLOP" \
    awk '/^total counted/ { exit !($NF > 150 && $NF < 300) }' "$tmp/flops.txt"
$bench $small --ddp --nproc 2 >"$tmp/ddp.txt" 2>&1
check "--ddp --nproc 2: two ranks" test "$(json "$tmp/ddp.txt" world)" = 2
check "--ddp: every rank's peak RSS" test "$(json "$tmp/ddp.txt" peak_rss_mb_per_rank | tr -cd , | wc -c)" -eq 1
for bad in "--imgsz 100" "--nproc 2" "--ddp" "--data $tmp/nothing.yaml"; do
    $bench $bad >"$tmp/bad.txt" 2>&1
    rc=$?
    check "bad arguments $bad: exit 2 (got $rc)" test $rc -eq 2
done
one_line() { [ "$(wc -l <"$2")" -eq 1 ] && grep -qx "$1" "$2"; } # pattern file
check "--data without a file: one line naming it" \
    one_line "rtdetr_torch.py: $tmp/nothing.yaml: cannot read: .*No such file.*" "$tmp/bad.txt"
[ $fail -ne 0 ] && for f in plain profile ddp; do echo "--- $f"; tail -5 "$tmp/$f.txt"; done

# ---- dump's bad input ----
expect_error "ddpdbg-train dump: needs model=, data= (a data yaml) and out= (a folder)" dump model=rtdetr-tiny
expect_error "ddpdbg-train dump: imgsz=100 is not a multiple of the stride 32" \
    dump model=rtdetr-tiny data=$d/boxes/data.yaml out=$tmp/x imgsz=100
expect_error "$tmp/nothing.ckpt: cannot open: No such file or directory" \
    dump model=rtdetr-tiny data=$d/boxes/data.yaml out=$tmp/x weights=$tmp/nothing.ckpt
n_bg=$(ls "$d/bg/images/train" | wc -l)
expect_error "ddpdbg-train dump: $d/bg/data.yaml has $n_bg train images, batch=50" \
    dump model=rtdetr-tiny data=$d/bg/data.yaml out=$tmp/x batch=50
exit $fail
