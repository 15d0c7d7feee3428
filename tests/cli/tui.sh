#!/usr/bin/env bash
# tui.sh TRAIN -- `ddpdbg tui` on a trace recorded by the real trainer (the field report's
# mechanism, fault=nogt on rank 0 at iteration 1, two rtdetr-tiny ranks, as trace.sh does): the
# --no-tui run ends on the root cause; the first screen (80x24, 160x48) is that root cause; then
# without a terminal (--once frames: the error banner, rank 0's blocking bucket, the unreported
# box-head parameters grouped, the divergence at the collective rank 0 never issued; bad
# directories exit 2 with one line), then driven in tmux like a user (send-keys, capture-pane):
# the views switch with 1-6 and Tab, ? shows the help, a resize re-lays the screen (and a tiny
# one says so), q quits with status 0; the teaching mode steps with space. A missing tmux
# is a failure. DDPDBG overrides the ddpdbg binary (default: next to TRAIN).
source "$(dirname "$0")/lib.sh"
ddpdbg=${DDPDBG:-$(dirname "$train")/ddpdbg}
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
clear_rank_env NO_COLOR

check() { # description, condition...
    local what=$1; shift
    "$@" || { echo "FAIL: $what"; fail=1; }
}
has() { grep -qF -- "$2" "$1"; } # file, text

# --- the trace ------------------------------------------------------------------------------------
"$train" synth out="$tmp/d" n=8 imgsz=96 classes=3 empty=0 seed=1 >/dev/null
timeout -k 5 120 "$ddpdbg" run --nproc-per-node 2 --master-port $((20000 + RANDOM % 12000)) --no-tui \
    --trace "$tmp/t" -- train model=rtdetr-tiny.yaml data="$tmp/d/data.yaml" imgsz=96 batch=1 val=false \
    epochs=1 out="$tmp/o" fault=nogt:rank=0,iter=1 fault=slow:rank=0,ms=300 >"$tmp/run.out" 2>"$tmp/run.err"
# (rank 0 is slowed so that rank 1 surely launches collective #12 before rank 0 raises and the
# launcher stops rank 1: without it, a slow machine (ASan) sometimes stops rank 1 before #12)
rc=$?
[ $rc -eq 1 ] || { echo "FAIL: the field-report run should exit 1 (got $rc)"; tail -5 "$tmp/run.err"; exit 1; }
# --no-tui: the run ends on the report's short form, after the ranks' errors
check "--no-tui: the diagnosis after the ranks' last line" [ \
    "$(grep -n "^ddpdbg: the diagnosis of $tmp/t (all of it: ddpdbg report $tmp/t):\$" "$tmp/run.err" | cut -d: -f1)" \
    -gt "$(grep -n '^\[rank[01]\]:' "$tmp/run.err" | tail -1 | cut -d: -f1)" ]
check "--no-tui: the root cause" grep -q '^root cause \[1\]: rank 0 never marked 25 parameters ready at iteration 1' "$tmp/run.err"
check "--no-tui: its names" grep -qx '      model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias}  18 tensors' "$tmp/run.err"
check "--no-tui: its fix" grep -q '^    fix: find_unused_parameters=True' "$tmp/run.err"

# --- without a terminal: --once ------------------------------------------------------------------
once() { "$ddpdbg" tui --once "$@" "$tmp/t" >"$tmp/frame" 2>"$tmp/frame.err"; }
check "--once exits 0" once
check "80x24: 24 lines" [ "$(wc -l <"$tmp/frame")" = 24 ]
# the first screen is the root cause, whole, at 80x24 and at 160x48
for size in 80x24 160x48; do
    once --size $size
    check "$size: opens on the root cause" grep -q '^root cause \[1\]: rank 0 never marked 25 parameters ready' "$tmp/frame"
    check "$size: the names" grep -q '^      model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias}  18 tensors' "$tmp/frame"
    check "$size: the bucket" grep -q '^    bucket 0 never launched on rank 0' "$tmp/frame"
    check "$size: the collective" grep -q '^    rank 1 \(waited\|waits\) in collective #12 (allreduce of bucket 0' "$tmp/frame"
    check "$size: the fix" grep -q '^    fix: find_unused_parameters=True' "$tmp/frame"
