#!/usr/bin/env bash
# params.sh TRAIN -- `TRAIN params model=M` prints, byte for byte, the parameter listing of
# PyTorch's Ultralytics models (tests/golden/params/, copies of ../shared/reference, which is
# also compared when present); nc=K changes only the nc-dependent shapes; rtdetr-tiny keeps
# the rtdetr-l name structure under 2 M parameters.
set -u
train=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # message, condition...
    local msg=$1; shift
    if ! "$@"; then echo "FAIL: $msg"; fail=1; fi
}

for c in l x resnet50 resnet101; do
    out=$tmp/rtdetr-$c.txt
    check "params model=rtdetr-$c.yaml exits 0" "$train" params model=rtdetr-$c.yaml >"$out"
    check "rtdetr-$c listing equals tests/golden/params" \
        diff -u tests/golden/params/rtdetr-$c.params.txt "$out"
    ref=$root/../shared/reference/rtdetr-$c.params.txt
    [ -e "$ref" ] && check "rtdetr-$c listing equals $ref" cmp -s "$ref" "$out"
done

# A yaml read from disk gives the same listing as the built-in copy.
"$train" params model=trainer/models/rtdetr-l.yaml >"$tmp/disk.txt"
check "rtdetr-l from disk equals built-in" cmp -s "$tmp/disk.txt" "$tmp/rtdetr-l.txt"

# nc=5: the nc-dependent part is 2055 parameters per class (rtdetr.md section 6).
"$train" params model=rtdetr-x.yaml nc=5 >"$tmp/x5.txt"
check "rtdetr-x nc=5 total" grep -qx 'total 725 tensors 67313727 parameters' "$tmp/x5.txt"
check "rtdetr-x nc=5 score head" grep -qx '669 model.32.enc_score_head.weight 5x256' "$tmp/x5.txt"

"$train" params model=rtdetr-tiny.yaml >"$tmp/tiny.txt"
total=$(awk '/^total/ {print $4}' "$tmp/tiny.txt")
check "rtdetr-tiny has at most 2M parameters (got $total)" test "${total:-99999999}" -le 2000000
for name in 'model.0.stem1.conv.weight' 'model.5.m.0.conv1.conv.weight' \
    'model.10.ma.in_proj_weight' 'model.15.m.1.conv1.conv.weight' \
    'model.27.decoder.layers.2.cross_attn.sampling_offsets.weight' \
    'model.27.denoising_class_embed.weight' 'model.27.enc_bbox_head.layers.2.bias' \
    'model.27.dec_bbox_head.2.layers.2.weight' 'model.27.dec_score_head.2.bias'; do
    check "rtdetr-tiny has $name" grep -q " $name " "$tmp/tiny.txt"
done
exit $fail
