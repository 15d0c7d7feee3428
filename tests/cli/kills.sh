#!/usr/bin/env bash
# kills.sh TRAIN -- SIGKILL at random points, 50 times: each run is 2 DDP ranks of rtdetr-tiny
# (96 px, batch 1, 6 iterations) under `ddpdbg run --trace`, with fault=kill at a random rank,
# iteration and phase (forward, backward, allreduce). Every time: the launcher exits 137 and
# names the dead rank first ("rank R failed first: signal 9 (SIGKILL)"), drains its ring, and
# the dead rank's trace (closed=drained, drain_lost=0) holds every event up to the kill and
# none after it: one gradient-ready hook per parameter in each earlier iteration, and in the
# kill's iteration none (forward), n_params/2 (mid-backward) or n_params (waiting in a bucket
# allreduce), no record of a later phase or iteration, and no gap in its record numbers.
# The sequence is drawn from a seed: KILLS_SEED=S reruns it (printed on failure), KILLS_RUNS=N
# runs N instead of 50. Needs sqlite3 (a failure without it).
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
command -v sqlite3 >/dev/null || { echo "FAIL: no sqlite3 command (make deps)"; exit 1; }
clear_rank_env

runs=${KILLS_RUNS:-50}
seed=${KILLS_SEED:-$RANDOM}
RANDOM=$seed # every draw below follows from the seed; ports come from SRANDOM, not from it
iters=6      # iterations per rank: 12 training images over 2 ranks at batch 1
phases=(forward backward allreduce)
q() { sqlite3 "$1" "$2"; }

# 15 images: synth keeps 80 % (12) for training.
"$train" synth out="$tmp/d" n=15 imgsz=96 classes=3 empty=0 seed=1 >/dev/null
args=(train model=rtdetr-tiny.yaml data="$tmp/d/data.yaml" imgsz=96 batch=1 epochs=1 val=false)
n_params=$("$train" params model=rtdetr-tiny.yaml | tail -1 | awk '{print $2}')

