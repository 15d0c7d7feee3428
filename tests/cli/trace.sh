#!/usr/bin/env bash
# trace.sh TRAIN -- the probe under real training: `ddpdbg run --trace DIR` gives one
# rank<R>.db per rank; a clean 2-rank rtdetr-tiny run records every gradient-ready hook (one
# per parameter per synced backward), its bucket layouts and balanced collectives, and both
# databases close cleanly; the field report's mechanism (fault=nogt) leaves rank 0's error
# text in rank0.db and rank 1's killed probe drained; fault=skip_backward makes the ranks'
# collectives diverge: the watchdog names a certain deadlock within 1 s of both ranks waiting,
# long before --hang-timeout (summary, HANG records, exit 124), and the run ends on its root
# cause; a rank SIGKILLed in the middle of backward loses none of the hooks it recorded (the
# launcher drains its ring); an unwritable trace directory is one line (launcher) or one
# warning and an untraced run (trainer). Reads the databases with sqlite3 (a failure without it).
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
command -v sqlite3 >/dev/null || { echo "FAIL: no sqlite3 command (make deps)"; exit 1; }
clear_rank_env

check() { # description, condition...
    local what=$1; shift
    "$@" || { echo "FAIL: $what"; fail=1; }
}
q() { sqlite3 "$1" "$2"; }
port() { echo $((20000 + RANDOM % 12000)); }

"$train" synth out="$tmp/d" n=8 imgsz=96 classes=3 empty=0 seed=1 >/dev/null
args=(train model=rtdetr-tiny.yaml data="$tmp/d/data.yaml" imgsz=96 batch=1 val=false)
n_params=$("$train" params model=rtdetr-tiny.yaml | tail -1 | awk '{print $2}')

# --- a clean run -------------------------------------------------------------------------------
timeout -k 5 120 "$ddpdbg" run --nproc-per-node 2 --master-port "$(port)" --no-tui \
    --trace "$tmp/t1" -- "${args[@]}" epochs=1 out="$tmp/o1" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "clean run exits 0 (got $rc)" [ $rc -eq 0 ] || cat "$tmp/err"
for r in 0 1; do
    db=$tmp/t1/rank$r.db
    check "rank $r: database" [ -s "$db" ]
    check "rank $r: no ring left (closed cleanly)" [ ! -e "$tmp/t1/rank$r.ring" ]
    check "rank $r: closed clean" [ "$(q "$db" "select value from meta where key='closed'")" = clean ]
    check "rank $r: rank in meta" [ "$(q "$db" "select value from meta where key='rank'")" = $r ]
    check "rank $r: parameter table" [ "$(q "$db" "select count(*) from params")" = "$n_params" ]
    iters=$(q "$db" "select count(*) from events where kind=6") # BACKWARD_BEGIN
    hooks=$(q "$db" "select count(*) from events where kind=8") # GRAD_READY
    check "rank $r: one hook per parameter per backward ($hooks for $iters x $n_params)" \
        [ "$hooks" = $((iters * n_params)) ]
    check "rank $r: every hook marked its parameter ready" \
        [ "$(q "$db" "select count(*) from events where kind=8 and (flags & 2)")" = "$hooks" ]
    check "rank $r: view marks lists them" [ "$(q "$db" "select count(*) from marks")" = "$hooks" ]
    check "rank $r: no mark of its own (no unused parameter)" \
        [ "$(q "$db" "select count(*) from events where kind=9")" = 0 ]
    launched=$(q "$db" "select count(*) from events where kind=11")
    done_ok=$(q "$db" "select count(*) from events where kind=12 and (flags & 1)")
    check "rank $r: every collective completed ($done_ok of $launched)" [ "$launched" = "$done_ok" ]
    check "rank $r: initial layout and one rebuild" \
        [ "$(q "$db" "select count(distinct generation) from layouts")" = 2 ]
    check "rank $r: no overrun" [ "$(q "$db" "select value from meta where key='overruns'")" = 0 ]
