#!/usr/bin/env bash
# explain.sh TRAIN -- `ddpdbg explain` on the logs users paste: the seed report
# (tests/fixtures/postmortem/seed-report.txt, cut inside its list of names, in Chinese text),
# and real PyTorch 1.13 DDP runs of every error kind explain reads, recorded once by
# tests/fixtures/postmortem/make_logs.py (2 Gloo ranks started by hand; one log of our own
# trainer's field report; the NCCL watchdog's lines quoted, there is no GPU to record them).
# Each is checked for its ranks, its finding kind, its parameters grouped by module, its first
# cause and a fix; the JSON of each parses and agrees; --model names indices and gives names
# their index (checked against `ddpdbg-train params`); standard input reads as a file; a log
# without a DDP error says so (exit 0); bad input is one line and exit 2.
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
py=/usr/bin/python3
[ -x $py ] || { echo "FAIL: $py is missing (the JSON checks need it)"; exit 1; }
fx=tests/fixtures/postmortem
logs=$fx/logs

# explains STATUS FILE ARGS...: runs explain, expecting exit STATUS and nothing on stderr; the
# text in $tmp/out, the JSON in $tmp/out.json (parsed by the python checks below)
explains() {
    local want=$1; shift
    what="explain $*"
    "$ddpdbg" explain "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq "$want" ] || { echo "FAIL: $what exited $rc, expected $want"; cat "$tmp/err"; fail=1; }
    [ -s "$tmp/err" ] && { echo "FAIL: $what wrote to stderr: $(head -1 "$tmp/err")"; fail=1; }
    "$ddpdbg" explain "$@" --json >"$tmp/out.json" 2>/dev/null
    $py -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/out.json" ||
        { echo "FAIL: $what --json is not JSON"; fail=1; }
}
# has TEXT: a line of the text holds TEXT, or the text does with its wrapped lines joined
has() {
    grep -qF -- "$1" "$tmp/out" || sed 's/^ *//' "$tmp/out" | tr '\n' ' ' | grep -qF -- "$1" ||
        { echo "FAIL: $what: the text lacks '$1'"; fail=1; }
}
# json PYTHON-EXPRESSION: true of the JSON (bound to j), else a failure naming it
json() {
    $py -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$tmp/out.json" ||
        { echo "FAIL: $what --json: not ($1)"; fail=1; }
}
# the first likely cause printed after "likely causes" begins with $1
first_cause() {
    sed -n '/likely causes, most likely first:/{n;p;q}' "$tmp/out" | grep -qF -- "1. $1" ||
        { echo "FAIL: $what: the first cause is not '$1'"; fail=1; }
}

# --- the seed report: rank 0, the dec_bbox_head group, boxes first, find_unused among the fixes --
explains 1 $fx/seed-report.txt
has "rank 0, line 36: Expected to have finished reduction in the prior iteration before starting a new one."
has "the log ends inside its list of parameter names (line 39): 9 read, 'model.28.dec_bbox' cut off"
has "[1] error, the root cause: rank 0 never marked at least 9 parameters ready"
has "model.28.dec_bbox_head.5.layers.{0..2}.{bias,weight}  6 tensors"
first_cause "A batch without ground-truth boxes on rank 0"
has "- find_unused_parameters=True: after every forward DDP searches the autograd graph"
# box-head names alone do not establish an empty batch: no fix that presumes one, and no
# bucket sizes the log does not hold
grep -qF "Skip empty batches" "$tmp/out" && { echo "FAIL: seed report: a fix for empty batches the log does not show"; fail=1; }
grep -qF "MiB" "$tmp/out" && { echo "FAIL: seed report: bucket sizes quoted that the log does not hold"; fail=1; }
has "the buckets keep their layout, no rebuild"
has "3 ranks (--nproc_per_node)"
json 'j["status"] == "findings" and j["errors"][0]["rank"] == 0 and j["errors"][0]["cut"] == {"list": "names", "read": 9, "partial": "model.28.dec_bbox"}'
json 'j["findings"][0]["kind"] == "unused_some_ranks" and j["findings"][0]["ranks"] == [0] and not j["indices"]'
json 'j["findings"][0]["causes"][0].startswith("A batch without ground-truth boxes on rank 0")'
json 'any(f.startswith("find_unused_parameters=True") for f in j["findings"][0]["fixes"])'
json '"model.28.dec_bbox_head.5.layers.{0..2}.{bias,weight}  6 tensors" in j["findings"][0]["parameter_groups"]'

