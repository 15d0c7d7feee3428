#!/usr/bin/env bash
# launch.sh TRAIN -- `ddpdbg run` (bin/ddpdbg, next to TRAIN): N ranks of ddpdbg-train with
# every output line prefixed "[rankN]:"; torchrun's environment (checked with DDPDBG_TRAIN
# pointing at env); a failed rank stops the others (SIGTERM, SIGKILL after the grace period)
# and its status is ours, with one summary line; SIGINT stops every rank (130); bad usage is one
# line and exit 2. Rank programs other than ddpdbg-train are small scripts run by their shebang.
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
clear_rank_env

check() { # description, condition...
    local what=$1; shift
    "$@" || { echo "FAIL: $what"; fail=1; }
}
count() { grep -c -- "$1" "$2"; }

# --- usage ----------------------------------------------------------------------------------
"$ddpdbg" --help >"$tmp/out" 2>&1
check "ddpdbg --help" [ $? -eq 0 ]
check "ddpdbg --help names run" grep -q '^  run ' "$tmp/out"
"$ddpdbg" run --no-trace --help >"$tmp/out" 2>&1
check "ddpdbg run --help" [ $? -eq 0 ]
check "run --help documents --trace" grep -q -- '--trace DIR .*rank<R>.db' "$tmp/out"
bad_usage() { # expected stderr line, args...
    local want=$1; shift
    "$ddpdbg" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -ne 2 ] || [ -s "$tmp/out" ] || [ "$(cat "$tmp/err")" != "$want" ]; then
        echo "FAIL: ddpdbg $*: rc $rc, stderr '$(cat "$tmp/err")', expected '$want'"; fail=1
    fi
}
bad_usage "ddpdbg run: missing -- before the ddpdbg-train arguments (e.g. ddpdbg run --nproc-per-node 2 -- train model=rtdetr-tiny.yaml ...)" \
    run --nproc-per-node 2
bad_usage "ddpdbg run: unexpected 'params' (options come first, then -- and the ddpdbg-train arguments; see ddpdbg run --help)" \
    run --nproc-per-node 2 params model=rtdetr-tiny.yaml
bad_usage "ddpdbg run: --nproc-per-node must be an integer in [1, 1024], got '0'" \
    run --nproc-per-node 0 -- params
bad_usage "ddpdbg run: --nproc-per-node must be an integer in [1, 1024], got 'two'" \
    run --nproc-per-node=two -- params
bad_usage "ddpdbg run: unknown option '--fast' (see ddpdbg run --help)" run --fast -- params
bad_usage "ddpdbg run: nothing after -- (expected ddpdbg-train arguments)" run --
bad_usage "ddpdbg run: --node-rank must be in [0, 2) for --nnodes 2, got 2" \
    run --nnodes 2 --node-rank 2 -- params
bad_usage "ddpdbg: unknown command 'fly' (expected run, env, tui, report, export, scenario, explain or import-fr; see ddpdbg --help)" fly

# --- two ranks of ddpdbg-train params: every line, prefixed, on stdout ----------------------
"$train" params model=rtdetr-tiny.yaml >"$tmp/direct"
"$ddpdbg" run --no-trace --nproc-per-node 2 --no-tui -- params model=rtdetr-tiny.yaml >"$tmp/out" 2>"$tmp/err"
check "params on 2 ranks exits 0" [ $? -eq 0 ]
check "params on 2 ranks: nothing on stderr" [ ! -s "$tmp/err" ]
lines=$(wc -l <"$tmp/direct")
check "rank0 has $lines lines" [ "$(count '^\[rank0\]:' "$tmp/out")" -eq "$lines" ]
check "rank1 has $lines lines" [ "$(count '^\[rank1\]:' "$tmp/out")" -eq "$lines" ]
check "no unprefixed line" [ "$(wc -l <"$tmp/out")" -eq $((2 * lines)) ]
check "rank1's lines are ddpdbg-train's, in order" \
    cmp -s <(sed -n 's/^\[rank1\]://p' "$tmp/out") "$tmp/direct"

# --- every rank fails: the launcher exits with the status and names the first ---------------
"$ddpdbg" run --no-trace --nproc-per-node 2 --no-tui -- params model=missing.yaml >"$tmp/out" 2>"$tmp/err"
check "failing ranks: exit 2" [ $? -eq 2 ]
check "failing ranks: error prefixed on stderr" grep -q '^\[rank[01]\]:missing.yaml: ' "$tmp/err"
check "failing ranks: summary line" grep -Eq \
    '^ddpdbg run: rank [01] failed first: exitcode 2 \(pid [0-9]+\); rank [01]: ' "$tmp/err"

# --- torchrun's environment, node 1 of 2 ----------------------------------------------------
DDPDBG_TRAIN=/usr/bin/env "$ddpdbg" run --no-trace --nproc-per-node 2 --nnodes 2 --node-rank 1 \
    --master-port 29999 -- -u UNUSED_BY_ANYONE >"$tmp/out" 2>"$tmp/err"
