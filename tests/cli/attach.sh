#!/usr/bin/env bash
# attach.sh TRAIN -- real PyTorch DDP jobs under ddpdbg (python/ddpdbg, libddpdbg_probe.so),
# 2 gloo ranks of tests/pytorch/scenario.py (TinyDetector: a box head that reaches the loss only
# when the batch has boxes) run by Debian's torch (the python that imports torch; without one
# this test FAILS, as any missing tool in CI does). Asserts on findings and SQL, never timing:
# (a) rank 0's batch at iteration 1 has no box: the report names rank 0, iteration 1, bucket 0,
#     the box-head parameters with the indices of PyTorch's own error text, the 0-box cause and
#     the fixes; the trace holds the batch facts, the layouts, the hooks in the reducer's order;
# (b) find_unused_parameters=True: healthy, the unused parameters marked; the parameters are
#     bit for bit those of the same job untraced;
# (c) uneven inputs: the watchdog's hang, exit 124, uneven_batches in the report;
# (d) a rank SIGKILLed mid-backward: its ring drained, nothing lost or in flight;
# (f) (a)'s finding kinds equal those of the same case run by our trainer
#     (traces/examples/field_report);
# and the launching: the seed's torchrun and python -m torch.distributed.run commands, `ddpdbg
# env` for ranks started by hand, a shadowed sitecustomize still runs, DataLoader workers, a
# user comm hook and a builtin one, a second DDP, a process without torch.distributed, a
# program that is not Python, an unwritable trace folder: one line each, the job untouched.
# (e), the live view, is attach_live.sh.
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
scenario=$root/tests/pytorch/scenario.py
clear_rank_env PYTHONPATH DDPDBG_PROBE_LIB DDPDBG_PYTHON_DIR

py=
for candidate in /usr/bin/python3 "$(command -v python3)"; do
    [ -x "$candidate" ] && "$candidate" -c 'import torch.distributed' 2>/dev/null && { py=$candidate; break; }
done
[ -n "$py" ] || { echo "FAIL: no python3 imports torch (make deps installs Debian's python3-torch)"; exit 1; }

check() { # description, condition...
    local what=$1; shift
    "$@" || { echo "FAIL: $what"; fail=1; }
}
pick_port() { # a free TCP port in [20000, 32000) (tests/cli/lib.sh)
    local p
    for _ in $(seq 200); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
        grep -qi ":$(printf '%04X' $p) " /proc/net/tcp /proc/net/tcp6 2>/dev/null || { echo $p; return; }
    done
    echo 29999
}
# run_case NAME CASE [scenario options]: 2 ranks under ddpdbg run, trace in $tmp/NAME, output
# in $tmp/NAME.out (stdout and stderr); sets rc.
run_case() {
    local name=$1; shift
    local hang=30 # a hang only where one is meant (uneven), whatever the machine's load
    [ "$1" = uneven ] && hang=3
    timeout -k 5 180 "$ddpdbg" run --no-tui --hang-timeout $hang --nproc-per-node 2 \
        --master-port "$(pick_port)" --trace "$tmp/$name" -- "$py" "$scenario" "$@" \
        >"$tmp/$name.out" 2>&1
    rc=$?
}
q() { sqlite3 "$1" "$2"; } # q DB SQL: one query's rows
json() { "$ddpdbg" report "$1" --json; }

# ---- (a) the field report on a real PyTorch job ----------------------------------------------
run_case nogt nogt
check "(a) exit 1, rank 0's error (got $rc)" [ $rc -eq 1 ]
indices=$(sed -n 's/^\[rank0\]:Parameter indices which did not receive grad for rank 0: //p' "$tmp/nogt.out")
check "(a) PyTorch's own error names the box head's indices 8 9 10 11 (got '$indices')" [ "$indices" = "8 9 10 11" ]
timeout -k 5 180 "$ddpdbg" run --no-tui --no-trace --nproc-per-node 2 --master-port "$(pick_port)" -- \
    "$py" "$scenario" nogt >"$tmp/nogt-untraced.out" 2>&1