# --model: the names' indices, checked against the trainer's registry
explains 1 $fx/seed-report.txt --model rtdetr-l.yaml
has "model.28.dec_bbox_head.5.layers.{0..2}.{weight,bias}  6 tensors"
"$train" params model=rtdetr-l.yaml >"$tmp/params"
json 'j["indices"] and j["model"] == "rtdetr-l.yaml" and len(j["findings"][0]["parameters"]) == 9'
$py - "$tmp/out.json" "$tmp/params" <<'EOF' || { echo "FAIL: --model gave names the wrong indices"; fail=1; }
import json, sys
f = json.load(open(sys.argv[1]))["findings"][0]
reg = dict(line.split()[:2] for line in open(sys.argv[2]) if not line.startswith("total"))
assert all(reg[str(i)] == n for i, n in zip(f["parameters"], f["parameter_names"])), f
EOF
# a model the names do not fit is set aside, with a note (not an error)
explains 1 $fx/seed-report.txt --model rtdetr-tiny.yaml
has "--model set aside: 'model.28.dec_bbox_head.5.layers.2.bias' (line 39) is not a parameter of rtdetr-tiny.yaml"
# standard input: the same explanation
"$ddpdbg" explain - <$fx/seed-report.txt | sed 1d >"$tmp/stdin.out"
"$ddpdbg" explain $fx/seed-report.txt | sed 1d | diff - "$tmp/stdin.out" >/dev/null ||
    { echo "FAIL: explain - (standard input) differs from explain FILE"; fail=1; }

# --- debug OFF: indices only; then --model names them (our own trainer's field report) ---------
explains 1 $logs/unused_off.log
has "rank 0, line 18: Expected to have finished reduction"
has "It gives their indices only (TORCH_DISTRIBUTED_DEBUG=OFF)"
has "--model M names them"
has "parameter indices (12):"
has "{6..17}"
has "[1] error, the root cause: rank 0 never marked 12 parameters ready; rank 1 waited for them (unused on some ranks)"
has "[2] error: rank 1 lost its Gloo connection to [127.0.0.1]:29500"
has "rank 1; follows from [1]"
json '[f["kind"] for f in j["findings"]] == ["unused_some_ranks", "error"] and j["findings"][1]["follows_from"] == 1'
json 'j["findings"][0]["parameters"] == list(range(6, 18)) and j["findings"][0]["parameter_names"] == []'
explains 1 $logs/ours_field_report.log --model rtdetr-tiny.yaml
for g in "model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias}  18 tensors" \
         "model.27.enc_bbox_head.layers.{0..2}.{weight,bias}  6 tensors" "model.27.denoising_class_embed.weight  1 tensor"; do
    has "$g"
    grep -qF -- "$g" tests/golden/report/field_report.txt ||
        { echo "FAIL: '$g' is not what report says of the traced field report"; fail=1; }
done
has "rank 0's last progress line before the error shows 0 instances (ground-truth boxes) in its batch."
first_cause "A batch without ground-truth boxes on rank 0"
has "- Skip empty batches on all ranks together" # the log shows the empty batch: now it is offered

