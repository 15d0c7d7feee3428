#!/usr/bin/env bash
# report.sh TRAIN -- `ddpdbg report` and `ddpdbg export` on the example traces
# (traces/examples/, one per scenario of `ddpdbg scenario list`, recorded by `make examples`):
# each names its scenario's cause; the text, the JSON and the short form (--short: the root
# cause alone, as the TUI's first screen and a failed run print it) equal the goldens in
# tests/golden/report/ (durations the records quote, "3.0 s", are masked on both sides so that a
# re-recorded trace of the same shape still matches), exit 0 healthy / 1 findings; a missing
# directory, a file, a directory without traces, a non-SQLite rank file and a newer schema are
# exit 2 with one line on stderr; the Chrome export is valid JSON with one named process per
# rank. UPDATE=1 rewrites the goldens from the current output.
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
golden=tests/golden/report
examples=traces/examples
mask() { sed -E 's/[0-9]+\.[0-9]+ s\b/<t> s/g' "$@"; }

# report_is SCENARIO MODE(txt|json|short) STATUS
report_is() {
    local s=$1 mode=$2 want=$3 flag=
    [ "$mode" = json ] && flag=--json
    [ "$mode" = short ] && flag=--short
    "$ddpdbg" report "$examples/$s" $flag >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq "$want" ] || { echo "FAIL: report $s $flag exited $rc, expected $want"; fail=1; }
    [ -s "$tmp/err" ] && { echo "FAIL: report $s $flag wrote to stderr: $(head -1 "$tmp/err")"; fail=1; }
    if [ "${UPDATE:-0}" = 1 ]; then cp "$tmp/out" "$golden/$s.$mode"; return; fi
    if ! diff <(mask "$golden/$s.$mode") <(mask "$tmp/out") >"$tmp/diff"; then
        echo "FAIL: report $s $flag differs from $golden/$s.$mode:"; head -20 "$tmp/diff"; fail=1
    fi
}

# refused DESCRIPTION EXPECTED-SUBSTRING ARGS...: exit 2, nothing on stdout, one line on stderr
refused() {
    local what=$1 want=$2; shift 2
    "$ddpdbg" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc -eq 2 ] || { echo "FAIL: $what: exit $rc, expected 2"; fail=1; }
    [ -s "$tmp/out" ] && { echo "FAIL: $what: wrote to stdout"; fail=1; }
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || { echo "FAIL: $what: $(wc -l <"$tmp/err") lines on stderr:"; cat "$tmp/err"; fail=1; }
    grep -qF -- "$want" "$tmp/err" || { echo "FAIL: $what: stderr '$(cat "$tmp/err")' lacks '$want'"; fail=1; }
}

# every scenario of the catalog has its example, whose report names the scenario's cause
"$ddpdbg" scenario list >"$tmp/list" || { echo "FAIL: scenario list"; fail=1; }
for s in $(cut -d' ' -f1 "$tmp/list"); do
    [ -s "$examples/$s/rank0.db" ] || { echo "FAIL: $examples/$s/rank0.db missing (make examples)"; fail=1; continue; }
    status=1
    case $s in healthy|find_unused) status=0;; esac
    report_is "$s" txt $status
    report_is "$s" json $status
    report_is "$s" short $status
    case $s in
        healthy) kind=;; field_report|unused_head) kind=unused_some_ranks;; unused_all) kind=unused_all_ranks;;
        find_unused) kind=unused_handled;; skip_backward) kind=skipped_backward;; uneven) kind=uneven_batches;;
        no_sync_one_rank) kind=no_sync_mismatch;; bucket_cap) kind=layout_mismatch;;
        shape) kind=model_mismatch;; kill) kind=dead_rank;;
        straggler) kind=straggler;; *) echo "FAIL: scenario $s has no expected finding here"; fail=1; continue;;
    esac
    if [ -n "$kind" ]; then
        grep -q "\"kind\": \"$kind\"" "$golden/$s.json" ||
            { echo "FAIL: the report of $s names no $kind finding"; fail=1; }
    else
        grep -q '"status": "healthy"' "$golden/$s.json" || { echo "FAIL: healthy is not healthy"; fail=1; }
    fi