done
# the two ranks ran the same collectives in the same order
for r in 0 1; do
    q "$tmp/t1/rank$r.db" "select c, a, d, text from events where kind=11 order by c" >"$tmp/coll$r"
done
check "both ranks: the same collective sequence" cmp -s "$tmp/coll0" "$tmp/coll1"

# --- the field report's mechanism ---------------------------------------------------------------
timeout -k 5 120 "$ddpdbg" run --nproc-per-node 2 --master-port "$(port)" --no-tui \
    --trace "$tmp/t2" -- "${args[@]}" epochs=1 out="$tmp/o2" fault=nogt:rank=0,iter=1 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "nogt run fails with rank 0's error (got $rc)" [ $rc -eq 1 ]
db0=$tmp/t2/rank0.db db1=$tmp/t2/rank1.db
check "rank 0: the error text is in its trace" \
    [ "$(q "$db0" "select count(*) from events where kind=16 and text like 'Expected to have finished reduction%'")" = 1 ]
check "rank 0: its batch at iteration 1 had 0 boxes" \
    [ "$(q "$db0" "select sum(b) from events where kind=15 and iter=1")" = 0 ]
check "rank 1: its batch at iteration 1 had boxes" \
    [ "$(q "$db1" "select sum(b) from events where kind=15 and iter=1")" -gt 0 ]
check "rank 1: killed, then drained" [ "$(q "$db1" "select value from meta where key='closed'")" = drained ]
# how each rank ended, as the launcher recorded it (meta exit; failed_first on rank 0 alone)
check "rank 0: the launcher recorded exitcode 1, failed first" \
    [ "$(q "$db0" "select group_concat(key || '=' || value, ';') from (select * from meta where key in ('exit', 'failed_first') order by key)")" = "exit=exitcode 1;failed_first=1" ]
check "rank 1: the launcher recorded how it ended" [ -n "$(q "$db1" "select value from meta where key='exit'")" ]
check "rank 1: not failed first" [ "$(q "$db1" "select count(*) from meta where key='failed_first'")" = 0 ]
# rank 0 launched no bucket at iteration 1, so none can complete on rank 1 (whether rank 1 got
# to launching them before the launcher stopped it depends on timing)
check "rank 1: no bucket allreduce completed at iteration 1" \
    [ "$(q "$db1" "select count(*) from events where kind=12 and iter=1 and text='bucket' and (flags & 1)")" = 0 ]
check "rank 0: no bucket launched at iteration 1" \
    [ "$(q "$db0" "select count(*) from events where kind=11 and iter=1 and text='bucket'")" = 0 ]
check "rank 0: fewer gradient-ready hooks at iteration 1 than parameters" \
    [ "$(q "$db0" "select count(*) from events where kind=8 and iter=1")" -lt "$n_params" ]

check "rank 0: the build's revision in its metadata" \
    [ -n "$(q "$db0" "select value from meta where key='revision' and value != 'unknown'")" ]

# --- kill -9 in the middle of backward: the launcher drains what the rank committed ------------
timeout -k 5 120 "$ddpdbg" run --nproc-per-node 2 --master-port "$(port)" --no-tui \
    --trace "$tmp/t4" -- "${args[@]}" epochs=1 out="$tmp/o4" \
    fault=kill:rank=1,iter=1,phase=backward >"$tmp/out" 2>"$tmp/err"