check "env ranks exit 0" [ $? -eq 0 ]
for want in RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 OMP_NUM_THREADS=1; do
    check "[rank2]:$want" grep -qx "\[rank2\]:$want" "$tmp/out"
done
check "[rank3]:RANK=3" grep -qx '\[rank3\]:RANK=3' "$tmp/out"
check "[rank3]:LOCAL_RANK=1" grep -qx '\[rank3\]:LOCAL_RANK=1' "$tmp/out"
tokens=$(sed -n 's/^\[rank[23]\]:DDPDBG_RUN_TOKEN=//p' "$tmp/out" | sort -u)
check "one 32-hex run token shared by the ranks" grep -Eqx '[0-9a-f]{32}' <<<"$tokens"
OMP_NUM_THREADS=3 DDPDBG_TRAIN=/usr/bin/env "$ddpdbg" run --no-trace -- -u X >"$tmp/out" 2>&1
check "a set OMP_NUM_THREADS is kept" grep -qx '\[rank0\]:OMP_NUM_THREADS=3' "$tmp/out"
check "defaults: WORLD_SIZE=1 MASTER_PORT=29500" \
    grep -qx '\[rank0\]:MASTER_PORT=29500' "$tmp/out"

# --- rank 1 fails while rank 0 sleeps: rank 0 gets SIGTERM at once --------------------------
cat >"$tmp/fail1.sh" <<'SH'
#!/bin/sh
if [ "$RANK" = 1 ]; then echo "rank one out"; printf 'partial' >&2; exit 3; fi
exec sleep 30
SH
chmod +x "$tmp/fail1.sh"
t0=$SECONDS
DDPDBG_TRAIN=$tmp/fail1.sh "$ddpdbg" run --no-trace --nproc-per-node 2 -- x >"$tmp/out" 2>"$tmp/err"
rc=$?
check "rank 1 exit 3 -> launcher exits 3 (got $rc)" [ $rc -eq 3 ]
check "sleeping rank stopped within 3 s" [ $((SECONDS - t0)) -le 3 ]
check "stdout line prefixed" grep -qx '\[rank1\]:rank one out' "$tmp/out"
check "partial stderr line flushed" grep -qx '\[rank1\]:partial' "$tmp/err"
check "summary names rank 1 and rank 0's SIGTERM" grep -Eqx \
    'ddpdbg run: rank 1 failed first: exitcode 3 \(pid [0-9]+\); rank 0: signal 15 \(SIGTERM, sent by ddpdbg\) \(pid [0-9]+\)' \
    "$tmp/err"

# --- a rank that ignores SIGTERM gets SIGKILL after the grace period ------------------------
# Rank 1 fails only once rank 0 ignores SIGTERM (else the SIGTERM could land before the trap).
cat >"$tmp/stubborn.sh" <<SH
#!/bin/sh
if [ "\$RANK" = 1 ]; then
    while [ ! -e "$tmp/trapped" ]; do sleep 0.05; done
    exit 1
fi
trap '' TERM
touch "$tmp/trapped"
exec sleep 30
SH
chmod +x "$tmp/stubborn.sh"
t0=$SECONDS
DDPDBG_TRAIN=$tmp/stubborn.sh "$ddpdbg" run --no-trace --nproc-per-node 2 -- x >"$tmp/out" 2>"$tmp/err"
rc=$?; dt=$((SECONDS - t0))
check "stubborn: exit 1 (got $rc)" [ $rc -eq 1 ]
check "stubborn: killed after the grace period, not before (${dt}s)" [ $dt -ge 4 ]
check "stubborn: killed soon after the grace period (${dt}s)" [ $dt -le 8 ]
check "stubborn: SIGKILL reported" grep -q 'rank 0: signal 9 (SIGKILL, sent by ddpdbg)' "$tmp/err"

# --- SIGINT to the launcher stops every rank: exit 130 --------------------------------------
cat >"$tmp/sleep.sh" <<'SH'
#!/bin/sh
echo "rank $RANK up"
exec sleep 30
SH
chmod +x "$tmp/sleep.sh"
t0=$SECONDS
DDPDBG_TRAIN=$tmp/sleep.sh "$ddpdbg" run --no-trace --nproc-per-node 3 -- x >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 50); do [ "$(wc -l <"$tmp/out")" -ge 3 ] && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
check "SIGINT: exit 130 (got $rc)" [ $rc -eq 130 ]
check "SIGINT: stopped within 3 s" [ $((SECONDS - t0)) -le 3 ]
check "SIGINT: summary" grep -Eq '^ddpdbg run: stopped by SIGINT; rank 0: signal 15 \(SIGTERM, sent by ddpdbg\)' "$tmp/err"
pids=$(grep -o 'pid [0-9]*' "$tmp/err" | cut -d' ' -f2)
check "SIGINT: 3 ranks reported" [ "$(wc -w <<<"$pids")" -eq 3 ]
for p in $pids; do check "SIGINT: rank pid $p gone" bash -c "! kill -0 $p 2>/dev/null"; done
exit $fail