done
[ "$(ls -d "$examples"/*/ | wc -l)" -eq "$(wc -l <"$tmp/list")" ] ||
    { echo "FAIL: traces/examples/ holds $(ls -d "$examples"/*/ | wc -l) traces for $(wc -l <"$tmp/list") scenarios"; fail=1; }
grep -q "rank 0's batch at iteration 1 had 0 ground-truth boxes, so the box losses were constants" "$golden/field_report.txt" ||
    { echo "FAIL: the field report's golden lacks the cause"; fail=1; }
grep -q 'model.27.dec_bbox_head.{0..2}.layers.{0..2}.{weight,bias}  18 tensors' "$golden/field_report.txt" ||
    { echo "FAIL: the field report's golden lacks the grouped parameters"; fail=1; }
# the report says which finding is the root cause, and lists it first
grep -q '^\[1\] error, the root cause: rank 0 never marked 25 parameters ready' "$golden/field_report.txt" ||
    { echo "FAIL: the field report's root cause is not [1], or not called the root cause"; fail=1; }
# the short form: the root cause, the names per rank, the bucket, the collective, the top fix
short=$golden/field_report.short
for want in '^root cause \[1\]: rank 0 never marked 25 parameters ready at iteration 1' \
    '^    never reported on rank 0 at iteration 1 \(25 tensors\):$' \
    '^      model.27.dec_bbox_head.\{0..2\}.layers.\{0..2\}.\{weight,bias\}  18 tensors$' \
    '^      model.27.enc_bbox_head.layers.\{0..2\}.\{weight,bias\}  6 tensors$' \
    "^    why: rank 0's batch at iteration 1 had 0 ground-truth boxes" \
    '^    bucket 0 never launched on rank 0: 91 of its 116 parameters were ready$' \
    '^    rank 1 waited in collective #12 \(allreduce of bucket 0, 264524 elements\), which rank 0 never' \
    '^    fix: find_unused_parameters=True: ' '^    follows from it: \[2\] rank 0 raised at iteration 2'; do
    grep -Eq "$want" "$short" || { echo "FAIL: $short lacks /$want/"; fail=1; }
done
# the fix quotes the bucket caps the trace recorded, not PyTorch's defaults by rote
tr '\n' ' ' <"$golden/field_report.txt" | grep -q 'keep their 1 MiB/25 MiB *layout' ||
    { echo "FAIL: the field report's fix lacks its recorded caps"; fail=1; }
if command -v sqlite3 >/dev/null; then
    cp -r "$examples/field_report" "$tmp/caps"
    for r in 0 1; do sqlite3 "$tmp/caps/rank$r.db" "UPDATE meta SET value = '4194304' WHERE key IN ('bucket_cap_bytes', 'first_bucket_bytes')"; done
    "$ddpdbg" report "$tmp/caps" | tr '\n' ' ' | grep -q 'keep their 4 MiB *layout' ||
        { echo "FAIL: the fix does not read the caps from the trace (4 MiB)"; fail=1; }
    for r in 0 1; do sqlite3 "$tmp/caps/rank$r.db" "DELETE FROM meta WHERE key IN ('bucket_cap_bytes', 'first_bucket_bytes')"; done
    "$ddpdbg" report "$tmp/caps" | tr '\n' ' ' | grep -q 'keep their layout, no rebuild' ||
        { echo "FAIL: a trace without caps still gets sizes quoted"; fail=1; }
else
    echo "FAIL: no sqlite3 (make deps)"; fail=1
fi

