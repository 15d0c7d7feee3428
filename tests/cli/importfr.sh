#!/usr/bin/env bash
# importfr.sh TRAIN -- `ddpdbg import-fr` on PyTorch NCCL Flight Recorder dumps built from the
# format PyTorch's source defines (tests/fixtures/postmortem/make_fr_dumps.py, which must remake
# the committed dumps byte for byte): each scenario imports, and `report`, `tui` and `export`
# read the traces: a healthy run, the first collective that differs (mismatch), the rank that
# never joined and who waits for whom (hang), a rank without a dump (missing_rank), another
# process group (--pg). A foreign, damaged or newer pickle is one line and exit 2, and a pickle
# that would run a command runs nothing.
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
py=/usr/bin/python3
[ -x $py ] || { echo "FAIL: $py is missing (the fixtures' script and the JSON checks need it)"; exit 1; }
fr=tests/fixtures/postmortem/fr

# The committed dumps are the script's.
$py tests/fixtures/postmortem/make_fr_dumps.py "$tmp/fr" || { echo "FAIL: make_fr_dumps.py"; fail=1; }
diff -r "$tmp/fr" $fr >/dev/null || { echo "FAIL: tests/fixtures/postmortem/fr differs from what make_fr_dumps.py makes"; fail=1; }

# run STATUS ARGS...: ddpdbg ARGS, expecting exit STATUS and nothing on stderr; output in $tmp/out
run() {
    local want=$1; shift
    what="ddpdbg $*"
    "$ddpdbg" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq "$want" ] || { echo "FAIL: $what exited $rc, expected $want"; head -3 "$tmp/err"; fail=1; }
    [ -s "$tmp/err" ] && { echo "FAIL: $what wrote to stderr: $(head -1 "$tmp/err")"; fail=1; }
}
has() {
    grep -qF -- "$1" "$tmp/out" || sed 's/^ *//' "$tmp/out" | tr '\n' ' ' | grep -qF -- "$1" ||
        { echo "FAIL: $what: lacks '$1'"; fail=1; }
}
json() { # PYTHON-EXPRESSION on the JSON in $tmp/out (bound to j)
    $py -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if ($1) else 1)" "$tmp/out" ||
        { echo "FAIL: $what: not ($1)"; fail=1; }
}

# --- healthy --------------------------------------------------------------------------------------
run 0 import-fr $fr/healthy --out "$tmp/healthy"
has "import-fr: 2 of 2 ranks' dumps (version 2.4), process group 0 (default_pg) -> $tmp/healthy"
has "rank 1: 13 collectives, #1..#13"
run 0 report "$tmp/healthy"
has "no problems found: every rank's parameters got their gradients and the ranks issued the same 13 collectives"

# --- hang: rank 0 waits in #12, which rank 1 never joined -------------------------------------------
run 0 import-fr $fr/hang --out "$tmp/hang"
run 1 report "$tmp/hang"
has "rank 0: waiting in collective #12"
has "[1] error, the root cause: PyTorch's Flight Recorder shows a hang: rank 0 waits in collective #12 (allreduce of Float [300], 300 elements), which rank 1 never joined"
has "its watchdog timed #12 out after 600000 ms"
has "rank 0 waits for rank 1: rank 0 waits in #12, rank 1 has launched only up to #11"
has "called from _do_train (trainer.py:381)"
run 1 report "$tmp/hang" --json
json '[f["kind"] for f in j["findings"]] == ["hang"] and j["findings"][0]["ranks"] == [0] and j["findings"][0]["collective"] == 12'
json '[r["pending_collective"] for r in j["ranks"]] == [12, None]'
run 0 tui --once --view 1 "$tmp/hang"
has "HANG  rank 0 waits in collective #12 (allreduce Float [300])"
# the Collectives view: a dump is a snapshot, so a rank's missing #12 is the divergence, and
# who waits for whom (it said "no divergence": rank 1 read as still running)
run 0 tui --once --view 4 --size 160x24 "$tmp/hang"
has "first divergence at #12: rank 1 never issued #12 (allreduce Float [300]); rank 0 waits in it"
grep -q '^>  12  -1 allred  Float \[300\]' "$tmp/out" || { echo "FAIL: the row of #12 is not the marked one"; fail=1; }
run 0 export "$tmp/hang" --chrome "$tmp/hang.json"
$py - "$tmp/hang.json" <<'EOF' || { echo "FAIL: export of the imported hang"; fail=1; }
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in ev if e.get("cat") == "collective"]
assert {e["pid"] for e in spans} == {0, 1} and len(spans) == 23, len(spans)
assert any(e["ph"] == "i" and "never joined" in e["args"]["text"] for e in ev)
EOF