error_text() { grep -v "^\[rank0\]: *File \|^\[rank0\]:  \|^\[rank0\]:Traceback\|^ddpdbg" "$1" | grep "^\[rank0\]:"; }
check "(a) rank 0's error text is PyTorch's, traced or not" [ "$(error_text "$tmp/nogt.out")" = "$(error_text "$tmp/nogt-untraced.out")" ]
check "(a) ... and it is the unfinished reduction" grep -q "^\[rank0\]:RuntimeError: Expected to have finished reduction" <(error_text "$tmp/nogt-untraced.out")
json "$tmp/nogt" >"$tmp/nogt.json" 2>"$tmp/nogt.json.err"; json_rc=$?
check "(a) the JSON report ran (exit $json_rc: 1, findings; $(head -c 300 "$tmp/nogt.json.err"))" [ $json_rc -eq 1 ]
finding=$(tr -d '\n' <"$tmp/nogt.json" | grep -o '{"id": 1, "kind": "unused_some_ranks"[^}]*')
check "(a) finding 1 is unused_some_ranks" [ -n "$finding" ]
if [ -z "$finding" ]; then # what the report said instead, and how each rank ended (a rare flake in CI)
    grep -o '"rank": [0-9]*, "present": [a-z]*, "load_error": [^,]*\|"id": [0-9]*, "kind": "[a-z_]*", "severity": "[a-z]*", "title": "[^"]*' "$tmp/nogt.json"
    grep "^ddpdbg run:" "$tmp/nogt.out"
    ls -la "$tmp/nogt"
