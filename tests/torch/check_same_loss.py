"""check_same_loss.py DIR [DIR...] -- repeats in PyTorch the training step that
`ddpdbg-train dump ... out=DIR` ran in our C trainer, and says whether it is the same step.
check_same_loss.py perturb IN.ckpt OUT.ckpt SEED -- writes IN's weights with seeded noise
added, for `ddpdbg-train dump weights=OUT.ckpt`.

Why perturb: at initialisation every box head's last layer is zero, so every decoder layer's
reference box is its anchor (or the previous layer's box) up to rounding, and deformable
attention samples exactly on pixel centres, where the bilinear gradient with respect to the
sampling location jumps; C and torch round to different sides, and the gradients of the
sampling offsets (and everything upstream of them) then differ by design, not by a bug.
Noise of 10 % of each tensor's spread (0.02 for a constant tensor) moves the step off those
points, as training does.

The comparison:
- the weights and buffers come from DIR/model.ckpt (ddpdbg_files.read_checkpoint), whose
  layout must name exactly the PyTorch model's parameters, then its buffers, in order;
- the batch (images, classes, boxes) and the denoising group's noisy rows come from
  DIR/step.bin, so both sides draw nothing;
- every one of the 12 loss terms must agree within LOSS_RTOL (relative) + LOSS_ATOL;
- the same parameters must have a gradient (ours: a grad/<i> array; PyTorch: grad is not
  None);
- every gradient tensor must agree: |ours - torch| / (|torch| + FLOOR x the largest |torch|
  of the model), L2 norms, at most HEAD_TOL for the layers whose outputs are the loss's
  inputs (the score heads and the last layer of every box head: their gradients are the
  loss's gradient times forward features, with no kink in between) and BODY_TOL for the rest.

Why two tolerances: both sides compute in float32 with different summation orders, and the
rest of the network is full of kinks (ReLU, max pooling) whose side a rounding difference can
flip, most of all over the flat regions of synthetic images. One hidden unit of a box head's
MLP whose pre-activation is 6e-7 moves that layer's gradient by 3e-3; perturbing torch's own
input by 1e-7 of its value moves its gradient by up to 6e-4 (L2, relative), by 1e-6 up to
2e-2 (a background batch at 96 px): the spread is the step's own sensitivity, not a
difference of method. Measured ours-vs-torch worst cases: loss terms 6e-6; the loss's input
layers 2e-5; the rest 2.5e-2 (stem and first HGBlock of a background batch). The FLOOR takes in the
tensors whose gradient is zero in exact arithmetic (the bias of a norm whose output a 1x1
conv feeds into a BatchNorm, which removes any per-channel constant): rounding noise on both
sides. Discrete choices (top-k query selection, Hungarian matching) agree only when no two
candidates tie within rounding: the tolerances cover rounding, not a different choice.
Prints one line per DIR and the worst figures; exit 0 when every DIR agrees, 1 otherwise
(naming the first disagreeing term or tensor), 2 on unreadable input.
"""
import os
import sys

import torch

import ddpdbg_files
import rtdetr_loss
import rtdetr_torch

LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-6
HEAD_TOL, BODY_TOL, FLOOR = 1e-3, 5e-2, 1e-3


def loss_input_params(model):
    """The parameters of the layers whose outputs the loss reads: every score head and the
    last Linear of every box head."""
    head = model.model[-1]
    layers = [head.enc_score_head, *head.dec_score_head,
              *[mlp.layers[-1] for mlp in [head.enc_bbox_head, *head.dec_bbox_head]]]
    return {id(p) for layer in layers for p in layer.parameters()}


def step_batch(arrays):
    """Ultralytics' batch dict of a dump, with its denoising rows as dn_noise."""
    counts = arrays["counts"].to(torch.long)
    batch = {"img": arrays["images"],
             "batch_idx": torch.repeat_interleave(torch.arange(len(counts)), counts),
             "cls": arrays["cls"].to(torch.long), "bboxes": arrays["bboxes"].view(-1, 4)}
    if "dn_cls" in arrays:
        batch["dn_noise"] = (arrays["dn_cls"].to(torch.long), arrays["dn_box_logits"])
    return batch


