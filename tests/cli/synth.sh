#!/usr/bin/env bash
# synth.sh TRAIN -- `TRAIN synth`: writes the documented layout and summary line, the same
# seed gives byte-identical files and another seed different ones, and every bad argument is
# one line on stderr with exit status 2.
source "$(dirname "$0")/lib.sh"

out=$("$train" synth out="$tmp/a" n=20 imgsz=64 classes=4 empty=0.5 seed=3 2>"$tmp/err")
rc=$?
want="synth: 20 images (16 train, 4 val), 10 without objects,"
[ $rc -eq 0 ] && [ "${out#"$want"}" != "$out" ] ||
    { echo "FAIL: synth exited $rc: $out $(cat "$tmp/err")"; fail=1; }
[ "$(ls "$tmp/a/images/train" | wc -l)" -eq 16 ] && [ "$(ls "$tmp/a/labels/val" | wc -l)" -eq 4 ] ||
    { echo "FAIL: expected 16 train images and 4 val labels"; fail=1; }
grep -q "^path: '$tmp/a'$" "$tmp/a/data.yaml" && grep -q '^train: images/train$' "$tmp/a/data.yaml" &&
    grep -q '^  3: green_rectangle$' "$tmp/a/data.yaml" ||
    { echo "FAIL: data.yaml:"; cat "$tmp/a/data.yaml"; fail=1; }
awk 'NF != 5 || $1 < 0 || $1 > 3 || $2 < 0 || $2 > 1 || $3 < 0 || $3 > 1 { bad = 1 } END { exit bad }' \
    "$tmp"/a/labels/*/*.txt || { echo "FAIL: a label line out of range"; fail=1; }

"$train" synth out="$tmp/b" n=20 imgsz=64 classes=4 empty=0.5 seed=3 >/dev/null &&
    (cd "$tmp/a" && find images labels -type f | sort | xargs cat | md5sum) >"$tmp/a.md5" &&
    (cd "$tmp/b" && find images labels -type f | sort | xargs cat | md5sum) >"$tmp/b.md5" &&
    cmp -s "$tmp/a.md5" "$tmp/b.md5" || { echo "FAIL: the same seed gave different files"; fail=1; }
"$train" synth out="$tmp/c" n=20 imgsz=64 classes=4 empty=0.5 seed=4 >/dev/null &&
    (cd "$tmp/c" && find images labels -type f | sort | xargs cat | md5sum) >"$tmp/c.md5" &&
    ! cmp -s "$tmp/a.md5" "$tmp/c.md5" || { echo "FAIL: another seed gave the same files"; fail=1; }

p="ddpdbg-train synth"
expect_error "$p: missing out= (the dataset folder to create)" synth n=5
expect_error "$p: n must be an integer in [2, 10000000], got '1'" synth out="$tmp/d" n=1
expect_error "$p: n must be an integer in [2, 10000000], got '5x'" synth out="$tmp/d" n=5x
expect_error "$p: imgsz must be an integer in [32, 4096], got '16'" synth out="$tmp/d" imgsz=16
expect_error "$p: classes must be an integer in [1, 24], got '25'" synth out="$tmp/d" classes=25
expect_error "$p: empty must be a fraction in [0, 1], got '1.5'" synth out="$tmp/d" empty=1.5
expect_error "$p: empty must be a fraction in [0, 1], got 'nan'" synth out="$tmp/d" empty=nan
expect_error "$p: seed must be an integer in [0, 9223372036854775807], got '-1'" synth out="$tmp/d" seed=-1
expect_error "$p: unknown argument 'size=3' (expected out=, n=, imgsz=, classes=, empty=, seed=)" \
    synth out="$tmp/d" size=3
expect_error "$p: 'n' given twice" synth out="$tmp/d" n=3 n=4
expect_error "$p: expected key=value, got 'dir'" synth dir
expect_error "$tmp/a: already holds images (expected a new or empty folder)" synth out="$tmp/a"
touch "$tmp/file"
expect_error "$tmp/file: exists and is not a folder (expected a new or empty folder)" synth out="$tmp/file"
[ ! -e "$tmp/d" ] || { echo "FAIL: a rejected command created its folder"; fail=1; }
exit $fail
