#!/usr/bin/env bash
# soak.sh TRAIN -- the long run (`make soak`; not part of make test): 4 DDP ranks of
# rtdetr-tiny at 96 px (the smallest size its 100 queries allow), batch 1, val=false, for
# SOAK_ITERS iterations (default 2000: 40 epochs of a 200-image synthetic set, 50 batches per
# rank each), traced. Passes when no event was lost and memory stayed flat:
#   every rank's trace closed=clean with overruns 0, meta events = its rows, meta records = its
#   last record = the records its rows account for (a long text takes TEXT records of its
#   own), one gradient-ready hook per parameter per synced backward, SOAK_ITERS backwards;
#   every rank's VmRSS (sampled from /proc/<pid>/status every SOAK_SAMPLE_S seconds): the
#   median of the last 10 % of samples at most SOAK_MAX_GROWTH % (default 5) above the median
#   of the 10 % from the half-way mark (SOAK_BASELINE=middle), or of the first 10 %
#   (SOAK_BASELINE=first). The baseline is the middle because memory rises for the first
#   iterations by design: each rank's SQLite page cache fills to its 2 MiB cap
#   (probe/tracedb.c, cache_size) as the trace grows, then stays; a leak keeps growing in the
#   second half. Both growths are printed.
# Prints the run time, the iteration rate, each rank's event count and memory figures.
# SOAK_DIR=DIR keeps the trace and samples there (default: a temporary folder, removed).
set -u
train=$(realpath "$1")
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
command -v sqlite3 >/dev/null || { echo "skip: no sqlite3 command (apt-get install sqlite3)"; exit 77; }
unset OMP_NUM_THREADS DDPDBG_RUN_TOKEN DDPDBG_TRAIN TORCH_DISTRIBUTED_DEBUG DDPDBG_TRACE_DIR \
    RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT

