#!/usr/bin/env bash
# train.sh TRAIN -- `TRAIN train`: bad arguments, a missing data yaml, a bad label line, an
# unusable checkpoint and a too small imgsz are one line on stderr with exit status 2 and
# nothing on stdout; a 1-epoch rtdetr-tiny run on a synthetic dataset with one corrupt image
# warns about it, counts it, prints the progress header, a row and the validation `all` row,
# and writes last.ckpt; lr0=1e10 stops with exit status 1 naming the term and the iteration;
# without out= the run names runs/detect/train before its first epoch, and git ignores runs/;
# a train split of corrupt images only is one line, exit 2.
source "$(dirname "$0")/lib.sh"


"$train" synth out="$tmp/d" n=10 imgsz=96 classes=2 seed=2 >/dev/null || { echo "FAIL: synth"; exit 1; }
d=$tmp/d/data.yaml
base="model=rtdetr-tiny threads=2 out=$tmp/run"
tiny="$base data=$d imgsz=96 batch=4"

expect_error "ddpdbg-train train: missing model= (a yaml path or a built-in name)" train data="$d"
expect_error "ddpdbg-train train: missing data= (a data yaml, e.g. from \`synth\`)" train model=rtdetr-tiny
expect_error "ddpdbg-train train: batch must be an integer in [1, 1048576], got '0'" train $base data="$d" imgsz=96 batch=0
expect_error "ddpdbg-train train: 'epochs' given twice" train $tiny epochs=1 epochs=2
expect_error "ddpdbg-train train: val must be true or false, got 'maybe'" train $tiny val=maybe
expect_error "ddpdbg-train train: optimizer must be auto, AdamW or SGD, got 'Adam'" train $tiny optimizer=Adam
expect_error "ddpdbg-train train: expected key=value, got 'rtdetr-tiny'" train rtdetr-tiny
expect_error "$tmp/none.yaml: cannot open: No such file or directory" \
    train model=rtdetr-tiny data="$tmp/none.yaml"
"$train" train $base data="$d" imgsz=64 >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ "$(cat "$tmp/err")" = \
    "imgsz=64: too small for rtdetr-tiny.yaml: 84 encoder tokens for 100 queries (need imgsz >= 96)" ] ||
    { echo "FAIL: imgsz=64: exit $rc: $(cat "$tmp/err")"; fail=1; }
"$train" train $tiny resume="$d" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ "$(cat "$tmp/err")" = "$d: not a ddpdbg checkpoint (bad magic)" ] ||
    { echo "FAIL: resume=data.yaml: exit $rc: $(cat "$tmp/err")"; fail=1; }

# a bad number in a label line names the file and the line
cp -r "$tmp/d" "$tmp/bad"
sed -i "s|^path: .*|path: '$tmp/bad'|" "$tmp/bad/data.yaml"
label=$tmp/bad/labels/train/000001.txt
printf '0 0.5 0.5 0.2 0.2\n1 0.5 zero 0.2 0.2\n' >"$label"
"$train" train $base imgsz=96 data="$tmp/bad/data.yaml" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^$label:2: " "$tmp/err" ||
    { echo "FAIL: bad label: exit $rc: $(cat "$tmp/err")"; fail=1; }

# one epoch, one corrupt training image
echo "not a png" >"$tmp/d/images/train/000003.png"
"$train" train $tiny epochs=1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: 1-epoch run exited $rc: $(tail -3 "$tmp/err")"; fail=1; }
grep -q "^WARNING: ignoring corrupt image: $tmp/d/images/train/000003.png" "$tmp/err" ||
    { echo "FAIL: no warning for the corrupt image: $(cat "$tmp/err")"; fail=1; }
grep -q '^train: 7 images, [0-9]* backgrounds, 1 corrupt$' "$tmp/out" &&
    grep -q '^1 corrupt images ignored' "$tmp/out" ||
    { echo "FAIL: the corrupt image is not counted"; fail=1; }
grep -Eq '^ +Epoch +GPU_mem +giou_loss +cls_loss +l1_loss +Instances +Size$' "$tmp/out" ||
    { echo "FAIL: no progress header"; fail=1; }
grep -Eq '^ +1/1 +0G( +[0-9.e+-]+){3} +[0-9]+ +96: 100% 2/2 \[' "$tmp/out" ||
    { echo "FAIL: no final progress row"; fail=1; }
grep -Eq '^ +Class +Images +Instances +Box\(P +R +mAP50 +mAP50-95\)$' "$tmp/out" &&
    grep -Eq '^ +all +2 +[0-9]+( +[0-9.e+-]+){4}$' "$tmp/out" ||
    { echo "FAIL: no validation table with an all row"; fail=1; }
[ -s "$tmp/run/last.ckpt" ] || { echo "FAIL: no last.ckpt"; fail=1; }
[ $fail -eq 0 ] || { echo "stdout was:"; cat "$tmp/out"; }

# an exploding learning rate: exit 1, one line naming the term and the iteration (without
# augmentation, so that the batch, hence the term that overflows first, is fixed)
"$train" train $tiny epochs=1 optimizer=AdamW lr0=1e10 warmup_epochs=0 nbs=4 augment=false \
    >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -v '^WARNING: ignoring corrupt image' "$tmp/err")" = \
    "train: loss_class is not finite at iteration 1 (epoch 1, batch 2/2): stopping" ] ||
    { echo "FAIL: lr0=1e10: exit $rc: $(cat "$tmp/err")"; fail=1; }
# without out=, the results go to runs/detect/train under the working directory: the run says
# so before its first epoch (here it then fails), and git ignores that folder in a checkout
mkdir "$tmp/wd"
(cd "$tmp/wd" && "$train" train model=rtdetr-tiny threads=2 data="$d" imgsz=96 batch=4 epochs=1 \
    optimizer=AdamW lr0=1e10 warmup_epochs=0 nbs=4 >"$tmp/out" 2>/dev/null)
grep -qx 'Results will be saved to runs/detect/train (out= chooses the folder)' "$tmp/out" ||
    { echo "FAIL: the default out= is not named: $(head -5 "$tmp/out")"; fail=1; }
[ -d "$tmp/wd/runs/detect/train" ] || { echo "FAIL: no runs/detect/train"; fail=1; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
git -C "$repo" check-ignore -q runs/detect/train/last.ckpt ||
    { echo "FAIL: runs/ is not ignored by .gitignore"; fail=1; }
git -C "$repo" check-ignore -q trainer/runs/detect/train/last.ckpt ||
    { echo "FAIL: runs/ in a subfolder is not ignored by .gitignore"; fail=1; }

# a split without one readable image: one line naming the data yaml and the split, exit 2
cp -r "$tmp/d" "$tmp/unreadable"
sed -i "s|^path: .*|path: '$tmp/unreadable'|" "$tmp/unreadable/data.yaml"
for f in "$tmp/unreadable/images/train"/*; do echo "not a png" >"$f"; done
"$train" train $base imgsz=96 data="$tmp/unreadable/data.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && [ "$(grep -v '^WARNING: ignoring corrupt image' "$tmp/err")" = \
    "$tmp/unreadable/data.yaml: the train split has no readable image (8 corrupt)" ] ||
    { echo "FAIL: no readable image: exit $rc: $(tail -2 "$tmp/err")"; fail=1; }
exit $fail