done
once --view 1
check "ranks: error banner on row 2" [ "$(sed -n 2p "$tmp/frame" | cut -c1-22)" = " ERROR  rank 0 at iter" ]
check "ranks: rank 0 errored" grep -q '^   0  errored ' "$tmp/frame"
# rank 1 is killed waiting in #12, or sees #12 fail first (rank 0 exited) and errors: a race
check "ranks: rank 1 stopped in #12" \
    grep -qE '^   1  (dead .*stopped in allreduce #12 \(bucket 0\)|errored .*collective #12)' "$tmp/frame"
once --view 2
check "buckets: iteration 1, rank 0's bucket 0 blocks" grep -q '^    0 .*/116  \*' "$tmp/frame"
once --view 3
check "params: the box heads, grouped, reported by rank 1" \
    grep -q '^model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias} *18 *1$' "$tmp/frame"
check "params: 25 never reported" has "$tmp/frame" "rank 0, iteration 1: 25 of 323 parameters never reported"
once --view 4
check "collectives: divergence at #12" has "$tmp/frame" "first divergence at #12: rank 0 never issued #12"
once --view 4 --size 100x40
# the probe starts after DDP's first allgather (#1): the rows begin at the first one recorded
check "collectives: the first row is #2, no empty row for #1" \
    [ "$(sed -n 6p "$tmp/frame" | cut -c1-16)" = "    2   0 bcast " ]
once --teach --view 7 --keys '          '
check "teach: offsets before the trace's start are signed once (no '+-')" \
    bash -c "! grep -qF -- '+-' '$tmp/frame'"
check "teach: the event list shows offsets" grep -qE '^  r[01] it0 [+-][0-9]+\.[0-9]{3}s ' "$tmp/frame"
once --view 3 --keys '/enc_bbox\n'
check "search: 6 matches" has "$tmp/frame" "6 of 323 parameters match \"enc_bbox\""
once --size 300x100 --view 5
check "300x100: 100 lines" [ "$(wc -l <"$tmp/frame")" = 100 ]
"$ddpdbg" tui "$tmp/nothing" >"$tmp/out" 2>"$tmp/err"
check "a missing directory: exit 2 (got $?)" [ $? -eq 2 ]
check "a missing directory: one line naming it" [ "$(wc -l <"$tmp/err")" = 1 ]
check "  ... naming it" has "$tmp/err" "$tmp/nothing"
mkdir -p "$tmp/foreign" && echo "not a database" >"$tmp/foreign/rank0.db"
"$ddpdbg" tui --once "$tmp/foreign" >"$tmp/out" 2>"$tmp/err"
check "a foreign rank0.db: exit 2 (got $?)" [ $? -eq 2 ]
check "a foreign rank0.db: one line" [ "$(wc -l <"$tmp/err")" = 1 ]
"$ddpdbg" tui --size 10 "$tmp/t" >"$tmp/out" 2>"$tmp/err"
check "bad --size: exit 2" [ $? -eq 2 ]
check "the trace was not written to" [ -z "$(find "$tmp/t" -newer "$tmp/run.err" -type f)" ]
[ $fail = 0 ] || { echo "--- last frame:"; cat "$tmp/frame"; exit 1; }