world=4
iters=${SOAK_ITERS:-2000}
per_epoch=50 # batches per rank and epoch: 200 training images over 4 ranks at batch 1
sample_s=${SOAK_SAMPLE_S:-3}
max_growth=${SOAK_MAX_GROWTH:-5}
baseline=${SOAK_BASELINE:-middle}
[ "$baseline" = first ] || [ "$baseline" = middle ] ||
    { echo "soak: SOAK_BASELINE must be first or middle, got '$baseline'"; exit 2; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
[ $((iters % per_epoch)) -eq 0 ] || { echo "soak: SOAK_ITERS must be a multiple of $per_epoch"; exit 2; }
if [ -n "${SOAK_DIR:-}" ]; then
    dir=$SOAK_DIR
    rm -rf "$dir/trace" "$dir/data" "$dir/out" && mkdir -p "$dir"
else
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
fi

# 250 images, every one with boxes (a background image would fail DDP as in the field report):
# synth keeps 80 % (200) for training.
"$train" synth out="$dir/data" n=250 imgsz=96 classes=3 empty=0 seed=3 >/dev/null || exit 1
n_params=$("$train" params model=rtdetr-tiny.yaml | tail -1 | awk '{print $2}')
echo "soak: $world ranks, $iters iterations ($((iters / per_epoch)) epochs), rtdetr-tiny 96 px," \
    "batch 1, traced to $dir/trace"

t0=$EPOCHREALTIME
calc() { awk "BEGIN {print $*}"; } # floating point, as bc would (bc is not installed everywhere)
"$ddpdbg" run --nproc-per-node $world --master-port $((20000 + SRANDOM % 20000)) --no-tui \
    --trace "$dir/trace" -- train model=rtdetr-tiny.yaml data="$dir/data/data.yaml" imgsz=96 \
    batch=1 epochs=$((iters / per_epoch)) val=false out="$dir/out" >"$dir/out.log" 2>"$dir/err.log" &
launcher=$!

# The ranks are the launcher's children; RANK in their environment says which is which.
# samples: "<seconds since start> <rank> <VmRSS kB>"
: >"$dir/rss"
while kill -0 $launcher 2>/dev/null; do
    now=$(calc "$EPOCHREALTIME - $t0")
    for child in $(cat /proc/$launcher/task/*/children 2>/dev/null); do
        r=$(tr '\0' '\n' </proc/$child/environ 2>/dev/null | sed -n 's/^RANK=//p')
        kb=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$child/status 2>/dev/null)
        [ -n "$r" ] && [ -n "$kb" ] && echo "$now $r $kb" >>"$dir/rss"
    done
    sleep "$sample_s"
done
wait $launcher
rc=$?
elapsed=$(calc "$EPOCHREALTIME - $t0")
printf 'soak: run took %.0f s (%.2f iterations/s per rank), exit %d\n' "$elapsed" \
    "$(calc "$iters / $elapsed")" $rc
fail=0
[ $rc -eq 0 ] || { echo "FAIL: the run exited $rc"; tail -20 "$dir/err.log"; fail=1; }

for ((r = 0; r < world; r++)); do
    db=$dir/trace/rank$r.db
    [ -s "$db" ] || { echo "FAIL: rank $r: no $db"; fail=1; continue; }
    # closed|overruns|meta events|rows|meta records|last record|records the rows account for|
    # backwards|hooks. A row's text beyond 12 bytes took ceil((bytes - 12) / 12) TEXT records
    # after its own (parts).
    IFS='|' read -r closed overruns m_events rows m_records last_record accounted backwards hooks \
        < <(sqlite3 "$db" "
        WITH e AS (SELECT *, max(0, (length(CAST(coalesce(text, '') AS BLOB)) - 1) / 12)
                             AS parts FROM events)
        SELECT (SELECT value FROM meta WHERE key = 'closed'),
               (SELECT value FROM meta WHERE key = 'overruns'),
               (SELECT value FROM meta WHERE key = 'events'), count(*),
               (SELECT value FROM meta WHERE key = 'records'), max(seq + parts), sum(1 + parts),
               sum(kind = 6), sum(kind = 8)
        FROM e")
    problems=()
    [ "$closed" = clean ] || problems+=("closed=$closed, expected clean")
    [ "$overruns" = 0 ] || problems+=("overruns=$overruns")
    [ "$m_events" = "$rows" ] || problems+=("meta events=$m_events but $rows rows")
    [ "$m_records" = "$last_record" ] && [ "$accounted" = "$last_record" ] ||
        problems+=("meta records=$m_records, last record $last_record, rows account for $accounted")
    [ "$backwards" = "$iters" ] || problems+=("$backwards backwards, expected $iters")
    [ "$hooks" = $((backwards * n_params)) ] ||
        problems+=("$hooks hooks, expected $backwards x $n_params")
    echo "soak: rank $r: $rows events in $last_record records, $backwards backwards, $hooks hooks," \
        "closed=$closed, overruns=$overruns"
    for p in "${problems[@]}"; do echo "FAIL: rank $r: $p"; fail=1; done

    # Memory: medians of the first, the middle and the last 10 % of this rank's samples.
    awk -v r=$r '$2 == r {print $3}' "$dir/rss" >"$dir/rss$r"
    n=$(wc -l <"$dir/rss$r")
    if [ "$n" -lt 20 ]; then
        echo "FAIL: rank $r: $n memory samples, too few to judge (need 20)"
        fail=1
        continue
    fi
    k=$((n / 10))
    first=$(head -$k "$dir/rss$r" | median)
    middle=$(tail -n +$((n / 2 + 1)) "$dir/rss$r" | head -$k | median)
    last=$(tail -$k "$dir/rss$r" | median)
    peak=$(sort -n "$dir/rss$r" | tail -1)
    overall=$(calc "100 * ($last - $first) / $first")
    second_half=$(calc "100 * ($last - $middle) / $middle")
    printf 'soak: rank %d: VmRSS medians of %d of %d samples: first %.1f MiB, middle %.1f MiB,' \
        $r $k $n "$(calc "$first / 1024")" "$(calc "$middle / 1024")"
    printf ' last %.1f MiB: %+.2f %% overall, %+.2f %% over the second half (peak %.1f MiB)\n' \
        "$(calc "$last / 1024")" "$overall" "$second_half" "$(calc "$peak / 1024")"
    growth=$second_half
    [ "$baseline" = first ] && growth=$overall
    if [ "$(calc "($growth > $max_growth)")" = 1 ]; then
        echo "FAIL: rank $r: memory grew $growth % from the $baseline 10 % of samples to the" \
            "last, more than $max_growth %"
        fail=1
    fi
done
[ $fail = 0 ] && echo "soak: PASS" || echo "soak: FAIL"
exit $fail