# --- mismatch: #12 is an allreduce on rank 0, a broadcast on rank 1 ----------------------------------
run 0 import-fr $fr/mismatch --out "$tmp/mismatch"
has "rank 0: 12 collectives, #1..#12; 1 entry of other process groups left out (--pg)"
has "while rank 1's #12 is another collective (broadcast of Float [24], 24 elements)"
run 1 report "$tmp/mismatch"
has "[1] error, the root cause: collectives diverge at #12: rank 0: allreduce of Float [300], 300 elements; rank 1: broadcast of Float [24], 24 elements"
has "Up to #11 the ranks issued the same collectives"
run 0 tui --once --view 4 "$tmp/mismatch"
has "first divergence at #12: rank 0 issued #12 (allreduce Float [300]), rank 1 #12"
# the other process group, chosen by its description
run 0 import-fr $fr/mismatch --out "$tmp/barrier" --pg barrier_pg
has "process group 1 (barrier_pg)"
has "rank 1: 1 collective, #1..#1; 12 entries of other process groups left out (--pg)"
run 0 report "$tmp/barrier"

# --- missing_rank: ranks 0 and 1 wait in #12, rank 2 left no dump ------------------------------------
run 0 import-fr $fr/missing_rank --out "$tmp/missing"
has "import-fr: 2 of 3 ranks' dumps"
run 1 report "$tmp/missing" --json
json '[f["kind"] for f in j["findings"]] == ["hang", "trace_incomplete"] and j["world"] == 3 and not j["ranks"][2]["present"]'
json '"which rank 2 never joined" in j["findings"][0]["title"] and "rank 1 waits for rank 2: rank 1 waits in #12, rank 2 left no dump" in j["findings"][0]["explanation"]'
# the default output folder is inside DIR
cp -r $fr/missing_rank "$tmp/dumps"
run 0 import-fr "$tmp/dumps"
[ -s "$tmp/dumps/ddpdbg-trace/rank1.db" ] && [ ! -e "$tmp/dumps/ddpdbg-trace/rank2.db" ] ||
    { echo "FAIL: import-fr DIR writes DIR/ddpdbg-trace/rank<R>.db, none for a missing rank"; fail=1; }

# --- bad input: one line, exit 2 -------------------------------------------------------------------
refused() { # what, expected substring, args...
    local w=$1 want=$2; shift 2
    "$ddpdbg" import-fr "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq 2 ] || { echo "FAIL: $w: exit $rc, expected 2"; fail=1; }
    [ -s "$tmp/out" ] && { echo "FAIL: $w: wrote to stdout"; fail=1; }
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || { echo "FAIL: $w: $(wc -l <"$tmp/err") lines on stderr"; fail=1; }
    grep -qF -- "$want" "$tmp/err" || { echo "FAIL: $w: '$(cat "$tmp/err")' lacks '$want'"; fail=1; }
}
refused "a foreign pickle" "$fr/foreign/nccl_trace_rank_0: byte 2: opcode 0x63 (GLOBAL) would import and call Python code" \
    $fr/foreign --out "$tmp/x"
refused "a pickle of something else" "not a Flight Recorder dump: the pickle holds a list" $fr/not_a_dump --out "$tmp/x"
refused "a truncated dump" "the pickle ends without its STOP opcode (a truncated file)" $fr/truncated --out "$tmp/x"
refused "a newer format" "Flight Recorder dump version 3.0; this ddpdbg reads versions 2.x" $fr/version3 --out "$tmp/x"
refused "no dumps" "holds no Flight Recorder dumps" tests/fixtures/postmortem --out "$tmp/x"
refused "a missing folder" "$tmp/none: No such file or directory" "$tmp/none"
mkdir -p "$tmp/two" && cp $fr/hang/nccl_trace_rank_0 "$tmp/two/" && cp $fr/hang/nccl_trace_rank_1 "$tmp/two/other_1"
refused "two names" "holds files of two names" "$tmp/two"
refused "an unknown group" "has a process group named nope" $fr/hang --out "$tmp/x" --pg nope
# A pickle that would run a command if it were unpickled by Python runs nothing here.
mkdir -p "$tmp/evil"
printf "cos\nsystem\n(S'touch %s/pwned'\ntR." "$tmp" >"$tmp/evil/nccl_trace_rank_0"
refused "a pickle that calls os.system" "opcode 0x63 (GLOBAL) would import and call Python code" "$tmp/evil" --out "$tmp/x"
[ ! -e "$tmp/pwned" ] || { echo "FAIL: the pickle's command ran"; fail=1; }
exit $fail
