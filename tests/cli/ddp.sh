#!/usr/bin/env bash
# ddp.sh TRAIN -- DDP training through `ddpdbg run` (bin/ddpdbg, next to TRAIN): the field
# report (rtdetr-l, a background-only batch on rank 0 at iteration 1: PyTorch's "Expected to
# have finished reduction" with the 43 parameter indices; find_unused_parameters=true trains
# through it, ending with identical parameters on both ranks; TORCH_DISTRIBUTED_DEBUG=INFO's names, on rtdetr-tiny); a clean 2-rank run where
# only rank 0 prints rows and writes checkpoints; and bad set-ups (port in use, no master,
# WORLD_SIZE or model or DDP settings that differ across ranks, bad argument values), each one
# line and a non-zero exit, never a hang: every run is under `timeout`, so a hang fails the test.
# 20-55 s on 2 cores (load decides), most of it the two rtdetr-l runs.
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
clear_rank_env

check() { # description, condition...
    local what=$1; shift
    "$@" || { echo "FAIL: $what"; fail=1; }
}
count() { grep -c -- "$1" "$2"; }

# A TCP port in [20000, 60000) that no socket here uses now (read from /proc/net/tcp*, so no
# tool is needed), so that runs of this test beside other jobs do not meet on 29500.
pick_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000)) # below the ephemeral ports (32768-)
        grep -qi ":$(printf '%04X' $p) " /proc/net/tcp /proc/net/tcp6 2>/dev/null || {
            echo $p
            return
        }
    done
    echo "FAIL: no free port found" >&2
    exit 1
}

# absent PATTERN FILE: no line of FILE matches the grep pattern.
absent() { ! grep -q -- "$1" "$2"; }

# expect_one_line WHAT FILE WANT: FILE holds exactly the line WANT.
expect_one_line() {
    if [ "$(wc -l <"$2")" -ne 1 ] || [ "$(cat "$2")" != "$3" ]; then
        echo "FAIL: $1"; echo "  got:      $(cat "$2")"; echo "  expected: $3"; fail=1
    fi
}

# by_hand K PORT WORLD ARGS...: rank K of WORLD started as torchrun's users start ranks (no
# launcher, no run token), in the background; output in $tmp/rK.{out,err}, pid in hand_pid[K].
by_hand() {
    local k=$1 port=$2 world=$3; shift 3
    RANK=$k WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout -k 5 60 "$train" "$@" >"$tmp/r$k.out" 2>"$tmp/r$k.err" &
    hand_pid[k]=$!
}
# wait_ranks WHAT "RC0 RC1": waits for the by_hand ranks 0 and 1 and checks their statuses.
wait_ranks() {
    wait "${hand_pid[0]}"; local rc0=$?
    wait "${hand_pid[1]}"; local rc1=$?
    check "$1: ranks 0 and 1 exit $2 (got $rc0 $rc1)" [ "$rc0 $rc1" = "$2" ]
}

# ---- a. the field report: rtdetr-l, 2 ranks, rank 0 has no boxes at iteration 1 -------------
"$train" synth out="$tmp/field" n=8 imgsz=160 classes=4 empty=0 seed=7 >/dev/null
field=(train model=rtdetr-l.yaml data="$tmp/field/data.yaml" imgsz=160 batch=1 epochs=1 val=false
    fault=nogt:rank=0,iter=1)
t0=$SECONDS
timeout -k 5 240 "$ddpdbg" run --no-trace --nproc-per-node 2 --master-port "$(pick_port)" --no-tui -- \
    "${field[@]}" out="$tmp/field-run" >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "field report (rtdetr-l): $((SECONDS - t0)) s"
check "field report: exit 1 (got $rc)" [ $rc -eq 1 ]
check "field report: the fault hit rank 0 at iteration 1" grep -qx \
    '\[rank0\]:fault nogt: rank 0, iteration 1: 1 images, their [0-9]* boxes removed' "$tmp/err"
