#!/usr/bin/env bash
# run_bench.sh DIR TRAIN [ARGS...] -- runs every benchmark binary DIR/bench_* (or only
# DIR/bench_$BENCH when BENCH is set) with ARGS, one after the other so that timings do not
# compete, printing each one's output under a header. Timings are never asserted: the exit
# status is 1 only if a benchmark crashed or failed to run. TRAIN (bin/ddpdbg-train) is
# checked to exist, for benchmarks of the command line.
set -u
dir=$1; train=$2; shift 2
[ -x "$train" ] || { echo "run_bench.sh: $train is not built" >&2; exit 1; }
status=0; n=0
for b in "$dir"/bench_*; do
    case "$b" in *.o|*.d|*.log) continue;; esac
    [ -x "$b" ] || continue
    name=$(basename "$b")
    [ -n "${BENCH:-}" ] && [ "$name" != "bench_$BENCH" ] && continue
    n=$((n + 1))
    echo "==== $name"
    t0=$SECONDS
    "$b" "$@"; rc=$?
    echo "==== $name: $((SECONDS - t0)) s, exit $rc"
    [ $rc -eq 0 ] || status=1
done
[ $n -gt 0 ] || { echo "run_bench.sh: no benchmark in $dir${BENCH:+ named bench_$BENCH}" >&2; exit 1; }
exit $status
