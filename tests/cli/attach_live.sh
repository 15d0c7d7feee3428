#!/usr/bin/env bash
# attach_live.sh TRAIN -- (e) of the attach: `ddpdbg run` of a real PyTorch job on a terminal
# (driven in tmux, as live.sh drives our trainer) shows the field report live: 2 gloo ranks of
# tests/pytorch/scenario.py nogt (rank 0's batch at iteration 1 has no box); the banner names
# rank 0's error and the bucket that never launched, the Parameters view (key 3) the box head's
# unreported tensors grouped, and q leaves the view with rank 0's status. Needs Debian's torch
# and tmux (missing: FAIL, as any missing tool in CI).
source "$(dirname "$0")/lib.sh"
ddpdbg=$(realpath "$(dirname "$train")/ddpdbg")
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
command -v tmux >/dev/null || { echo "FAIL: no tmux (make deps installs it)"; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
clear_rank_env TMUX PYTHONPATH DDPDBG_PROBE_LIB DDPDBG_PYTHON_DIR
py=
for candidate in /usr/bin/python3 "$(command -v python3)"; do
    [ -x "$candidate" ] && "$candidate" -c 'import torch.distributed' 2>/dev/null && { py=$candidate; break; }
done
[ -n "$py" ] || { echo "FAIL: no python3 imports torch (make deps installs Debian's python3-torch)"; exit 1; }
sock="$tmp/tmux.sock"
tm() { tmux -S "$sock" "$@"; }
trap 'tm kill-server 2>/dev/null; rm -rf "$tmp"' EXIT

wait_for() { # PATTERN SECONDS: polls the screen until it shows PATTERN
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        tm capture-pane -p -t live >"$tmp/screen" 2>/dev/null && grep -q -- "$1" "$tmp/screen" && return 0
        sleep 0.1
    done
    return 1
}
check() {
    local what=$1; shift
    "$@" || { echo "FAIL: $what"; echo "--- screen:"; cat "$tmp/screen"; fail=1; }
}

tm new-session -d -s live -x 160 -y 40 \
    "$ddpdbg run --nproc-per-node 2 --master-port $((20000 + RANDOM % 12000)) --trace $tmp/t -- $py $root/tests/pytorch/scenario.py nogt; echo EXIT=\$? >$tmp/rc; sleep 60"
check "the live view starts" wait_for "1 Ranks" 60
check "the banner names rank 0's error and the bucket that never launched" \
    wait_for "ERROR  rank 0 at iter 2: bucket 0 of iter 1 never launched" 60
tm send-keys -t live 1 # the first screen is the root cause; 1 is the Ranks view
check "the Ranks view: rank 0 errored" wait_for "^   0  errored" 10
tm send-keys -t live 3
check "the Parameters view: the box head grouped" wait_for "box_head.{0,2}.{weight,bias}" 10
check "the view stays on the final state" wait_for "run ended: exit status 1" 30
tm send-keys -t live q
for ((i = 0; i < 50; i++)); do [ -s "$tmp/rc" ] && break; sleep 0.1; done
check "q leaves the view; the run's status is rank 0's (1)" [ "$(cat "$tmp/rc" 2>/dev/null)" = EXIT=1 ]
check "the ranks' output went to output.log" grep -q "^\[rank0\]:RuntimeError: Expected to have finished" "$tmp/t/output.log"
exit $fail