check "field report: PyTorch's RuntimeError" grep -q "^\[rank0\]:RuntimeError: Expected to have \
finished reduction in the prior iteration before starting a new one\. This error indicates that \
your module has parameters that were not used in producing loss\. " "$tmp/err"
field_indices="510 $(seq -s ' ' 521 526) $(seq -s ' ' 539 574)"
check "field report: the 43 parameter indices" grep -qxF \
    "[rank0]:Parameter indices which did not receive grad for rank 0: $field_indices" "$tmp/err"
check "field report: the TORCH_DISTRIBUTED_DEBUG hint (debug off)" grep -q "^\[rank0\]: In \
addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL" \
    "$tmp/err"
check "field report: no names with debug off" \
    absent 'Parameters which did not receive grad' "$tmp/err"
check "field report: the launcher names rank 0 first" grep -Eq \
    '^ddpdbg run: rank 0 failed first: exitcode 1 \(pid [0-9]+\); rank 1: ' "$tmp/err"
check "field report: rank 1 raised nothing of its own" absent '^\[rank1\]:RuntimeError' "$tmp/err"
# Under INFO the names would be these (rtdetr-l's registry); the run itself is checked on tiny.
"$train" params model=rtdetr-l.yaml >"$tmp/params-l"
check "rtdetr-l: index 510 is model.28.denoising_class_embed.weight" \
    grep -q '^510 model\.28\.denoising_class_embed\.weight ' "$tmp/params-l"
check "rtdetr-l: index 574 is model.28.dec_bbox_head.5.layers.2.bias" \
    grep -q '^574 model\.28\.dec_bbox_head\.5\.layers\.2\.bias ' "$tmp/params-l"

# The same run with find_unused_parameters=true trains through the background-only batch.
t0=$SECONDS
timeout -k 5 240 "$ddpdbg" run --no-trace --nproc-per-node 2 --master-port "$(pick_port)" --no-tui -- \
    "${field[@]}" find_unused_parameters=true out="$tmp/field-unused" >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "field report, find_unused_parameters=true (rtdetr-l): $((SECONDS - t0)) s"
check "find_unused_parameters=true: exit 0 (got $rc)" [ $rc -eq 0 ]
check "find_unused_parameters=true: the fault hit" \
    grep -q '^\[rank0\]:fault nogt: rank 0, iteration 1:' "$tmp/err"
check "find_unused_parameters=true: the epoch completed" \
    grep -qx '\[rank0\]:1 epochs completed in .* hours\.' "$tmp/out"
check "find_unused_parameters=true: no RuntimeError" absent RuntimeError "$tmp/err"
check "find_unused_parameters=true: last.ckpt" [ -s "$tmp/field-unused/last.ckpt" ]
check "find_unused_parameters=true: identical parameters on both ranks" \
    grep -q '^\[rank0\]:DDP: parameters identical on all 2 ranks (fingerprint [0-9a-f]*)$' "$tmp/out"

# The INFO variant on rtdetr-tiny (same structure: head 27, 3 decoder layers): the names of
# exactly the listed indices, in descending index order, then the indices line.
"$train" synth out="$tmp/tiny" n=8 imgsz=96 classes=4 empty=0 seed=7 >/dev/null
tiny=(train model=rtdetr-tiny.yaml data="$tmp/tiny/data.yaml" imgsz=96 batch=1 epochs=1 val=false)
TORCH_DISTRIBUTED_DEBUG=INFO timeout -k 5 60 "$ddpdbg" run --no-trace --nproc-per-node 2 \
    --master-port "$(pick_port)" --no-tui -- "${tiny[@]}" fault=nogt:rank=0,iter=1 \
    out="$tmp/tiny-info" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "INFO: exit 1 (got $rc)" [ $rc -eq 1 ]
tiny_indices="282 $(seq -s ' ' 293 298) $(seq -s ' ' 305 322)"
"$train" params model=rtdetr-tiny.yaml >"$tmp/params-tiny"
tiny_names=$(for i in $tiny_indices; do echo "$i"; done | sort -rn | while read -r i; do
    awk -v i="$i" '$1 == i { print $2 }' "$tmp/params-tiny"; done | paste -sd, | sed 's/,/, /g')