# --- INFO and DETAIL: names; what follows on rank 1 ---------------------------------------------
explains 1 $logs/unused_info.log
has "It names them and gives their indices (TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL)."
has "model.2.dec_bbox_head.{0,1}.layers.{0..2}.{bias,weight}  12 tensors"
has "[2] error: rank 1 waited 5000 ms in a Gloo recv that never completed"
json '[f["kind"] for f in j["findings"]] == ["unused_some_ranks", "hang"] and j["findings"][1]["follows_from"] == 1'
first_cause "A batch without ground-truth boxes on rank 0"
cp "$tmp/out.json" "$tmp/info.json"
explains 1 $logs/unused_info.wrapped.log # folded at 80 columns, between Chinese paragraphs
has "model.2.dec_bbox_head.{0,1}.layers.{0..2}.{bias,weight}  12 tensors"
has "rank 1, line 141: Timed out waiting 5000ms for recv operation to complete"
$py - "$tmp/info.json" "$tmp/out.json" <<'EOF' || { echo "FAIL: the folded log explains otherwise than the log"; fail=1; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
strip = lambda j: [(f["kind"], f["title"], f["parameter_names"], f["fixes"]) for f in j["findings"]]
assert strip(a) == strip(b), (strip(a), strip(b))
EOF
explains 1 $logs/unused_detail.log
has "[2] error: rank 1's monitored barrier failed waiting for rank 0 (TORCH_DISTRIBUTED_DEBUG=DETAIL)"
has "[3] error: rank 1 lost its Gloo connection"
explains 1 $logs/unused_detail.cut.log # the log ends inside the names; INFO lines name them all
has "the log ends inside its list of parameter names (line 104): 3 read, 'model.2.dec_bbox_head.1.layers' cut off"
has "lines before it ('Parameter: ... did not get gradient in backwards pass') name 12, the whole"
json 'len(j["findings"][0]["parameter_names"]) == 12'
explains 1 $logs/unused_off.rank0.log # one rank's terminal: no prefixes
has "rank 0, line 17: Expected to have finished reduction"
has "Only rank 0's error is in the log."

# --- every rank, static graph, marked twice, construction, NCCL, healthy --------------------------
explains 1 $logs/unused_all.log
has "[1] error, the root cause: 12 parameters got no gradient on every rank (unused on all ranks)"
json 'j["findings"][0]["kind"] == "unused_all_ranks" and j["findings"][0]["ranks"] == [0, 1]'
explains 1 $logs/static_changed.log
has "rank 0 never marked 12 parameters ready that it used in the first iteration (static_graph=True)"
has "static_graph=False with find_unused_parameters=True"
explains 1 $logs/static_hook.log
has "[1] error, the root cause: ranks 0 and 1: the training graph changed under static_graph=True"
explains 1 $logs/marked_twice.log
has "[1] error, the root cause: ranks 0 and 1 marked parameter 1 (model.0.bias) ready twice in one backward"
first_cause "Reentrant activation checkpointing"
has "(this run's DDP summary says find_unused_parameters: 1)"
has "- use_reentrant=False in torch.utils.checkpoint"
explains 1 $logs/count_mismatch.log
has "[1] error, the root cause: the ranks built different models: rank 1 has 20 parameter tensors, rank 0 has 18"
has "- Give every rank the same model"
explains 1 $logs/shape_mismatch.log
has "[1] error, the root cause: rank 1's parameter 10 has sizes [5, 8], not rank 0's"
has "[2] error: rank 0 lost its Gloo connection"
explains 1 $logs/nccl_watchdog.log
has "[1] error, the root cause: rank 1's NCCL watchdog timed out collective #456 (ALLREDUCE, 65297 elements) after 600054"
has "rank 1 had enqueued up to #456 and completed up to #455."
has "\`ddpdbg import-fr\` reads the dumps and names the rank that never joined #456"
json 'j["findings"][0]["kind"] == "hang"'
explains 0 $logs/healthy.log
has "no DDP error found"
json 'j["status"] == "no_ddp_error" and j["findings"] == [] and j["errors"] == []'

# --- bad input: one line, exit 2 ----------------------------------------------------------------
refused() { # what, expected substring, args...
    local w=$1 want=$2; shift 2
    "$ddpdbg" explain "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq 2 ] || { echo "FAIL: $w: exit $rc, expected 2"; fail=1; }
    [ -s "$tmp/out" ] && { echo "FAIL: $w: wrote to stdout"; fail=1; }
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || { echo "FAIL: $w: $(wc -l <"$tmp/err") lines on stderr"; fail=1; }
    grep -qF -- "$want" "$tmp/err" || { echo "FAIL: $w: '$(cat "$tmp/err")' lacks '$want'"; fail=1; }
}
refused "a missing log" "ddpdbg explain: $tmp/none.log: cannot open: No such file or directory" "$tmp/none.log"
refused "a directory" "ddpdbg explain: $tmp: is a directory, expected a file" "$tmp"
refused "a bad model" "ddpdbg explain: --model rtdetr-q.yaml: rtdetr-q.yaml: no such file, and not a built-in model" \
    $fx/seed-report.txt --model rtdetr-q.yaml
refused "no log" "expected a log file, or - for standard input" --json
refused "two logs" "one log expected" a.log b.log
refused "an unknown option" "unknown option '--names'" a.log --names
refused "--model without a value" "--model needs a model" a.log --model
exit $fail
