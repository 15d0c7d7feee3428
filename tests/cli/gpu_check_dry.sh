#!/usr/bin/env bash
# gpu_check_dry.sh TRAIN -- tests/gpu/check.sh, the one prepared GPU script, in its dry mode on
# this machine's build (the one under test): it parses, it finds the kit (bin/ and build/cpu/tests), the steps it
# is asked for run and report PASS or SKIP with their own reason (the GPU tests exit 77 here),
# the GPU-only ones say "dry: needs the GPU", the others "not in ONLY", and it writes the summary
# and the log under the folder given, exiting 0. Only the quick steps (ONLY=): the training
# steps are the GPU's business (check.sh --dry runs them all, minutes on 2 cores).
source "$(dirname "$0")/lib.sh"
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo" || exit 1
bash -n tests/gpu/check.sh || { echo "FAIL: check.sh does not parse"; exit 1; }
# The build under test: bin/ with build/cpu/tests, or build/cuda/bin with build/cuda/tests.
tests_dir=build/cpu/tests
[ -x "$(dirname "$train")/../tests/test_parity_harness" ] && tests_dir=$(dirname "$train")/../tests
ONLY=parity-harness,comm_nccl,probe_cupti,nccl DRY_BIN=$(dirname "$train") DRY_TESTS=$tests_dir \
    bash tests/gpu/check.sh --dry "$tmp/out" >"$tmp/stdout" 2>&1
rc=$?
summary=$tmp/out/summary.txt
check() { # description, condition...
    local what=$1; shift
    "$@" || { echo "FAIL: $what"; sed 's/^/  /' "$summary" 2>/dev/null; fail=1; }
}
check "exit 0 (got $rc)" [ $rc -eq 0 ]
check "the kit line" grep -q "^kit   dry: $(dirname "$train") and $tests_dir of this checkout" "$summary"
check "parity-harness passed" grep -Eq '^PASS  parity-harness \([0-9]+s\)' "$summary"
check "test_comm_nccl skipped with its own reason" \
    grep -q '^SKIP  comm_nccl ([0-9]*s): skip: pg_new("nccl") fails as documented' "$summary"
check "test_probe_cupti skipped with its own reason" \
    grep -q '^SKIP  probe_cupti ([0-9]*s): skip: probe_cupti_start fails as documented' "$summary"
check "a GPU-only step says so" grep -qx 'SKIP  nccl: dry: needs the GPU' "$summary"
check "parity is GPU-only" grep -qx 'SKIP  parity: dry: needs the GPU' "$summary"
check "a step not asked for" grep -qx 'SKIP  field-report: not in ONLY' "$summary"
check "the total" grep -Eq '^total [0-9]+s; no step failed$' "$summary"
check "the log has each step's output" grep -q '^===== probe_cupti (limit [0-9]*s)' "$tmp/out/steps.log"
check "no FAIL line" [ "$(grep -c '^FAIL' "$summary")" -eq 0 ]
exit $fail