check "tiny: the names end with model.27.denoising_class_embed.weight" \
    grep -q ', model\.27\.denoising_class_embed\.weight$' <<<"$tiny_names"
check "tiny: the names start with model.27.dec_bbox_head.2.layers.2.bias" \
    grep -q '^model\.27\.dec_bbox_head\.2\.layers\.2\.bias, ' <<<"$tiny_names"
grep -A1 '^\[rank0\]:Parameters which did not receive grad for rank 0: ' "$tmp/err" >"$tmp/names"
{
    echo "[rank0]:Parameters which did not receive grad for rank 0: $tiny_names"
    echo "[rank0]:Parameter indices which did not receive grad for rank 0: $tiny_indices"
} >"$tmp/names.want"
if ! cmp -s "$tmp/names" "$tmp/names.want"; then
    echo "FAIL: INFO: the names line, then the indices line"
    diff "$tmp/names.want" "$tmp/names" | sed 's/^/    /'
    fail=1
fi
one_param='^\[rank0\]:\[Rank 0\] Parameter: model\.27\.[a-z_.0-9]* did not get gradient in '
check "INFO: one 'did not get gradient' line per parameter (25)" \
    [ "$(count "${one_param}backwards pass\.$" "$tmp/err")" -eq 25 ]
check "INFO: no TORCH_DISTRIBUTED_DEBUG hint" absent 'In addition, you can set' "$tmp/err"

# fault=unused cuts the head's parameters out of the graph inside the forward, before DDP's
# post-forward search: with find_unused_parameters=true they are found unused and marked
# ready, and the run trains through as PyTorch's does; without it rank 1 raises.
unused_fault=fault=unused:param=*dec_score_head.2.*,rank=1
timeout -k 5 60 "$ddpdbg" run --no-trace --nproc-per-node 2 --master-port "$(pick_port)" \
    --no-tui -- "${tiny[@]}" "$unused_fault" find_unused_parameters=true out="$tmp/unused-fu" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
check "fault=unused, find_unused_parameters=true: exit 0 (got $rc)" [ $rc -eq 0 ]
check "fault=unused, find_unused_parameters=true: no RuntimeError" absent RuntimeError "$tmp/err"
check "fault=unused, find_unused_parameters=true: the epoch completed" \
    grep -qx '\[rank0\]:1 epochs completed in .* hours\.' "$tmp/out"
check "fault=unused, find_unused_parameters=true: identical parameters on both ranks" \
    grep -q '^\[rank0\]:DDP: parameters identical on all 2 ranks (fingerprint [0-9a-f]*)$' \
    "$tmp/out"
timeout -k 5 60 "$ddpdbg" run --no-trace --nproc-per-node 2 --master-port "$(pick_port)" \
    --no-tui -- "${tiny[@]}" "$unused_fault" out="$tmp/unused-off" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "fault=unused, find_unused_parameters=false: exit 1 (got $rc)" [ $rc -eq 1 ]
check "fault=unused, find_unused_parameters=false: rank 1 raises PyTorch's error" grep -q \
    '^\[rank1\]:RuntimeError: Expected to have finished reduction in the prior iteration' "$tmp/err"

# ---- b. a clean 2-rank run: rank 0 alone prints the rows and writes the checkpoints ----------
timeout -k 5 60 "$ddpdbg" run --no-trace --nproc-per-node 2 --master-port "$(pick_port)" --no-tui -- \
    "${tiny[@]}" out="$tmp/clean" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "clean run: exit 0 (got $rc)" [ $rc -eq 0 ]
check "clean run: nothing on stderr" [ ! -s "$tmp/err" ]
[ -s "$tmp/err" ] && sed 's/^/    /' "$tmp/err"
check "clean run: 3 progress rows (6 images / 2 ranks / batch 1), all rank 0's" \
    [ "$(count '^\[rank[0-9]*\]: *1/1 ' "$tmp/out")" -eq 3 ]
