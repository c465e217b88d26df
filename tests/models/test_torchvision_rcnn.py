"""vision_maskrcnn is TorchBench's step: torchvision's transform and post-processing inside the model.

TorchBench calls ``model(images)`` on a raw COCO image: the model normalises, resizes (short side
800, long side <= 1333, torchvision's float arithmetic and flooring), zero-pads to multiples of
32, and maps detections back to the original size, pasting each mask with torchvision's rule.
Random weights would leave no detection over torchvision's 0.05 score threshold, so the class
scores start from a prior that keeps two classes over it (``init_detecting_prior``).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torchgauge
from torchgauge.models.vision.detection.torchvision_rcnn import (
    PRIOR_BACKGROUND,
    PRIOR_PRESENT,
    GeneralizedRCNNTransform,
    TransformConfig,
    init_detecting_prior,
    paste_masks_in_image,
    resized_size,
)


def test_resized_size_follows_torchvision_floats_and_floors() -> None:
    assert resized_size((480, 640), 800.0, 1333.0) == (800, 1066)  # 640 * 5/3 = 1066.67, floored
    assert resized_size((427, 640), 800.0, 1333.0) == (800, 1199)
    assert resized_size((640, 480), 800.0, 1333.0) == (1066, 800)
    assert resized_size((300, 1000), 800.0, 1333.0) == (399, 1333)  # long side capped; 399.9 floored


def test_transform_normalises_resizes_pads_and_resizes_targets() -> None:
    transform = GeneralizedRCNNTransform(TransformConfig()).eval()
    image = torch.full((3, 480, 640), 0.5)
    batch, sizes, targets = transform([image])
    assert batch.shape == (1, 3, 800, 1088) and sizes == [(800, 1066)] and targets is None
    mean, std = torch.tensor(TransformConfig.image_mean), torch.tensor(TransformConfig.image_std)
    assert torch.allclose(batch[0, :, 400, 500], (0.5 - mean) / std)
    assert batch[0, :, :, 1066:].abs().max() == 0  # zero padding after normalising, as torchvision
    masks = torch.zeros(1, 480, 640, dtype=torch.uint8)
    masks[0, 120:240, 160:320] = 1
    target = {"boxes": torch.tensor([[160.0, 120.0, 320.0, 240.0]]), "labels": torch.tensor([3]), "masks": masks}
    transform.train()
    _, _, (resized,) = transform([image], [target])
    assert torch.allclose(resized["boxes"], torch.tensor([[160 * 1066 / 640, 200.0, 320 * 1066 / 640, 400.0]]))
    assert resized["masks"].shape == (1, 800, 1066) and resized["masks"].dtype == torch.uint8
    assert resized["masks"][0, 300, 400] == 1 and resized["masks"][0, 100, 100] == 0
    assert target["masks"] is masks  # the caller's targets are not modified


def test_paste_masks_in_image_follows_torchvision() -> None:
    masks = torch.ones(1, 1, 4, 4)
    pasted = paste_masks_in_image(masks, torch.tensor([[2.0, 1.0, 6.0, 5.0]]), (8, 10))
    # padded to 6 x 6 (zero border), box grown by 6/4 about its centre (4, 3) to (1, 0, 7, 6),
    # resized to 7 x 7 and copied to rows 0..6, columns 1..7
    expected = torch.zeros(8, 10)
    expected[0:7, 1:8] = F.interpolate(F.pad(masks, (1, 1, 1, 1)), size=(7, 7), mode="bilinear")[0, 0]
    assert pasted.shape == (1, 1, 8, 10) and torch.equal(pasted[0, 0], expected)
    # a box over the image's corner is clipped, not shifted
    corner = paste_masks_in_image(masks, torch.tensor([[-2.0, -2.0, 2.0, 2.0]]), (8, 10))
    grown = F.interpolate(F.pad(masks, (1, 1, 1, 1)), size=(7, 7), mode="bilinear")[0, 0]  # box (-3, -3, 3, 3)
    assert torch.equal(corner[0, 0, :4, :4], grown[3:, 3:]) and corner[0, 0, 4:].abs().max() == 0
    assert paste_masks_in_image(torch.zeros(0, 1, 4, 4), torch.zeros(0, 4), (8, 10)).shape == (0, 1, 8, 10)


def test_detecting_prior_puts_two_classes_over_the_score_threshold() -> None:
    layer = torch.nn.Linear(8, 91)
    present = init_detecting_prior(layer, torch.Generator().manual_seed(0))
    probs = F.softmax(layer.bias, dim=0)
    assert len(present) == 2 and 0 not in present
    assert probs[0].item() == pytest.approx(PRIOR_BACKGROUND) and probs[present].tolist() == pytest.approx(
        [PRIOR_PRESENT] * 2
    )
    assert (probs > 0.05).nonzero().squeeze(1).tolist() == [0, *present]


def _hooked_step(workload) -> tuple[list, object]:
    calls = []
    handle = workload.module.transform.register_forward_hook(lambda mod, args, out: calls.append((args, out)))
    try:
        out = workload.step()
    finally:
        handle.remove()
    return calls, out


def test_smoke_eval_transforms_the_raw_image_inside_the_step() -> None:
    w = torchgauge.create("vision_maskrcnn", mode="eval", size="smoke")
    ((image,),) = w.inputs
    assert image.shape == (3, 96, 120) and image.dtype == torch.float32 and 0 <= image.min() <= image.max() <= 1
    calls, (detection,) = _hooked_step(w)
    ((args, (batch, sizes, _)),) = calls  # the transform ran once, in the step, on the raw image
    assert args[0][0] is image and batch.shape == (1, 3, 128, 160) and sizes == [(128, 160)]
    cfg = w.module.cfg
    assert (cfg.score_thresh, cfg.nms_thresh, cfg.detections_per_image) == (0.05, 0.5, 10)  # smoke cap 10
    assert len(detection["boxes"]) == 10  # detections survive torchvision's threshold
    assert detection["masks"].shape == (10, 1, 96, 120) and detection["masks"].dtype == torch.float32
    assert detection["boxes"][:, 2].max() <= 120 and (detection["scores"] > 0.05).all()


def test_smoke_train_transforms_image_and_targets_inside_the_step() -> None:
    w = torchgauge.create("vision_maskrcnn", mode="train", size="smoke")
    (target,) = w.targets
    assert target["masks"].shape[1:] == (96, 120) and target["masks"].dtype == torch.uint8
    calls, loss = _hooked_step(w)
    ((_, (batch, sizes, (resized,))),) = calls
    assert batch.shape == (1, 3, 128, 160) and resized["masks"].shape[1:] == (128, 160)
    assert torch.isfinite(loss)
    assert w.optimizer.defaults["lr"] == 0.02 and w.optimizer.defaults["momentum"] == 0.9  # TorchBench's SGD


@pytest.mark.slow
def test_full_size_eval_keeps_torchvision_settings_and_a_hundred_detections() -> None:
    w = torchgauge.create("vision_maskrcnn", mode="eval", size="full")
    ((image,),) = w.inputs
    assert image.shape == (3, 480, 640)
    cfg, transform = w.module.cfg, w.module.transform.cfg
    assert (transform.min_size, transform.max_size, transform.size_divisible) == ((800,), 1333, 32)
    assert (cfg.score_thresh, cfg.nms_thresh, cfg.detections_per_image, cfg.rpn_post_nms_topk) == (
        0.05,
        0.5,
        100,
        (2000, 1000),
    )
    calls, (detection,) = _hooked_step(w)
    ((_, (batch, sizes, _)),) = calls
    assert batch.shape == (1, 3, 800, 1088) and sizes == [(800, 1066)]
    # two classes over the threshold on each of ~1000 proposals: NMS leaves more than the cap
    assert len(detection["boxes"]) == 100 and len(set(detection["labels"].tolist())) == 2
    assert detection["masks"].shape == (100, 1, 480, 640)
    assert math.isclose(detection["scores"].mean().item(), PRIOR_PRESENT, rel_tol=0.1)
