# rtdetr_hooks.py -- writes rtdetr-l.hooks.txt: the order in which PyTorch fires the 575
# AccumulateGrad hooks (what DDP's reducer listens to) in one training-mode backward of rtdetr-l
# at 160 px, batch 1, with the fixed 8-query denoising group of tests/test_model.c's dn_hook and
# its loss (seeded weighted sums of the four head outputs). The model is our PyTorch rendering
# (tests/torch/rtdetr_torch.py, built from trainer/models/rtdetr-l.yaml; Ultralytics is neither
# used nor needed), whose forward performs the operations of /work/shared/docs/rtdetr.md in
# Ultralytics' order: PyTorch orders the backward by node creation. Only the graph's structure
# matters here (which ops, in which order), not the values. Needs Debian's python3-torch (1.13)
# and python3-yaml; run from the repository root:
#   /usr/bin/python3 tests/golden/params/rtdetr_hooks.py > tests/golden/params/rtdetr-l.hooks.txt
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torch"))
import rtdetr_loss  # noqa: E402 (tests/torch, put on the path above)
import rtdetr_torch  # noqa: E402

PARAMS_PATH = "tests/golden/params/rtdetr-l.params.txt"
IMAGE_SIZE = 160
DN_QUERIES = 8      # tests/test_model.c DN_N: two mask groups of 4 slots
DN_GROUP_SLOTS = 4


def fixed_dn_group(targets, nc, nq, class_embed, *unused_args):
    """tests/test_model.c's dn_hook in get_cdn_group's place: classes (i*7) % nc, box logits
    (i%5)*0.3-0.6, and the mask (True = blocked) where matching queries see no dn slot and
    each dn group of 4 slots sees only itself and the matching queries."""
    classes = torch.tensor([(i * 7) % nc for i in range(DN_QUERIES)])
    embed = class_embed[classes].reshape(1, DN_QUERIES, class_embed.shape[1])
    box_logits = torch.tensor([(i % 5) * 0.3 - 0.6 for i in range(DN_QUERIES * 4)]).view(1, DN_QUERIES, 4)
    size = DN_QUERIES + nq
    row = torch.arange(size)[:, None]
    col = torch.arange(size)[None, :]
    mask = (col < DN_QUERIES) & ((row >= DN_QUERIES) | (row // DN_GROUP_SLOTS != col // DN_GROUP_SLOTS))
    return rtdetr_loss.DnGroup(embed, box_logits, mask, None, 1, [DN_QUERIES, nq])


def check_params(root):
    """The parameter list must be rtdetr-l.params.txt line by line: the hook indices are
    positions in it."""
    expected = [line.split()[1:] for line in open(PARAMS_PATH) if not line.startswith("total")]
    actual = [[name, "x".join(map(str, p.shape))] for name, p in root.named_parameters()]
    assert len(actual) == 575 and actual == expected, "parameters differ from " + PARAMS_PATH


def weighted_sum(t, seed):
    weight = torch.rand(t.shape, generator=torch.Generator().manual_seed(seed)) * 0.02 - 0.01
    return (t * weight).sum()


def main():
    torch.manual_seed(0)
    root = rtdetr_torch.build_model("rtdetr-l")
    root.train()
    check_params(root)
    rtdetr_loss.get_cdn_group = fixed_dn_group  # what RTDETRDecoder.forward calls
    params = list(root.parameters())
    order = []
    # The AccumulateGrad node of p is the next function of any view of p; DDP holds these
    # objects too (their hooks vanish if the node is freed).
    grad_accumulators = []
    for index, p in enumerate(params):
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
        accumulator.register_hook(lambda *unused, index=index: order.append(index))
        grad_accumulators.append(accumulator)
    image = torch.rand(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    no_boxes = {"cls": torch.zeros(0, dtype=torch.long), "bboxes": torch.zeros(0, 4),
                "batch_idx": torch.zeros(0, dtype=torch.long), "gt_groups": [0], "dn_noise": None}
    (outputs, _) = root.predict(image, no_boxes)  # dec boxes, dec logits, enc boxes, enc scores
    loss = None
    for seed, t in enumerate(outputs, start=1):
        term = weighted_sum(t, seed)
        loss = term if loss is None else loss + term
    loss.backward()
    assert sorted(order) == list(range(len(params)))
    print("# rtdetr-l training backward, %d px, batch 1, %d denoising queries: parameter indices in"
          % (IMAGE_SIZE, DN_QUERIES))
    print("# AccumulateGrad hook order, from tests/golden/params/rtdetr_hooks.py (torch %s)"
          % torch.__version__)
    print(" ".join(map(str, order)))


if __name__ == "__main__":
    main()