check "clean run: rank 0's last row" grep -q '^\[rank0\]: *1/1 .* 100% 3/3 \[' "$tmp/out"
check "clean run: rank 1 prints nothing" absent '^\[rank1\]:' "$tmp/out"
check "clean run: the epoch completed" \
    grep -qx '\[rank0\]:1 epochs completed in .* hours\.' "$tmp/out"
check "clean run: last.ckpt" [ -s "$tmp/clean/last.ckpt" ]
check "clean run: only last.ckpt and best.ckpt" \
    [ "$(ls "$tmp/clean" | paste -sd' ')" = "best.ckpt last.ckpt" ]
# By hand, each rank with its own out=: rank 1 writes nothing.
port=$(pick_port)
by_hand 0 "$port" 2 "${tiny[@]}" out="$tmp/hand0" rdzv_timeout=20
by_hand 1 "$port" 2 "${tiny[@]}" out="$tmp/hand1" rdzv_timeout=20
wait_ranks "by hand" "0 0"
check "by hand: rank 0 wrote last.ckpt" [ -s "$tmp/hand0/last.ckpt" ]
check "by hand: rank 1 wrote no file" [ -z "$(ls -A "$tmp/hand1" 2>/dev/null)" ]
check "by hand: rank 1 printed nothing" [ "$(cat "$tmp/r1.out" "$tmp/r1.err" | wc -c)" -eq 0 ]

# ---- c. bad set-ups: one line each, a non-zero exit, no hang ---------------------------------
# A port some other program listens on: rank 0 cannot serve the store there.
# python3 holds the port (a missing python3 fails the test: CI has it, `make deps`).
command -v python3 >/dev/null || { echo "FAIL: no python3 (make deps)"; fail=1; }
if command -v python3 >/dev/null; then
    port=$(pick_port)
    python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("listening", flush=True); time.sleep(60)' "$port" >"$tmp/listener" &
    listener=$!
    for _ in $(seq 50); do [ -s "$tmp/listener" ] && break; sleep 0.1; done
    timeout -k 5 30 "$ddpdbg" run --no-trace --nproc-per-node 2 --master-port "$port" --no-tui -- \
        "${tiny[@]}" out="$tmp/busy" rdzv_timeout=10 >"$tmp/out" 2>"$tmp/err"
    rc=$?
    kill "$listener"; wait "$listener" 2>/dev/null
    check "port in use: exit 2 (got $rc)" [ $rc -eq 2 ]
    check "port in use: rank 0's line" grep -qxF "[rank0]:rank 0: cannot serve the store at \
127.0.0.1:$port: address already in use (another run on this port? choose another MASTER_PORT)" \
        "$tmp/err"
    check "port in use: rank 0 failed first" \
        grep -Eq '^ddpdbg run: rank 0 failed first: exitcode 2 ' "$tmp/err"
    check "port in use: two lines in all" [ "$(wc -l <"$tmp/err")" -eq 2 ]
fi

# No master: rank 1 alone, a closed port, rdzv_timeout=2.
port=$(pick_port)
t0=$SECONDS
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 30 "$train" \
    "${tiny[@]}" out="$tmp/lonely" rdzv_timeout=2 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "no master: exit 2 (got $rc)" [ $rc -eq 2 ]
check "no master: gave up after about 2 s ($((SECONDS - t0)) s)" [ $((SECONDS - t0)) -le 5 ]
check "no master: nothing on stdout" [ ! -s "$tmp/out" ]
expect_one_line "no master" "$tmp/err" "rank 1: could not connect to MASTER_ADDR:MASTER_PORT \
127.0.0.1:$port within 2 s: Connection refused"

# WORLD_SIZE 2 on rank 0, 3 on rank 1: both say so, naming both ranks.
port=$(pick_port)
by_hand 0 "$port" 2 "${tiny[@]}" out="$tmp/w0" rdzv_timeout=10
by_hand 1 "$port" 3 "${tiny[@]}" out="$tmp/w1" rdzv_timeout=10
wait_ranks "WORLD_SIZE mismatch" "2 2"
expect_one_line "WORLD_SIZE mismatch, rank 0" "$tmp/r0.err" \
    "rank 0: WORLD_SIZE mismatch: rank 0 has WORLD_SIZE=2, but rank 1 has WORLD_SIZE=3"