# --- in tmux, like a user -------------------------------------------------------------------------
command -v tmux >/dev/null || { echo "FAIL: no tmux (make deps); the --once checks passed"; exit 1; }
# Each session gets a tmux server of its own (socket ddpdbg-tui-test-PID-N): killing the only
# session of a server ends that server, and a new session asked of it while it exits fails
# ("server exited unexpectedly", seen under ASan).
n_sessions=0
sock=ddpdbg-tui-test-$$-0
tm() { tmux -L "$sock" -f /dev/null "$@"; }
trap 'tm kill-server 2>/dev/null; rm -rf "$tmp"' EXIT
screen_now() { tm capture-pane -p -t tui >"$tmp/pane" 2>/dev/null; }
# wait_for TEXT [SECONDS]: until the pane shows TEXT; fails (and keeps the pane) after SECONDS.
wait_for() {
    local text=$1 limit=${2:-10} i
    for ((i = 0; i < limit * 10; i++)); do
        screen_now && grep -qF -- "$text" "$tmp/pane" && return 0
        sleep 0.1
    done
    echo "  (waited ${limit} s for '$text'; the pane:)"; sed 's/^/  | /' "$tmp/pane"
    return 1
}
start() { # command...: a fresh 80x24 session running it, then "EXIT=<status>"
    tm kill-server 2>/dev/null
    n_sessions=$((n_sessions + 1))
    sock=ddpdbg-tui-test-$$-$n_sessions
    tm new-session -d -s tui -x 80 -y 24 "TERM=screen $*; echo EXIT=\$?; sleep 60"
}

start "$ddpdbg" tui "$tmp/t"
check "tmux: the first screen is the root cause" wait_for "root cause [1]: rank 0 never marked 25"
check "tmux: ... with the names" grep -qF "model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias}  18 tensors" "$tmp/pane"
check "tmux: the error banner" grep -q '^ ERROR  rank 0' "$tmp/pane"
tm send-keys -t tui 1
check "tmux: 1 shows Ranks" wait_for "   0  errored"
tm send-keys -t tui 2
check "tmux: 2 shows Buckets" wait_for "iteration 1: 2 buckets (layout generation 1)"
tm send-keys -t tui 3
check "tmux: 3 shows Parameters" wait_for "model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias}"
tm send-keys -t tui Tab
check "tmux: Tab shows Collectives" wait_for "first divergence at #12"
tm send-keys -t tui Tab
check "tmux: Tab shows Timeline" wait_for "F fwd B bwd"
tm send-keys -t tui 6
check "tmux: 6 shows Diagnosis" wait_for "root cause [1]"
tm send-keys -t tui '?'
check "tmux: ? shows the help" wait_for "help: keys"
tm send-keys -t tui x
check "tmux: a key closes it" wait_for "root cause [1]"
check "tmux: ... and the help is gone" bash -c "! grep -qF 'help: keys' '$tmp/pane'"
tm send-keys -t tui 1
wait_for "   0  errored" >/dev/null
tm resize-window -t tui -x 132 -y 40
check "tmux: after a resize to 132x40 the detail panel is on the right" wait_for "   0  errored      2 forward"
check "tmux: ... 40 rows drawn" [ "$(wc -l <"$tmp/pane")" -ge 39 ]
check "tmux: ... the side panel right of the table" grep -qE '^rank  state .{60,} rank 0 *$' "$tmp/pane"
tm resize-window -t tui -x 30 -y 7
check "tmux: a 30x7 window is too small, and says so" wait_for "terminal too small: 30x7"
tm resize-window -t tui -x 80 -y 24
check "tmux: back to 80x24" wait_for "   0  errored"
tm send-keys -t tui q
check "tmux: q quits with status 0" wait_for "EXIT=0" 5

start "$ddpdbg" tui --teach "$tmp/t"
check "tmux: the teaching mode comes up" wait_for "what happens here"
tm send-keys -t tui Space
check "tmux: space steps to the first event" wait_for "event 1 of"
tm send-keys -t tui n n n
check "tmux: n skips to milestones" wait_for "event "
tm send-keys -t tui q
check "tmux: q leaves the teaching mode" wait_for "EXIT=0" 5
exit $fail
