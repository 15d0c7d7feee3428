#!/usr/bin/env bash
# errors.sh TRAIN -- bad input to TRAIN is one line on stderr and exit status 2: every
# tests/fixtures/bad_yaml/X.yaml fails with exactly the line in X.err, and so do a missing
# file, bad key=value arguments and a missing model=; no arguments prints the usage (2),
# --help prints it on stdout (0).
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."


n=0
for y in tests/fixtures/bad_yaml/*.yaml; do
    expect_error "$(cat "${y%.yaml}.err")" params model="$y"
    n=$((n + 1))
done
[ $n -ge 15 ] || { echo "FAIL: only $n bad yaml fixtures"; fail=1; }

expect_error "tests/fixtures/bad_yaml/none.yaml: cannot open: No such file or directory" \
    params model=tests/fixtures/bad_yaml/none.yaml
expect_error "ddpdbg-train params: missing model= (a yaml path or a built-in name)" params
expect_error "ddpdbg-train params: unknown argument 'imgsz=640' (expected model=, nc=)" \
    params model=rtdetr-l.yaml imgsz=640
expect_error "ddpdbg-train params: expected key=value, got 'rtdetr-l.yaml'" params rtdetr-l.yaml
expect_error "ddpdbg-train params: nc must be an integer in [1, 100000], got '0'" \
    params model=rtdetr-l.yaml nc=0
expect_error "ddpdbg-train params: 'model' given twice" params model=a.yaml model=b.yaml
expect_error "ddpdbg-train: unknown command 'fly' (expected params, synth, train or dump; see --help)" fly

"$train" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q '^usage: ddpdbg-train' "$tmp/err" ||
    { echo "FAIL: no arguments: exit $rc, usage on stderr expected"; fail=1; }
"$train" --help >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q '^usage: ddpdbg-train' "$tmp/out" && grep -q 'rtdetr-tiny.yaml' "$tmp/out" ||
    { echo "FAIL: --help: exit $rc, usage on stdout expected"; fail=1; }
exit $fail
