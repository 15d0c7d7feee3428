"""detect_model.py -- a small detection-style model for the attach tests (tests/cli/attach*.sh):
a convolutional backbone with a BatchNorm (buffers, so DDP broadcasts them each forward), a
class head that always reaches the loss, and a box head that reaches it only when the batch has
ground-truth boxes -- the mechanism of the field report (../shared/docs/seed-report.txt): a rank
whose batch holds no box leaves the box head without gradients. Batches are Ultralytics-style
dicts (img, batch_idx, cls, bboxes) passed to the model's forward, which returns the loss as
Ultralytics' DetectionModel does.
"""
import torch
import torch.nn as nn


class TinyDetector(nn.Module):
    def __init__(self, nc=3, width=8):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, 2, 1), nn.ReLU())
        self.cls_head = nn.Conv2d(2 * width, nc, 1)
        self.box_head = nn.Sequential(nn.Conv2d(2 * width, 2 * width, 1), nn.ReLU(),
                                      nn.Conv2d(2 * width, 4, 1))

    def forward(self, batch):
        feats = self.backbone(batch["img"])
        cls = self.cls_head(feats)  # B x nc x h x w
        b = batch["img"].shape[0]
        target = torch.zeros_like(cls)
        for k, c in zip(batch["batch_idx"].long().tolist(), batch["cls"].long().tolist()):
            target[k, c] = 1.0
        loss = nn.functional.binary_cross_entropy_with_logits(cls, target)
        if batch["batch_idx"].numel() > 0:  # the box loss exists only when there are boxes
            boxes = self.box_head(feats).mean(dim=(2, 3))  # B x 4
            picked = boxes[batch["batch_idx"].long()]
            loss = loss + nn.functional.l1_loss(picked.sigmoid(), batch["bboxes"])
        return loss * b


def make_batch(rank, it, n_images=2, boxes_per_image=2, size=32, nc=3):
    """A deterministic batch for (rank, iteration): n_images images, boxes_per_image each."""
    g = torch.Generator().manual_seed(1000 * rank + it)
    img = torch.rand(n_images, 3, size, size, generator=g)
    idx = torch.arange(n_images).repeat_interleave(boxes_per_image).float()
    n = idx.numel()
    return {"img": img, "batch_idx": idx,
            "cls": torch.randint(0, nc, (n,), generator=g).float(),
            "bboxes": torch.rand(n, 4, generator=g),
            "im_file": ["r%d_i%d_%d.jpg" % (rank, it, k) for k in range(n_images)]}