expect_one_line "WORLD_SIZE mismatch, rank 1" "$tmp/r1.err" "rank 1: WORLD_SIZE mismatch: rank 1 \
has WORLD_SIZE=3, but rank 0 (the store at 127.0.0.1:$port) has WORLD_SIZE=2"

# Different models: rtdetr-tiny (323 tensors) on rank 0, rtdetr-l (575) on rank 1; imgsz=128
# is the least rtdetr-l's 300 queries allow.
hand=(train imgsz=128 batch=1 epochs=1 val=false rdzv_timeout=10)
port=$(pick_port)
by_hand 0 "$port" 2 "${hand[@]}" data="$tmp/tiny/data.yaml" model=rtdetr-tiny.yaml out="$tmp/m0"
by_hand 1 "$port" 2 "${hand[@]}" data="$tmp/tiny/data.yaml" model=rtdetr-l.yaml out="$tmp/m1"
wait_ranks "different models" "2 2"
same="RuntimeError: DDP expects same model across all ranks, but"
expect_one_line "different models, rank 0" "$tmp/r0.err" \
    "rank 0: $same Rank 0 has 323 params, while rank 1 has inconsistent 575 params."
expect_one_line "different models, rank 1" "$tmp/r1.err" \
    "rank 1: $same Rank 1 has 575 params, while rank 0 has inconsistent 323 params."

# Same model, another class count (denoising_class_embed is (nc+1) x 64): as in PyTorch, the
# ranks other than 0 compare their sizes with rank 0's; rank 0 sees its peer leave.
"$train" synth out="$tmp/tiny5" n=8 imgsz=96 classes=5 empty=0 seed=7 >/dev/null
port=$(pick_port)
by_hand 0 "$port" 2 "${hand[@]}" data="$tmp/tiny/data.yaml" model=rtdetr-tiny.yaml out="$tmp/c0"
by_hand 1 "$port" 2 "${hand[@]}" data="$tmp/tiny5/data.yaml" model=rtdetr-tiny.yaml out="$tmp/c1"
wait_ranks "different sizes" "2 2"
expect_one_line "different sizes, rank 1" "$tmp/r1.err" "rank 1: RuntimeError: [1]: params[282] \
in this process with sizes [5, 64] appears not to match sizes of the same param in process 0."
check "different sizes: rank 0 reports the failed collective in one line" grep -Eqx \
    'rank 0: RuntimeError: rank 0 collective #[0-9]+ failed: .*' "$tmp/r0.err"
check "different sizes: rank 0, one line" [ "$(wc -l <"$tmp/r0.err")" -eq 1 ]

# Different bucket settings: rank 1 bucket_cap_mb=1 (the others' default is 25 MiB).
port=$(pick_port)
by_hand 0 "$port" 2 "${tiny[@]}" out="$tmp/b0" rdzv_timeout=10
by_hand 1 "$port" 2 "${tiny[@]}" out="$tmp/b1" rdzv_timeout=10 bucket_cap_mb=1
wait_ranks "different buckets" "2 2"
flags="find_unused_parameters=False static_graph=False gradient_as_bucket_view=False"
flags+=" broadcast_buffers=True"
ours="$flags bucket_cap_bytes=26214400 first_bucket_bytes=1048576"
one_mb="$flags bucket_cap_bytes=1048576 first_bucket_bytes=1048576"
why="DDP settings differ across ranks, so their bucket layouts and collectives would not match"
expect_one_line "different buckets, rank 0" "$tmp/r0.err" \
    "rank 0: RuntimeError: $why: rank 0 has $ours, while rank 1 has $one_mb."
expect_one_line "different buckets, rank 1" "$tmp/r1.err" \
    "rank 1: RuntimeError: $why: rank 1 has $one_mb, while rank 0 has $ours."