# --- bad input ----------------------------------------------------------------------------------
refused "missing directory" "trace $tmp/nowhere: No such file or directory" report "$tmp/nowhere"
echo text >"$tmp/file.txt"
refused "a file, not a directory" "is not a directory" report "$tmp/file.txt"
mkdir -p "$tmp/empty"
refused "no rank files" "holds no rank<R>.db files" report "$tmp/empty"
mkdir -p "$tmp/foreign" && echo "not sqlite at all, but long enough to look like something" >"$tmp/foreign/rank0.db"
refused "a non-SQLite rank file" "$tmp/foreign/rank0.db" report "$tmp/foreign"
command -v sqlite3 >/dev/null || { echo "FAIL: no sqlite3 command (make deps)"; fail=1; }
if command -v sqlite3 >/dev/null; then
    mkdir -p "$tmp/newer" && cp "$examples/healthy/rank0.db" "$tmp/newer/rank0.db"
    sqlite3 "$tmp/newer/rank0.db" "PRAGMA user_version = 99"
    refused "a newer schema" "trace $tmp/newer/rank0.db has schema version 99, this ddpdbg reads up to 2" report "$tmp/newer"
    refused "export of a newer schema" "schema version 99" export "$tmp/newer" --chrome "$tmp/x.json"
fi
refused "report without a directory" "expected a trace directory" report
refused "report with an unknown option" "unknown option '--yaml'" report "$examples/healthy" --yaml
refused "report --json --short" "--json and --short exclude each other" report "$examples/healthy" --json --short
refused "export without --chrome" "--chrome FILE" export "$examples/healthy"
refused "export to an unwritable file" "cannot write $tmp/no/such/dir.json" export "$examples/healthy" --chrome "$tmp/no/such/dir.json"
"$ddpdbg" report --help >"$tmp/out" 2>&1 && grep -q '^usage: ddpdbg report DIR' "$tmp/out" || { echo "FAIL: report --help"; fail=1; }

# --- export ---------------------------------------------------------------------------------------
command -v python3 >/dev/null || { echo "FAIL: no python3 (make deps): the exports are not parsed"; fail=1; }
for s in field_report skip_backward kill; do
    "$ddpdbg" export "$examples/$s" --chrome "$tmp/$s.json" >"$tmp/out" 2>"$tmp/err" ||
        { echo "FAIL: export $s exited $?: $(cat "$tmp/err")"; fail=1; continue; }
    if command -v python3 >/dev/null; then
        python3 - "$tmp/$s.json" <<'EOF' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
problems = []
if sorted(names) != [0, 1] or not all(n.startswith("rank %d" % p) for p, n in names.items()):
    problems.append("process names %s" % names)
for p in (0, 1):
    spans = [e for e in ev if e["pid"] == p and e["ph"] == "X"]
    if not any(e["name"] == "forward" for e in spans) or not any(e["name"] == "backward" for e in spans):
        problems.append("rank %d lacks forward/backward spans" % p)
    colls = [e for e in spans if e.get("cat") == "collective"]
    if not colls or not all({"seq", "bucket", "numel"} <= set(e["args"]) for e in colls):
        problems.append("rank %d: collectives without seq/bucket/numel" % p)
    for tid in {e["tid"] for e in spans}:  # every track nests: no partial overlaps
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["tid"] == tid)
        for (a0, a1), (b0, b1) in zip(track, track[1:]):
            if b0 < a1 - 1e-3 and b1 > a1 + 1e-3:
                problems.append("rank %d tid %d: overlapping spans at %.3f" % (p, tid, b0))
                break
if min(e["ts"] for e in ev if "ts" in e) < 0:
    problems.append("negative timestamps")
if not any(e["ph"] == "i" and e["name"] in ("error", "hang", "dead") for e in ev):
    problems.append("no error, hang or dead instant")
if sys.argv[1].endswith("kill.json") and not any(
        e["ph"] == "i" and e["name"] == "dead" and e["pid"] == 1 and "SIGKILL" in e["args"]["text"]
        for e in ev):
    problems.append("no instant for rank 1's SIGKILL")
if problems:
    print("FAIL: export %s: %s" % (sys.argv[1], "; ".join(problems)))
    sys.exit(1)
EOF
    else # a structural check without python
        grep -q '"traceEvents":\[' "$tmp/$s.json" && tail -c 4 "$tmp/$s.json" | grep -q ']}' &&
            grep -q '"name":"process_name","args":{"name":"rank 1' "$tmp/$s.json" ||
            { echo "FAIL: export $s: not the expected JSON shape"; fail=1; }
    fi
done
exit $fail