def check_dir(folder):
    """(ok, message) for one dump folder."""
    model_name, nc, state = ddpdbg_files.read_checkpoint(os.path.join(folder, "model.ckpt"))
    arrays = ddpdbg_files.read_arrays(os.path.join(folder, "step.bin"))
    model = rtdetr_torch.build_model(model_name, nc=nc)
    ours_names = list(state)  # parameters, then buffers
    torch_names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    if ours_names != torch_names:
        first = next((a, b) for a, b in zip(ours_names + [None], torch_names + [None]) if a != b)
        return False, "state dict differs at %s (ours) vs %s (torch)" % first
    model.load_state_dict(state)
    model.train()
    terms = model.loss_terms(step_batch(arrays))
    sum(terms.values()).backward()

    ours_loss = arrays["loss"]
    worst_loss = 0.0
    for k, key in enumerate(rtdetr_loss.KEYS):
        mine, theirs = terms[key].item(), ours_loss[k].item()
        err = abs(mine - theirs)
        worst_loss = max(worst_loss, err / max(abs(mine), 1e-12))
        if err > LOSS_RTOL * abs(mine) + LOSS_ATOL:
            return False, "%s: ours %.8g, torch %.8g" % (key, theirs, mine)

    worst = {HEAD_TOL: 0.0, BODY_TOL: 0.0}
    grads = []
    for i, (name, p) in enumerate(model.named_parameters()):
        theirs = arrays.get("grad/%d" % i)
        if (theirs is None) != (p.grad is None):
            return False, "%s: %s gradient in ours, %s in torch" % (
                name, "no" if theirs is None else "a", "none" if p.grad is None else "one")
        if theirs is not None:
            grads.append((name, theirs, p.grad, id(p)))
    floor = FLOOR * max(g.norm().item() for _, _, g, _ in grads)
    heads = loss_input_params(model)
    for name, theirs, mine, key in grads:
        tol = HEAD_TOL if key in heads else BODY_TOL
        err = (theirs - mine).norm().item() / (mine.norm().item() + floor)
        worst[tol] = max(worst[tol], err)
        if err > tol:
            return False, "%s: gradients differ by %.3g of their norm %.3g (tolerance %g)" % (
                name, err, mine.norm().item(), tol)
    n_params = len(list(model.parameters()))
    return True, ("%s: %d images, %d boxes, loss %.6g, 12 terms within %.2g, %d of %d parameters "
                  "with a gradient, loss input layers within %.2g, the rest within %.2g" % (
                      model_name, arrays["images"].shape[0], len(arrays["cls"]),
                      sum(terms.values()).item(), worst_loss, len(grads), n_params,
                      worst[HEAD_TOL], worst[BODY_TOL]))


def perturb(src, dst, seed):
    """dst: src's weights plus seeded Gaussian noise, 0.1 x each tensor's std (0.02 when the
    tensor is constant); buffers unchanged."""
    model_name, nc, state = ddpdbg_files.read_checkpoint(src)
    model = rtdetr_torch.build_model(model_name, nc=nc)
    model.load_state_dict(state)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            spread = p.std().item() if p.numel() > 1 else 0.0
            p.add_(torch.randn(p.shape, generator=g) * (0.1 * spread if spread > 0 else 0.02))
    ddpdbg_files.write_checkpoint(dst, model_name, nc, model)
    print("perturbed %s -> %s (seed %d)" % (src, dst, seed))


def main(folders):
    torch.set_num_threads(1)
    ok_all = True
    for folder in folders:
        try:
            ok, message = check_dir(folder)
        except (OSError, ValueError) as e:
            print("check_same_loss: %s" % e, file=sys.stderr)
            return 2
        print("%s %s: %s" % ("SAME" if ok else "DIFFERENT", folder, message))
        ok_all = ok_all and ok
    return 0 if ok_all else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "perturb":
        perturb(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    if len(sys.argv) < 2:
        print("usage: check_same_loss.py DIR [DIR...]  (folders written by ddpdbg-train dump)",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