# The same with check_ddp_settings=false on both: construction passes as in PyTorch, and the
# first iteration's bucket allreduces differ in size (the layouts differ only with
# find_unused_parameters: without it, iteration 0 has one bucket and the rebuild takes rank 0's
# layout). Gloo's size check aborts a rank (its enforce, as under PyTorch); none hangs.
port=$(pick_port)
by_hand 0 "$port" 2 "${tiny[@]}" out="$tmp/b0" rdzv_timeout=10 check_ddp_settings=false \
    find_unused_parameters=true
by_hand 1 "$port" 2 "${tiny[@]}" out="$tmp/b1" rdzv_timeout=10 check_ddp_settings=false \
    find_unused_parameters=true bucket_cap_mb=1
wait_ranks "settings check off: rank 0 raises, rank 1 aborts (SIGABRT)" "1 134"
check "settings check off: rank 1, Gloo's size check" grep -q "^terminate called after throwing \
an instance of 'gloo::EnforceNotMet'" "$tmp/r1.err"
check "settings check off: rank 1 received rank 0's first bucket (814800 bytes) into 4484" \
    grep -q 'op\.preamble\.length <= op\.nbytes\. 814800 vs 4484$' "$tmp/r1.err"
check "settings check off: rank 0's collective #7 failed" \
    grep -q '^RuntimeError: rank 0 collective #7 failed: ' "$tmp/r0.err"
# Without find_unused_parameters iteration 0 has one bucket on every rank and the rebuild
# installs rank 0's layout everywhere: different caps train through, as in PyTorch.
port=$(pick_port)
by_hand 0 "$port" 2 "${tiny[@]}" out="$tmp/b0" rdzv_timeout=10 check_ddp_settings=false
by_hand 1 "$port" 2 "${tiny[@]}" out="$tmp/b1" rdzv_timeout=10 check_ddp_settings=false \
    bucket_cap_mb=1
wait_ranks "settings check off, no find_unused_parameters: both train through" "0 0"
check "settings check off, no find_unused_parameters: identical parameters" \
    grep -q '^DDP: parameters identical on all 2 ranks' "$tmp/r0.out"

# Bad values of the DDP arguments, as rank 0 of 2: exit 2 and one line before any rendezvous
# (rendezvous would wait for rank 1: timeout fails the test instead).
expect_rank0_error() { # expected line, args...
    local want=$1; shift
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(pick_port) \
        timeout -k 5 20 "$train" "${tiny[@]}" out="$tmp/bad" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    check "$*: exit 2 (got $rc)" [ $rc -eq 2 ]
    check "$*: nothing on stdout" [ ! -s "$tmp/out" ]
    expect_one_line "$*" "$tmp/err" "$want"
}
expect_rank0_error "ddpdbg-train train: backend must be gloo or nccl, got 'mpi'" backend=mpi
expect_rank0_error "ddpdbg-train train: bucket_cap_mb must be a size in MiB in (0, 1e6], got '0'" \
    bucket_cap_mb=0
expect_rank0_error \
    "ddpdbg-train train: fault=nogt:rank=x: rank=x: expected an integer in [0, 65536]" \
    fault=nogt:rank=x
expect_rank0_error \
    "ddpdbg-train train: fault=nogt:rank=1: missing iter= (expected nogt:rank=R,iter=I)" \
    fault=nogt:rank=1
expect_rank0_error "ddpdbg-train train: fault rank=5: no such rank (WORLD_SIZE=2: ranks 0..1)" \
    fault=nogt:rank=5,iter=0
expect_rank0_error "ddpdbg-train train: check_ddp_settings must be true or false, got 'no'" \
    check_ddp_settings=no
expect_rank0_error "ddpdbg-train train: find_unused_parameters must be true or false, got 'yes'" \
    find_unused_parameters=yes
expect_rank0_error "ddpdbg-train train: rdzv_timeout must be an integer in [1, 86400], got '0'" \
    rdzv_timeout=0
expect_rank0_error "ddpdbg-train train: nccl_hostid=host: expected rank or off" \
    backend=nccl nccl_hostid=host