fi
check "(a) ... on rank 0 at iteration 1, bucket 0" grep -q '"ranks": \[0\], "iteration": 1, "bucket": 0' <<<"$finding"
check "(a) ... its parameters are PyTorch's indices" grep -q "\"parameters\": \[${indices// /, }\]" <<<"$finding"
check "(a) ... named as the box head's" grep -q '"parameter_names": \["box_head.0.weight", "box_head.0.bias", "box_head.2.weight", "box_head.2.bias"\]' <<<"$finding"
"$ddpdbg" report "$tmp/nogt" >"$tmp/nogt.report"
check "(a) the cause: rank 0's batch had 0 ground-truth boxes" grep -q "rank 0's batch at iteration 1 had 0 ground-truth boxes" "$tmp/nogt.report"
check "(a) the fix find_unused_parameters=True" grep -q "^      - find_unused_parameters=True" "$tmp/nogt.report"
check "(a) rank 0's ERROR row holds PyTorch's full text" [ "$(q "$tmp/nogt/rank0.db" "SELECT count(*) FROM events WHERE kind = 16 AND iter = 2 AND text LIKE 'Expected to have finished reduction%Parameter indices which did not receive grad for rank 0: 8 9 10 11%'")" = 1 ]
check "(a) the batch facts: rank 0 iteration 1 had 2 images, 0 boxes" [ "$(q "$tmp/nogt/rank0.db" "SELECT count(*), sum(b) FROM events WHERE kind = 15 AND iter = 1")" = "2|0" ]
check "(a) the parameter table in the reducer's order" [ "$(q "$tmp/nogt/rank0.db" "SELECT group_concat(name, ' ') FROM (SELECT name FROM params ORDER BY idx)")" = "backbone.0.weight backbone.0.bias backbone.1.weight backbone.1.bias backbone.3.weight backbone.3.bias cls_head.weight cls_head.bias box_head.0.weight box_head.0.bias box_head.2.weight box_head.2.bias" ]
check "(a) layouts: one bucket at construction in index order, rebuilt in hook order" [ "$(q "$tmp/nogt/rank1.db" "SELECT generation, group_concat(param, ' ') FROM (SELECT * FROM layouts ORDER BY generation, bucket, pos) GROUP BY generation")" = "0|0 1 2 3 4 5 6 7 8 9 10 11
1|10 11 8 9 6 7 4 5 2 3 0 1" ]
check "(a) iteration 0's hooks, each marking its parameter in bucket 0, in the rebuilt order" [ "$(q "$tmp/nogt/rank1.db" "SELECT group_concat(a, ' ') FROM (SELECT a FROM events WHERE kind = 8 AND iter = 0 AND flags & 2 AND d = 0 ORDER BY seq)")" = "10 11 8 9 6 7 4 5 2 3 0 1" ]
check "(a) rank 0 launched no bucket at iteration 1, rank 1 launched bucket 0" [ "$(q "$tmp/nogt/rank0.db" "SELECT count(*) FROM events WHERE kind = 11 AND iter = 1 AND text = 'bucket'") $(q "$tmp/nogt/rank1.db" "SELECT count(*) FROM events WHERE kind = 11 AND iter = 1 AND text = 'bucket' AND b = 0")" = "0 1" ]
check "(a) the group's sequence numbers agree across ranks: iteration 0's bucket is #7 on both" [ "$(q "$tmp/nogt/rank0.db" "SELECT c FROM events WHERE kind = 11 AND iter = 0 AND text = 'bucket'") $(q "$tmp/nogt/rank1.db" "SELECT c FROM events WHERE kind = 11 AND iter = 0 AND text = 'bucket'")" = "7 7" ]
check "(a) META: torch version, backend, DDP settings" [ "$(q "$tmp/nogt/rank0.db" "SELECT count(*) FROM meta WHERE key IN ('torch_version', 'backend', 'find_unused_parameters', 'bucket_cap_bytes', 'torch_distributed_debug', 'world', 'args')")" = 7 ]

# ---- (f) the same finding kinds as our own trainer on the same case --------------------------
kinds() { json "$1" | grep -o '"kind": "[a-z_]*"' | sort -u | tr '\n' ' '; }
check "(f) finding kinds equal our trainer's field report ($(kinds "$root/traces/examples/field_report")vs $(kinds "$tmp/nogt"))" \
    [ "$(kinds "$tmp/nogt")" = "$(kinds "$root/traces/examples/field_report")" ]

# ---- (b) find_unused_parameters=True: healthy, and the job computes what it computes untraced -
run_case unused find_unused --checksum
check "(b) exit 0 (got $rc)" [ $rc -eq 0 ]
"$ddpdbg" report "$tmp/unused" >"$tmp/unused.report"; report_rc=$?
check "(b) the report is healthy (exit $report_rc)" [ $report_rc -eq 0 ]
check "(b) rank 0 marked the 4 box-head parameters unused at iteration 1" [ "$(q "$tmp/unused/rank0.db" "SELECT group_concat(a, ' ') FROM events WHERE kind = 9 AND iter = 1 AND c = 1")" = "8 9 10 11" ]
timeout -k 5 180 "$ddpdbg" run --no-tui --no-trace --nproc-per-node 2 --master-port "$(pick_port)" -- \
    "$py" "$scenario" find_unused --checksum >"$tmp/untraced.out" 2>&1
check "(b) untraced: exit 0" [ $? -eq 0 ]
check "(b) the parameters are bit for bit those of the untraced job" \
    [ "$(grep checksum "$tmp/unused.out" | sort)" = "$(grep checksum "$tmp/untraced.out" | sort)" ]
check "(b) ... and it printed them" [ "$(grep -c checksum "$tmp/untraced.out")" = 2 ]

# ---- (c) uneven inputs: a hang, found by the watchdog --------------------------------------
run_case uneven uneven
check "(c) exit 124 (got $rc)" [ $rc -eq 124 ]
check "(c) the watchdog's hang summary" grep -q "^ddpdbg run: hang: rank [01] has waited" "$tmp/uneven.out"
check "(c) ... rank 0 waits at its barrier, #19" grep -q "^  rank 0: waiting in a collective for .* last collective launched #19 (barrier of barrier" "$tmp/uneven.out"
json "$tmp/uneven" >"$tmp/uneven.json"
check "(c) the report: uneven_batches, rank 0 ran 4 batches and rank 1 5" grep -q '"kind": "uneven_batches", "severity": "error", "title": "rank 0 ran 4 batches, rank 1 ran 5: uneven inputs"' "$tmp/uneven.json"
check "(c) ... and the hang" grep -q '"kind": "hang"' "$tmp/uneven.json"

# ---- (d) a rank SIGKILLed mid-backward: drained, nothing lost ---------------------------------
run_case kill kill
check "(d) exit 137 (rank 1's SIGKILL; got $rc)" [ $rc -eq 137 ]
check "(d) the launcher drained rank 1's ring" grep -q "^ddpdbg run: rank 1's ring drained into" "$tmp/kill.out"
check "(d) rank 1's trace: drained, nothing lost or in flight" [ "$(q "$tmp/kill/rank1.db" "SELECT group_concat(key || '=' || value, ' ') FROM (SELECT * FROM meta WHERE key IN ('closed', 'drain_lost', 'drain_in_flight', 'overruns') ORDER BY key)")" = "closed=drained drain_in_flight=0 drain_lost=0 overruns=0" ]
check "(d) rank 1 died in iteration 1's backward" [ "$(q "$tmp/kill/rank1.db" "SELECT max(iter) FROM events WHERE kind = 6")" = 1 ]
check "(d) the report: rank 1 is a dead rank" grep -q '"kind": "dead_rank", "severity": "error", "title": "rank 1 stopped at iteration 1 in its backward' <(json "$tmp/kill")

# ---- the seed's commands: torchrun and python -m torch.distributed.run ------------------------
fake=$tmp/bin; mkdir -p "$fake"
printf '#!%s\nraise SystemExit("torchrun itself must not run")\n' "$py" >"$fake/torchrun"; chmod +x "$fake/torchrun"
port=$(pick_port)
PATH=$fake:$PATH timeout -k 5 180 "$ddpdbg" run --no-tui --trace "$tmp/tr1" -- torchrun --nproc_per_node=2 \
    --master_port=$port "$scenario" healthy --iters 2 >"$tmp/tr1.out" 2>&1
check "torchrun --nproc_per_node=2: exit 0, run by torchrun's python, not by torchrun ($?)" [ $? -eq 0 ]
check "torchrun: two ranks traced, healthy" "$ddpdbg" report "$tmp/tr1" >/dev/null
check "torchrun: rank 1's trace" [ "$(q "$tmp/tr1/rank1.db" "SELECT value FROM meta WHERE key = 'world'")" = 2 ]
timeout -k 5 180 "$ddpdbg" run --no-tui --trace "$tmp/tr2" -- "$py" -m torch.distributed.run \
    --nproc-per-node 2 --master-port "$(pick_port)" "$scenario" healthy --iters 2 >"$tmp/tr2.out" 2>&1
check "python -m torch.distributed.run --nproc-per-node 2: exit 0 ($?)" [ $? -eq 0 ]
check "python -m torch.distributed.run: both ranks' traces" [ -s "$tmp/tr2/rank0.db" ] && [ -s "$tmp/tr2/rank1.db" ]

# ---- ddpdbg env: ranks started by another launcher (here, by hand) ----------------------------
eval "$("$ddpdbg" env --trace "$tmp/byhand")"
port=$(pick_port)
for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 120 "$py" "$scenario" \
        healthy --iters 2 >"$tmp/byhand$r.out" 2>&1 &
done
wait
unset DDPDBG_TRACE_DIR DDPDBG_PROBE_LIB PYTHONPATH
"$ddpdbg" report "$tmp/byhand" >"$tmp/byhand.report"
check "ddpdbg env: the ranks traced themselves, the report is healthy ($?)" grep -q "^no problems found" "$tmp/byhand.report"
check "ddpdbg env: both ranks closed their traces" [ "$(q "$tmp/byhand/rank0.db" "SELECT value FROM meta WHERE key = 'closed'") $(q "$tmp/byhand/rank1.db" "SELECT value FROM meta WHERE key = 'closed'")" = "clean clean" ]
# A peer's failed allreduce, ranks started by hand (no launcher SIGTERMs rank 1 once rank 0
# has failed): rank 1 waits in bucket 0's allreduce of iteration 1 until rank 0 exits, then
# raises Gloo's error from backward, as PyTorch's reducer does. Traced, the same error: torch
# 1.13 turned the exception our comm hook set on its future into "Unable to cast <the error>
# to Tensor", and a raising `then` would prefix "Got the following error when running the
# callback". The peer's port in the text differs from run to run, so the form is compared.
nogt_by_hand() { # TRACE-DIR or "": rank 1's output of the nogt case in $tmp/hand-rank1.out
    local port=$(pick_port) r
    (
        [ -n "$1" ] && eval "$("$ddpdbg" env --trace "$1")"
        for r in 0 1; do
            RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 120 "$py" \
                "$scenario" nogt >"$tmp/hand-rank$r.out" 2>&1 &
        done
        wait
    )
}
gloo_error='^RuntimeError: \[[^] ]*gloo[^] ]*\] [A-Z]'
nogt_by_hand ""
check "a peer gone, untraced: rank 1 raises Gloo's error ($(tail -1 "$tmp/hand-rank1.out"))" \
    grep -q "$gloo_error" "$tmp/hand-rank1.out"
nogt_by_hand "$tmp/hand"
check "a peer gone, traced: rank 1 raises the same Gloo error ($(tail -1 "$tmp/hand-rank1.out"))" \
    grep -q "$gloo_error" "$tmp/hand-rank1.out"
check "... and nothing else" [ "$(grep -c "Error: " "$tmp/hand-rank1.out")" = 1 ]
check "... which its trace's report quotes" grep -q '"title": "rank 1 raised at iteration 1: \[' <("$ddpdbg" report "$tmp/hand" --json)
"$ddpdbg" env >"$tmp/env.out" 2>"$tmp/env.err"
check "ddpdbg env without --trace: exit 2, one line" [ $? -eq 2 ] && [ "$(wc -l <"$tmp/env.err")" = 1 ]

# ---- the edges: a shadowed sitecustomize, workers, comm hooks, a second DDP --------------------
mkdir -p "$tmp/site"
echo 'print("shadowed sitecustomize ran")' >"$tmp/site/sitecustomize.py"
PYTHONPATH=$tmp/site run_case edges healthy --iters 2 --loader-workers 2 --comm-hook default --second-ddp
check "edges: exit 0 ($rc)" [ $rc -eq 0 ]
check "edges: the shadowed sitecustomize ran in both ranks" [ "$(grep -c "^\[rank[01]\]:shadowed sitecustomize ran" "$tmp/edges.out")" = 2 ]
check "edges: a second DDP: one line per rank" [ "$(grep -c "^\[rank[01]\]:ddpdbg: a second DistributedDataParallel in this process: only the first is traced$" "$tmp/edges.out")" = 2 ]
check "edges: the user's comm hook's buckets are traced" [ "$(q "$tmp/edges/rank0.db" "SELECT count(*) FROM events WHERE kind = 12 AND text = 'bucket' AND flags & 1")" = 2 ]
check "edges: no line from the DataLoader workers, nothing else from ddpdbg" [ "$(grep -c "ddpdbg:" "$tmp/edges.out")" = 2 ]
run_case builtin healthy --iters 2 --comm-hook builtin
check "builtin comm hook: exit 0, one line per rank" [ $rc -eq 0 ] && [ "$(grep -c "^\[rank[01]\]:ddpdbg: register_builtin_comm_hook(.*) installs a C++ hook ddpdbg cannot observe" "$tmp/builtin.out")" = 2 ]
check "builtin comm hook: the hooks are traced all the same" [ "$(q "$tmp/builtin/rank1.db" "SELECT count(*) FROM events WHERE kind = 8")" = 24 ]

# ---- the NCCL poller (python/ddpdbg/nccl_poller.py) with stand-in works: a completion is
# recorded once the work says it completed, in any order, failed ones with their exception; it
# runs on a GPU in tests/gpu/check.sh (attach-nccl) --------------------------------------------
PYTHONPATH=$root/python "$py" - <<'PY' >"$tmp/poller.out" 2>&1
import threading, time
from ddpdbg.nccl_poller import NcclPoller

class Work:
    def __init__(self): self.finished, self.error = False, None
    def is_completed(self): return self.finished
    def exception(self): return self.error

class State:
    def __init__(self): self.done_calls, self.lock = [], threading.Lock()
    def done(self, it, seq, op, bucket, numel, what, exc=None):
        with self.lock: self.done_calls.append((seq, None if exc is None else str(exc)))
    def fail(self, what, e): raise SystemExit("poller failed: %s %r" % (what, e))

def until(pred):  # the poller's thread gets the CPU when the machine's load lets it
    for _ in range(2000):
        if pred(): return True
        time.sleep(0.01)
    return False

S = State()
poller = NcclPoller(S)
works = [Work() for _ in range(3)]
for k, w in enumerate(works):
    poller.add(w, 0, 10 + k, 1, k, 100, "bucket")
time.sleep(0.05)
assert S.done_calls == [], S.done_calls  # nothing completed: nothing recorded
works[1].finished = True
assert until(lambda: S.done_calls), "no completion recorded"
time.sleep(0.05)
assert S.done_calls == [(11, None)], S.done_calls
works[2].error, works[2].finished = RuntimeError("NCCL error: unhandled system error"), True
works[0].finished = True
assert until(lambda: len(S.done_calls) == 3), S.done_calls
poller.stop()
assert sorted(S.done_calls) == [(10, None), (11, None), (12, "NCCL error: unhandled system error")], S.done_calls
print("poller ok")
PY
check "the NCCL poller records each completion once, failures with their text" grep -qx "poller ok" "$tmp/poller.out"

# ---- bad input: one line, the job untouched ---------------------------------------------------
lib=$(sed -n "s/^export DDPDBG_PROBE_LIB='\(.*\)'$/\1/p" <("$ddpdbg" env --trace x))
check "ddpdbg env names the probe library, which exists ($lib)" [ -f "$lib" ]
DDPDBG_TRACE_DIR=$tmp/nodist DDPDBG_PROBE_LIB=$lib PYTHONPATH=$root/python "$py" -c 'import torch; torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))' \
    >"$tmp/nodist.out" 2>&1
check "no init_process_group: PyTorch's own error, exit 1" [ $? -eq 1 ] && grep -q "Default process group has not been initialized" "$tmp/nodist.out"
check "no init_process_group: our one line" [ "$(grep -c "^ddpdbg: DistributedDataParallel is built before torch.distributed is initialised" "$tmp/nodist.out")" = 1 ]
mkdir -p "$tmp/oldtorch/torch/distributed" # a stand-in torch 1.12, found before the real one
echo '__version__ = "1.12.1"' >"$tmp/oldtorch/torch/__init__.py"
echo 'def is_available(): return True' >"$tmp/oldtorch/torch/distributed/__init__.py"
DDPDBG_TRACE_DIR=$tmp/old DDPDBG_PROBE_LIB=$lib PYTHONPATH=$root/python:$tmp/oldtorch \
    "$py" -c 'import torch; print("job ran with torch", torch.__version__)' >"$tmp/old.out" 2>&1
check "torch older than 1.13: the job runs, with one line" [ "$(cat "$tmp/old.out")" = "ddpdbg: torch 1.12.1 is older than 1.13, which the attach needs; this job runs untraced
job ran with torch 1.12.1" ]
timeout 30 "$ddpdbg" run --no-tui --trace "$tmp/notpy" -- /bin/echo hello >"$tmp/notpy.out" 2>&1
check "a program that is not Python: it runs (exit 0)" [ $? -eq 0 ] && grep -qx "\[rank0\]:hello" "$tmp/notpy.out"
check "... with one line saying its ranks run untraced" grep -qx "ddpdbg run: /bin/echo is not a Python program: its ranks run untraced (ddpdbg traces PyTorch jobs and ddpdbg-train)" "$tmp/notpy.out"
timeout 30 "$ddpdbg" run --no-tui -- no-such-program-ddpdbg >"$tmp/nosuch.out" 2>&1
check "no such program: exit 2, one line" [ $? -eq 2 ] && [ "$(cat "$tmp/nosuch.out")" = "ddpdbg run: no-such-program-ddpdbg: no such program (in PATH or as a path)" ]
port=$(pick_port)
for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DDPDBG_TRACE_DIR=/proc/ddpdbg-no \
        DDPDBG_PROBE_LIB=$lib PYTHONPATH=$root/python \
        timeout -k 5 120 "$py" "$scenario" healthy --iters 2 >"$tmp/unwritable$r.out" 2>&1 &
done
wait
check "an unwritable trace folder: training completes" grep -q "^rank 0: done" "$tmp/unwritable0.out"
check "... with the probe's one warning" [ "$(grep -c "the probe is off, training continues" "$tmp/unwritable0.out")" = 1 ]
exit $fail
