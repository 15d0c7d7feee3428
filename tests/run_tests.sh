#!/usr/bin/env bash
# run_tests.sh DIR TRAIN [NAME] -- runs every test binary in DIR (or DIR/test_NAME), each under
# a time limit, and the CLI tests in tests/cli/*.sh (but lib.sh, their helpers) against TRAIN.
# Prints PASS/FAIL/SKIP per
# test and, last, "N passed, N failed, N skipped". Exits 1 if any test failed.
set -u
dir=$1; train=$2; only=${3:-}
pass=0; fail=0; skip=0
run() { # name, log, command...
    local name=$1 log=$2; shift 2
    local t0=$SECONDS
    timeout 900 "$@" >"$log" 2>&1; local rc=$?
    local dt=$((SECONDS - t0))
    if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "PASS $name (${dt}s)";
    elif [ $rc -eq 77 ]; then skip=$((skip+1)); echo "SKIP $name: $(tail -1 "$log")";
    else fail=$((fail+1)); echo "FAIL $name (rc $rc, log: $log)"; tail -20 "$log" | sed 's/^/    /'; fi
}
for t in "$dir"/test_*; do
    case "$t" in *.o|*.d|*.log) continue;; esac
    [ -x "$t" ] || continue
    name=$(basename "$t")
    [ -n "$only" ] && [ "$name" != "test_$only" ] && continue
    run "$name" "$t.log" "$t"
done
for s in tests/cli/*.sh; do
    [ -e "$s" ] || continue
    [ "$(basename "$s")" = lib.sh ] && continue
    name=cli/$(basename "$s" .sh)
    [ -n "$only" ] && [ "$name" != "cli/$only" ] && continue
    run "$name" "$dir/$(basename "$s" .sh).cli.log" bash "$s" "$train"
done
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