DDPDBG_NCCL_HOSTID=1 expect_rank0_error \
    "ddpdbg-train train: DDPDBG_NCCL_HOSTID=1: expected rank or off" backend=nccl
TORCH_DISTRIBUTED_DEBUG=LOUD expect_rank0_error \
    "ddpdbg-train train: TORCH_DISTRIBUTED_DEBUG=LOUD: expected OFF, INFO or DETAIL"
# A fault=unused pattern that names no parameter: one line, exit 2 (checked once the model is
# built, after the dataset summary on stdout; here in one process: no rank waits for it).
"$train" "${tiny[@]}" out="$tmp/bad" 'fault=unused:param=*no_such_head*,rank=0' \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
check "fault=unused matching nothing: exit 2 (got $rc)" [ $rc -eq 2 ]
expect_one_line "fault=unused matching nothing" "$tmp/err" "fault=unused: param=*no_such_head* \
matches no parameter of rtdetr-tiny.yaml (see \`ddpdbg-train params model=rtdetr-tiny.yaml\`)"

# A missing peer at start-up: rank 0 alone says which ranks it waits for every 5 s, then gives
# up at rdzv_timeout naming them.
port=$(pick_port)
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 30 "$train" \
    "${tiny[@]}" out="$tmp/alone" rdzv_timeout=11 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "missing peer: exit 2 (got $rc)" [ $rc -eq 2 ]
printf '%s\n' "rank 0: waiting for ranks 1 of 2 to join at 127.0.0.1:$port (5 s)" \
    "rank 0: waiting for ranks 1 of 2 to join at 127.0.0.1:$port (10 s)" \
    "rank 0: rendezvous at 127.0.0.1:$port: ranks 1 of WORLD_SIZE=2 did not join within 11 s" \
    >"$tmp/alone.want"
cmp -s "$tmp/err" "$tmp/alone.want" ||
    { echo "FAIL: missing peer: the waiting lines every 5 s, then the timeout"; diff "$tmp/alone.want" "$tmp/err"; fail=1; }

# A rank started twice: the second RANK=1 is refused in one line (ranks 0 and the first 1 wait
# for rank 2 of WORLD_SIZE=3, then give up).
port=$(pick_port)
by_hand 0 "$port" 3 "${tiny[@]}" out="$tmp/d0" rdzv_timeout=6
by_hand 1 "$port" 3 "${tiny[@]}" out="$tmp/d1" rdzv_timeout=6
sleep 2 # the first rank 1 has joined by now (it waits, silent until its 5-s line)
RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 30 "$train" \
    "${tiny[@]}" out="$tmp/d2" rdzv_timeout=6 >"$tmp/out" 2>"$tmp/twice.err"
rc=$?
check "rank started twice: exit 2 (got $rc)" [ $rc -eq 2 ]
expect_one_line "rank started twice" "$tmp/twice.err" "rank 1: rank 1 joined the run at \
127.0.0.1:$port twice: two processes were started with RANK=1"
wait_ranks "rank started twice: the others time out" "2 2"

# Through the launcher: every rank that got there says it, then the one summary line.
timeout -k 5 30 "$ddpdbg" run --no-trace --nproc-per-node 2 --master-port "$(pick_port)" --no-tui -- \
    "${tiny[@]}" out="$tmp/bad" fault=nogt:rank=5,iter=0 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "launcher, fault rank=5: exit 2 (got $rc)" [ $rc -eq 2 ]
check "launcher, fault rank=5: the rank's line" grep -Eqx \
    '\[rank[01]\]:ddpdbg-train train: fault rank=5: no such rank \(WORLD_SIZE=2: ranks 0\.\.1\)' "$tmp/err"
check "launcher, fault rank=5: summary" \
    grep -Eq '^ddpdbg run: rank [01] failed first: exitcode 2 ' "$tmp/err"
expected='^(\[rank[01]\]:ddpdbg-train train: fault rank=5: no such rank|ddpdbg run: rank [01] failed first)'
check "launcher, fault rank=5: nothing else" [ "$(grep -Evc "$expected" "$tmp/err")" -eq 0 ]
exit $fail
