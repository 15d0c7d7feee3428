#!/usr/bin/env bash
# scenarios.sh TRAIN -- the failure catalog: `ddpdbg scenario list` names every scenario with a
# one-line description, and `ddpdbg scenario run NAME` of each one runs the real trainer with
# its fault and must end with its diagnosis naming the scenario's cause ("expected <kind>:
# found", exit 0). An unknown name is one line, exit 2.
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
clear_rank_env

"$ddpdbg" scenario list >"$tmp/list" 2>&1 || { echo "FAIL: scenario list"; fail=1; }
names=$(awk '{print $1}' "$tmp/list")
[ "$(echo "$names" | wc -l)" -ge 10 ] || { echo "FAIL: fewer than 10 scenarios"; fail=1; }
while read -r line; do
    [ "$(echo "$line" | awk '{print NF}')" -ge 4 ] || { echo "FAIL: no description: $line"; fail=1; }
done <"$tmp/list"
for name in $names; do
    t0=$SECONDS
    # each scenario's launcher uses the default port: run them one after the other
    timeout -k 5 120 "$ddpdbg" scenario run "$name" --no-tui --trace "$tmp/$name" \
        >"$tmp/$name.log" 2>&1
    rc=$?
    verdict=$(tail -1 "$tmp/$name.log")
    echo "$name: $((SECONDS - t0)) s: $verdict"
    if [ $rc -ne 0 ] || ! echo "$verdict" | grep -q ': found$'; then
        echo "FAIL: scenario $name (exit $rc)"; tail -30 "$tmp/$name.log"; fail=1
    fi
done
"$ddpdbg" scenario run nope >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && [ "$(cat "$tmp/err")" = "ddpdbg scenario: no scenario 'nope' (ddpdbg scenario list)" ] ||
    { echo "FAIL: unknown scenario: exit $rc, $(cat "$tmp/err")"; fail=1; }
exit $fail