failed_runs=0
t0=$SECONDS
for ((run = 1; run <= runs; run++)); do
    rank=$((RANDOM % 2)) iter=$((RANDOM % iters)) phase=${phases[RANDOM % 3]}
    spec="kill:rank=$rank,iter=$iter,phase=$phase"
    extra=()
    # A rank dies in an allreduce only if it has to wait in one: its peer must still be busy
    # when it gets there, so the peer is made a straggler (100 ms per forward).
    [ $phase = allreduce ] && extra=(fault=slow:rank=$((1 - rank)),ms=100)
    dir=$tmp/run$run
    timeout -k 5 60 "$ddpdbg" run --nproc-per-node 2 --master-port $((20000 + SRANDOM % 12000)) \
        --no-tui --trace "$dir" -- "${args[@]}" out="$dir/out" fault=$spec "${extra[@]}" \
        >"$dir.out" 2>"$dir.err"
    rc=$?
    problems=()
    bad() { problems+=("$*"); }
    [ $rc -eq 137 ] || bad "launcher exit $rc, expected 137"
    grep -q "^ddpdbg run: rank $rank failed first: signal 9 (SIGKILL)" "$dir.err" ||
        bad "the launcher did not name rank $rank as failed first by SIGKILL"
    grep -q "^ddpdbg run: rank $rank's ring drained into" "$dir.err" ||
        bad "the launcher did not drain rank $rank's ring"
    db=$dir/rank$rank.db
    if [ ! -s "$db" ]; then
        bad "no $db"
    else
        # One query for every figure: closed|lost|last record|records the rows account for|
        # hooks at the kill's iteration|hooks before it|backwards begun before it|rows after it|
        # then, in the kill's iteration: FORWARD_BEGIN, BATCH, FORWARD_END, BACKWARD_BEGIN,
        # BACKWARD_END, FINALIZE, OPTIM_STEP rows and bucket allreduces launched. A row's text
        # beyond 12 bytes took ceil((bytes - 12) / 12) TEXT records after its own (parts).
        IFS='|' read -r closed lost last_record accounted hooks hooks_before backwards_before after \
            fwd_begin batch fwd_end bwd_begin bwd_end finalize optim launched < <(q "$db" "
            WITH e AS (SELECT *, max(0, (length(CAST(coalesce(text, '') AS BLOB)) - 1) / 12)
                                 AS parts FROM events)
            SELECT (SELECT value FROM meta WHERE key = 'closed'),
                   (SELECT value FROM meta WHERE key = 'drain_lost'),
                   (SELECT max(seq + parts) FROM e), (SELECT sum(1 + parts) FROM e),
                   (SELECT count(*) FROM e WHERE kind = 8 AND iter = $iter),
                   (SELECT count(*) FROM e WHERE kind = 8 AND iter >= 0 AND iter < $iter),
                   (SELECT count(*) FROM e WHERE kind = 6 AND iter >= 0 AND iter < $iter),
                   (SELECT count(*) FROM e WHERE iter > $iter),
                   $(for k in 4 15 5 6 7 13 14; do
                       printf '(SELECT count(*) FROM e WHERE kind = %d AND iter = %d),' $k $iter
                   done)
                   (SELECT count(*) FROM e WHERE kind = 11 AND iter = $iter AND text = 'bucket')")
        [ "$closed" = drained ] || bad "closed=$closed, expected drained"
        [ "$lost" = 0 ] || bad "drain_lost=$lost, expected 0"
        [ -n "$last_record" ] && [ "$accounted" = "$last_record" ] ||
            bad "records 1..$last_record, but the rows account for $accounted: some are missing"
        [ "$backwards_before" = "$iter" ] ||
            bad "$backwards_before backwards before iteration $iter, expected $iter"
        [ "$hooks_before" = $((iter * n_params)) ] ||
            bad "$hooks_before hooks before iteration $iter, expected $iter x $n_params"
        [ "$after" = 0 ] || bad "$after records after iteration $iter"
        [ "$fwd_begin" = 1 ] || bad "$fwd_begin FORWARD_BEGIN at iteration $iter, expected 1"
        [ "$optim" = 0 ] || bad "an optimizer step at the kill's iteration"
        case $phase in # then BATCH FORWARD_END BACKWARD_BEGIN BACKWARD_END FINALIZE rows
        forward) want_hooks=0 want="0 0 0 0 0" ;;
        backward) want_hooks=$((n_params / 2)) want="1 1 1 0 0" ;;
        allreduce) want_hooks=$n_params want="1 1 1 0 0" ;; # FINALIZE comes after the waits
        esac
        [ "$hooks" = "$want_hooks" ] ||
            bad "$hooks hooks at iteration $iter, expected $want_hooks for phase=$phase"
        got="$batch $fwd_end $bwd_begin $bwd_end $finalize"
        [ "$got" = "$want" ] || bad "BATCH FORWARD_END BACKWARD_BEGIN BACKWARD_END FINALIZE" \
            "rows at iteration $iter: $got, expected $want"
        [ $phase != allreduce ] || [ "$launched" -ge 1 ] ||
            bad "no bucket allreduce launched at iteration $iter"
    fi
    if [ ${#problems[@]} -gt 0 ]; then
        failed_runs=$((failed_runs + 1))
        echo "FAIL: run $run, fault=$spec ${extra[*]}:"
        printf '  %s\n' "${problems[@]}"
        echo "  launcher's last lines:"
        tail -5 "$dir.err" | sed 's/^/    /'
    fi
    rm -rf "$dir" "$dir.out" "$dir.err" # 50 traces would not fit a small /tmp
done
echo "$runs kills in $((SECONDS - t0)) s (seed $seed), $failed_runs failed"
if [ $failed_runs -gt 0 ]; then
    echo "rerun the same sequence: KILLS_SEED=$seed bash $0 $1"
    exit 1
fi
exit 0