rc=$?
db1=$tmp/t4/rank1.db
check "kill: exit 137 (got $rc)" [ $rc -eq 137 ]
check "kill: the launcher drained rank 1" grep -q "^ddpdbg run: rank 1's ring drained into" "$tmp/err"
check "kill: rank 1's trace says drained" [ "$(q "$db1" "select value from meta where key='closed'")" = drained ]
check "kill: nothing lost" [ "$(q "$db1" "select value from meta where key='drain_lost'")" = 0 ]
half=$(q "$db1" "select count(*) from events where kind=8 and iter=1")
check "kill: rank 1 ran hooks before it died ($half of $n_params hooks)" [ "$half" -gt 0 ]
check "kill: rank 1 died before its last hook ($half of $n_params)" [ "$half" -lt "$n_params" ]
check "kill: the hooks before the kill are all there" [ "$half" = $((n_params / 2)) ]

# --- an unwritable trace directory: the launcher says so; the trainer trains untraced -----------
touch "$tmp/file"
"$ddpdbg" run --no-tui --trace "$tmp/file/sub" -- "${args[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "unwritable --trace: exit 2 (got $rc)" [ $rc -eq 2 ]
check "unwritable --trace: one line naming it" \
    [ "$(cat "$tmp/err")" = "ddpdbg run: --trace $tmp/file/sub: cannot create it: Not a directory" ]
"$train" "${args[@]}" epochs=1 out="$tmp/o5" trace="$tmp/file/sub" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "unwritable trace=: training goes on (exit $rc)" [ $rc -eq 0 ]
check "unwritable trace=: one warning" [ "$(grep -ci 'probe' "$tmp/err")" = 1 ]

# --- a hang: the watchdog -----------------------------------------------------------------------
t0=$SECONDS
timeout -k 5 120 "$ddpdbg" run --nproc-per-node 2 --master-port "$(port)" --no-tui \
    --trace "$tmp/t3" --hang-timeout 20 -- "${args[@]}" epochs=2 out="$tmp/o3" \
    fault=skip_backward:rank=1,iter=1 >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "hang detected and stopped in $((SECONDS - t0)) s"
check "hang: exit 124 (got $rc)" [ $rc -eq 124 ]
# rank 0 waits in #12 (bucket 0's allreduce), rank 1 in #12 (the buffers' broadcast): they can
# never match, a certain deadlock, named long before the 20 s --hang-timeout
check "hang: a certain deadlock, named" grep -q '^ddpdbg run: hang: certain deadlock: every rank waits, in collectives that cannot match: rank 0 in #12 (allreduce of bucket 0, [0-9]* elements), rank 1 in #12 (broadcast of buffers, [0-9]* elements)$' "$tmp/err"
# ... within 1 s of the last rank starting to wait (the shortest of the ranks' waits)
check "hang: named within 1 s of every rank waiting" awk '/^  rank [01]: waiting in a collective for/ { w = $8 + 0; if (min == "" || w < min) min = w } END { exit !(min != "" && min <= 1.0) }' "$tmp/err"
check "hang: per-rank lines" [ "$(grep -c '^  rank [01]: waiting in a collective' "$tmp/err")" = 2 ]
check "hang: what each rank waits in" grep -q '^  rank 0: waiting in a collective for [0-9.]* s; pending #12 (allreduce of bucket 0, ' "$tmp/err"
for r in 0 1; do
    check "hang: HANG record in rank $r's trace" \
        [ "$(q "$tmp/t3/rank$r.db" "select count(*) from events where kind=18")" = 1 ]
done
check "hang: stopped within 15 s, before the 20 s timeout" [ $((SECONDS - t0)) -lt 15 ]
# without a terminal the run ends on why: the report's short form, after the hang's summary
check "hang: the root cause at the end" grep -q \
    "^root cause \[1\]: rank 1 ran iteration 1's forward and skipped its backward" "$tmp/err"
check "hang: ... after the summary and the ranks' lines" [ \
    "$(grep -n '^ddpdbg: the diagnosis of ' "$tmp/err" | cut -d: -f1)" -gt \
    "$(grep -n '^ddpdbg run: hang: ' "$tmp/err" | cut -d: -f1)" ]
[ $fail = 0 ] || { echo "--- stderr of the last run:"; cat "$tmp/err"; }
exit $fail
