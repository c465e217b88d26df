"""YOLOv3 pieces against hand-computed cases: target assignment, decoding, GIoU, loss, NMS output."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.vision.detection.yolov3 import (
    ANCHOR_MASKS,
    BOX_GAIN,
    CLS_GAIN,
    COCO_ANCHORS,
    OBJ_GAIN,
    STRIDES,
    YOLOv3,
    YOLOv3Config,
    aligned_giou,
    assign_targets,
    decode_level,
)

ANCHORS = torch.tensor(COCO_ANCHORS, dtype=torch.float32)
GRIDS_416 = [(13, 13), (26, 26), (52, 52)]


def _xyxy(cx: float, cy: float, w: float, h: float) -> list[float]:
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


@pytest.fixture(scope="module")
def model() -> YOLOv3:
    torch.manual_seed(0)
    return YOLOv3(YOLOv3Config(num_classes=2)).eval()


# -- target assignment ---------------------------------------------------------------------------
def test_assign_targets_best_anchor_scale_and_cell():
    # Image 0: a 116x90 box is exactly anchor 6 -> stride-32 scale, anchor 0 there, cell (3, 6).
    # Image 1: a 12x14 box: shape IoU 130/168 with (10, 13) beats 168/480 with (16, 30) -> stride 8.
    targets = [
        {"boxes": torch.tensor([_xyxy(100, 200, 116, 90)]), "labels": torch.tensor([5])},
        {"boxes": torch.tensor([_xyxy(50, 60, 12, 14)]), "labels": torch.tensor([7])},
    ]
    coarse, middle, fine = assign_targets(targets, ANCHORS, ANCHOR_MASKS, STRIDES, GRIDS_416)
    assert coarse["image"].tolist() == [0] and coarse["anchor"].tolist() == [0]
    assert (coarse["gx"].item(), coarse["gy"].item()) == (3, 6)
    torch.testing.assert_close(coarse["box"], torch.tensor([[100 / 32 - 3, 200 / 32 - 6, 116 / 32, 90 / 32]]))
    assert coarse["label"].tolist() == [5]
    assert middle["image"].numel() == 0
    assert fine["image"].tolist() == [1] and fine["anchor"].tolist() == [0]
    assert (fine["gx"].item(), fine["gy"].item()) == (6, 7)
    torch.testing.assert_close(fine["box"], torch.tensor([[0.25, 0.5, 1.5, 1.75]]))
    assert fine["label"].tolist() == [7]


def test_assign_targets_middle_scale_anchor_index_within_scale():
    # 62x45 is anchor 4 -> stride 16, index 1 of mask (3, 4, 5)
    targets = [{"boxes": torch.tensor([_xyxy(40, 24, 62, 45)]), "labels": torch.tensor([0])}]
    coarse, middle, fine = assign_targets(targets, ANCHORS, ANCHOR_MASKS, STRIDES, GRIDS_416)
    assert coarse["image"].numel() == 0 and fine["image"].numel() == 0
    assert middle["anchor"].tolist() == [1]
    assert (middle["gx"].item(), middle["gy"].item()) == (2, 1)
    torch.testing.assert_close(middle["box"][:, :2], torch.tensor([[0.5, 0.5]]))


# -- decoding ------------------------------------------------------------------------------------
def test_decode_level_hand_computed():
    raw = torch.zeros(1, 3, 2, 2, 7)  # 2 classes
    raw[0, 0, 0, 1, 0] = math.log(3.0)  # sigmoid -> 0.75
    raw[0, 0, 0, 1, 2] = math.log(2.0)  # width doubles
    raw[0, 0, 0, 1, 4] = 20.0  # objectness ~ 1
    anchors = ANCHORS[list(ANCHOR_MASKS[0])]  # (116, 90), (156, 198), (373, 326)
    boxes, objectness, class_probs = decode_level(raw, anchors, 32)
    assert boxes.shape == (1, 12, 4) and objectness.shape == (1, 12) and class_probs.shape == (1, 12, 2)
    # anchor 0, cell (y=0, x=1) is flat index 1: centre ((0.75 + 1) * 32, 0.5 * 32), size (232, 90)
    torch.testing.assert_close(boxes[0, 1], torch.tensor([56.0 - 116, 16.0 - 45, 56.0 + 116, 16.0 + 45]))
    # anchor 1, cell (y=1, x=0) is flat index 4 + 2 = 6: centre (16, 48), size (156, 198)
    torch.testing.assert_close(boxes[0, 6], torch.tensor([16.0 - 78, 48.0 - 99, 16.0 + 78, 48.0 + 99]))
    assert objectness[0, 1].item() == pytest.approx(1.0, abs=1e-6)
    assert objectness[0, 0].item() == 0.5 and class_probs[0, 0].tolist() == [0.5, 0.5]


def test_decode_level_clamps_huge_sizes():
    raw = torch.zeros(1, 3, 1, 1, 6)
    raw[..., 2:4] = 1e4
    boxes, _, _ = decode_level(raw, ANCHORS[:3], 8)
    assert torch.isfinite(boxes).all()


# -- loss ----------------------------------------------------------------------------------------
def testaligned_giou_hand_computed():
    same = torch.tensor([[1.0, 1.0, 2.0, 2.0]])
    assert aligned_giou(same, same).item() == pytest.approx(1.0, abs=1e-6)
    touching = aligned_giou(torch.tensor([[0.5, 0.5, 1.0, 1.0]]), torch.tensor([[1.5, 0.5, 1.0, 1.0]]))
    assert touching.item() == pytest.approx(0.0, abs=1e-6)  # no overlap, hull == union
    # [-1, 1]^2 vs [0, 2]^2: inter 1, union 7, hull 9
    overlap = aligned_giou(torch.tensor([[0.0, 0.0, 2.0, 2.0]]), torch.tensor([[1.0, 1.0, 2.0, 2.0]]))
    assert overlap.item() == pytest.approx(1 / 7 - 2 / 9, abs=1e-6)


def test_losses_on_zero_logits_hand_computed(model: YOLOv3):
    # Zero logits: every BCE term is log 2; the predicted box is the anchor centred in its cell.
    outputs = [torch.zeros(1, 3, h, w, 7, requires_grad=True) for h, w in GRIDS_416]
    targets = [{"boxes": torch.tensor([_xyxy(100, 200, 116, 90)]), "labels": torch.tensor([1])}]
    losses = model.losses(outputs, targets)
    assert losses["loss_obj"].item() == pytest.approx(OBJ_GAIN * 3 * math.log(2), rel=1e-5)
    assert losses["loss_cls"].item() == pytest.approx(CLS_GAIN * math.log(2), rel=1e-5)
    w, h, dx, dy = 116 / 32, 90 / 32, 0.5 - 0.125, 0.5 - 0.25
    inter = (w - dx) * (h - dy)
    union = 2 * w * h - inter
    hull = (w + dx) * (h + dy)
    expected_giou = inter / union - (hull - union) / hull
    assert losses["loss_box"].item() == pytest.approx(BOX_GAIN * (1 - expected_giou), rel=1e-5)
    sum(losses.values()).backward()
    assert outputs[0].grad[0, 0, 6, 3].abs().sum() > 0  # the matched anchor gets box/class gradient


# -- inference -----------------------------------------------------------------------------------
def test_detect_thresholds_and_suppresses_per_class(model: YOLOv3):
    outputs = [torch.full((1, 3, h, w, 7), -20.0) for h, w in [(2, 2), (4, 4), (8, 8)]]
    fine = outputs[2]  # stride 8, anchors (10, 13), (16, 30), (33, 23)
    fine[0, 0, 2, 2, :4] = 0.0  # centre (20, 20), 10x13
    fine[0, 0, 2, 2, 4], fine[0, 0, 2, 2, 5] = 5.0, 5.0  # class 0, high score
    fine[0, 1, 2, 2, :4] = 0.0  # same centre, 16x30: IoU 130/480 < 0.6, survives NMS
    fine[0, 1, 2, 2, 4], fine[0, 1, 2, 2, 5] = 4.0, 4.0
    fine[0, 0, 2, 2, 6] = 4.0  # same box as the first, class 1: other class, kept
    fine[0, 2, 5, 5, :4] = 0.0
    fine[0, 2, 5, 5, 4], fine[0, 2, 5, 5, 5] = 5.0, 5.0  # centre (44, 44), 33x23
    fine[0, 2, 5, 6, 1:4] = 0.0  # neighbour with tx = -20: centre (48, 44), IoU 29/37 with the previous
    fine[0, 2, 5, 6, 4], fine[0, 2, 5, 6, 5] = 3.0, 3.0  # duplicate of the previous, lower: suppressed
    (det,) = model.detect(outputs, [(64, 64)])
    assert set(det) == {"boxes", "scores", "labels"}
    assert det["boxes"].dtype == torch.float32 and det["labels"].dtype == torch.int64
    assert det["scores"].tolist() == sorted(det["scores"].tolist(), reverse=True)
    assert len(det["boxes"]) == 4
    s = lambda x: 1 / (1 + math.exp(-x))
    torch.testing.assert_close(det["scores"], torch.tensor([s(5) ** 2, s(5) ** 2, s(5) * s(4), s(4) ** 2]))
    assert sorted(det["labels"].tolist()) == [0, 0, 0, 1]
    torch.testing.assert_close(det["boxes"][det["labels"] == 1], torch.tensor([[15.0, 13.5, 25.0, 26.5]]))


def test_detect_clips_to_image_size(model: YOLOv3):
    outputs = [torch.full((1, 3, h, w, 7), -20.0) for h, w in [(2, 2), (4, 4), (8, 8)]]
    outputs[0][0, 2, 0, 0, :4] = 0.0  # a 373x326 anchor at (16, 16)
    outputs[0][0, 2, 0, 0, 4:6] = 5.0
    (det,) = model.detect(outputs, [(64, 48)])
    torch.testing.assert_close(det["boxes"], torch.tensor([[0.0, 0.0, 48.0, 64.0]]))


def test_smoke_eval_output_format():
    w = torchgauge.create("yolov3_416", mode="eval", size="smoke", batch_size=1)
    (det,) = w.step()
    assert det["boxes"].shape[1] == 4 and len(det["boxes"]) <= YOLOv3Config().detections_per_image
    assert ((det["labels"] >= 0) & (det["labels"] < 80)).all()
    height, width = w.inputs[1][0]
    assert (det["boxes"][:, 2] <= width).all() and (det["boxes"][:, 3] <= height).all()


def test_bad_image_size_is_rejected():
    with pytest.raises(ValueError, match="multiple of 32"):
        torchgauge.create("yolov3_416", mode="eval", size="smoke", image_size=100)
    with pytest.raises(ValueError, match="positive multiple of 32"):
        torchgauge.create("yolov3_416", mode="eval", size="smoke", image_size=-32)
