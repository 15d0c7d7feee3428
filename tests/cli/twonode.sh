#!/usr/bin/env bash
# twonode.sh TRAIN -- a two-node DDP run: two network namespaces joined by a veth pair
# (10.231.0.1/24 and 10.231.0.2/24), one `ddpdbg run --nnodes 2 --node-rank K` in each with the
# same DDPDBG_RUN_TOKEN; both exit 0 and rank 0 trains the epoch. A node with another token is
# refused by the store and both sides say so in a line. No GLOO_SOCKET_IFNAME: each Gloo device
# binds the address its namespace routes to the master from (the hostname's address, which
# PyTorch would bind, is loopback here).
# Skips (77) where namespaces cannot be made: not root, no `ip`, netns or veth not permitted.
source "$(dirname "$0")/lib.sh"
ddpdbg=$(dirname "$train")/ddpdbg
[ -x "$ddpdbg" ] || { echo "FAIL: no $ddpdbg"; exit 1; }
clear_rank_env

check() { # description, condition...
    local what=$1; shift
    "$@" || { echo "FAIL: $what"; fail=1; }
}

[ "$(id -u)" -eq 0 ] || { echo "skip: network namespaces need root"; exit 77; }
command -v ip >/dev/null || { echo "FAIL: no ip (iproute2, make deps)"; exit 1; }
# Names unique to this process, so that concurrent runs do not meet; veth names <= 15 chars.
ns0=ddpdbg-n0-$$ ns1=ddpdbg-n1-$$ veth0=ddv0-$$ veth1=ddv1-$$
addr0=10.231.0.1 addr1=10.231.0.2
cleanup() {
    ip netns del "$ns0" 2>/dev/null # deleting a namespace deletes its end of the veth pair
    ip netns del "$ns1" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
if ! ip netns add "$ns0" 2>"$tmp/ip.err" || ! ip netns add "$ns1" 2>"$tmp/ip.err"; then
    echo "skip: cannot make a network namespace: $(head -1 "$tmp/ip.err")"; exit 77
fi
if ! ip link add "$veth0" netns "$ns0" type veth peer name "$veth1" netns "$ns1" \
    2>"$tmp/ip.err"; then
    echo "skip: cannot make a veth pair: $(head -1 "$tmp/ip.err")"; exit 77
fi
ip -n "$ns0" addr add "$addr0/24" dev "$veth0" &&
    ip -n "$ns1" addr add "$addr1/24" dev "$veth1" &&
    ip -n "$ns0" link set "$veth0" up && ip -n "$ns1" link set "$veth1" up &&
    ip -n "$ns0" link set lo up && ip -n "$ns1" link set lo up ||
    { echo "FAIL: configuring the veth pair"; exit 1; }
ip netns exec "$ns0" true 2>"$tmp/ip.err" ||
    { echo "skip: cannot enter a network namespace: $(head -1 "$tmp/ip.err")"; exit 77; }

"$train" synth out="$tmp/data" n=8 imgsz=96 classes=4 empty=0 seed=7 >/dev/null
args=(train model=rtdetr-tiny.yaml data="$tmp/data/data.yaml" imgsz=96 batch=1 epochs=1
    val=false)
port=29500 # the namespaces are new: nothing else listens in them

# node K TOKEN RDZV_TIMEOUT: starts node K's launcher in its namespace, in the background;
# output in $tmp/nodeK.{out,err}, pid in node_pid[K].
node() {
    local k=$1 token=$2 rdzv=$3 ns
    if [ "$k" = 0 ]; then ns=$ns0; else ns=$ns1; fi
    DDPDBG_RUN_TOKEN=$token timeout -k 5 120 \
        ip netns exec "$ns" "$ddpdbg" run --no-trace --nnodes 2 --node-rank "$k" --nproc-per-node 1 \
        --master-addr "$addr0" --master-port "$port" --no-tui -- "${args[@]}" \
        out="$tmp/out$k" rdzv_timeout="$rdzv" >"$tmp/node$k.out" 2>"$tmp/node$k.err" &
    node_pid[k]=$!
}
show() { for f in "$@"; do echo "  $f:"; sed 's/^/    /' "$f"; done; }

# ---- both nodes, one token: the run trains --------------------------------------------------
t0=$SECONDS
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
node 1 "$token" 30 # the later node first: rank 1 retries until rank 0's store is up
node 0 "$token" 30
wait "${node_pid[0]}"; rc0=$?
wait "${node_pid[1]}"; rc1=$?
echo "two nodes: $((SECONDS - t0)) s"
check "node 0 exits 0 (got $rc0)" [ $rc0 -eq 0 ]
check "node 1 exits 0 (got $rc1)" [ $rc1 -eq 0 ]
check "rank 0's epoch row" grep -q '^\[rank0\]: *1/1 .* 100% 3/3 \[' "$tmp/node0.out"
check "rank 0 completed the epoch" \
    grep -qx '\[rank0\]:1 epochs completed in .* hours\.' "$tmp/node0.out"
check "rank 0 wrote last.ckpt" [ -s "$tmp/out0/last.ckpt" ]
check "node 1 (rank 1) prints nothing" \
    [ "$(cat "$tmp/node1.out" "$tmp/node1.err" | wc -c)" -eq 0 ]
check "node 0: nothing on stderr" [ ! -s "$tmp/node0.err" ]
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || show "$tmp/node0.out" "$tmp/node0.err" "$tmp/node1.err"

# ---- node 1 with another token: refused by the store; node 0 times out naming rank 1 --------
t0=$SECONDS
node 0 "$token" 3
node 1 "${token%?}x" 3
wait "${node_pid[0]}"; rc0=$?
wait "${node_pid[1]}"; rc1=$?
echo "wrong token: $((SECONDS - t0)) s"
check "wrong token: node 1 exits 2 (got $rc1)" [ $rc1 -eq 2 ]
check "wrong token: node 0 exits 2 (got $rc0)" [ $rc0 -eq 2 ]
check "wrong token: rank 1 is refused" grep -qxF \
    "[rank1]:rank 1: store at $addr0:$port refused this process: wrong run token" "$tmp/node1.err"
check "wrong token: the store warns" grep -qxF \
    "[rank0]:warning: store $addr0:$port: refused a connection: wrong run token" "$tmp/node0.err"
check "wrong token: rank 0 names the missing rank" grep -qxF \
    "[rank0]:rank 0: rendezvous at $addr0:$port: ranks 1 of WORLD_SIZE=2 did not join within 3 s" \
    "$tmp/node0.err"
[ $rc0 -eq 2 ] && [ $rc1 -eq 2 ] || show "$tmp/node0.err" "$tmp/node1.err"
exit $fail
