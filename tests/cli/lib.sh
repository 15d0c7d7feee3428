# lib.sh -- sourced by the CLI tests (not a test itself: run_tests.sh runs tests/cli/*.sh except
# this one). Tests that pick a MASTER_PORT take it in 20000-31999: below Linux's ephemeral ports
# (32768-60999), which outgoing connections of earlier runs may still hold. Sets train (the
# binary, absolute), tmp (a scratch folder removed on exit) and fail=0, and defines
# clear_rank_env and expect_error.
set -u
train=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# Unsets the variables through which a developer's shell (torchrun's environment, a run token,
# a trace folder, a debug level, ...) would steer a test's ranks, and any names given too.
clear_rank_env() {
    unset OMP_NUM_THREADS DDPDBG_RUN_TOKEN DDPDBG_TRAIN DDPDBG_TRACE_DIR TORCH_DISTRIBUTED_DEBUG \
        GLOO_SOCKET_IFNAME RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR \
        MASTER_PORT "$@"
}

# expect_error EXPECTED-LINE ARGS...: `$train ARGS...` exits 2, prints nothing on stdout and
# exactly EXPECTED-LINE on stderr; otherwise prints what differs and sets fail=1.
expect_error() {
    local want=$1; shift
    "$train" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -ne 2 ]; then echo "FAIL: $* exited $rc, expected 2"; fail=1; fi
    if [ -s "$tmp/out" ]; then echo "FAIL: $* wrote to stdout"; fail=1; fi
    if [ "$(wc -l <"$tmp/err")" -ne 1 ] || [ "$(cat "$tmp/err")" != "$want" ]; then
        echo "FAIL: $*"; echo "  got:      $(cat "$tmp/err")"; echo "  expected: $want"; fail=1
    fi
}
