"""One-stage detectors (RetinaNet, FCOS, EfficientDet): losses, target assignment and fusion on hand-computed cases."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

import torchgauge
from torchgauge.models.vision.detection.boxes import LinearBoxCoder, generalized_box_iou
from torchgauge.models.vision.detection.dense_heads import dense_detections, flatten_level, one_hot_targets, prior_bias
from torchgauge.models.vision.detection.efficientdet import (
    BIFPN_NODES,
    EfficientDet,
    EfficientDetConfig,
    FusionNode,
    anchor_labels,
    fast_normalized_fusion,
    fusion_weights,
)
from torchgauge.models.vision.detection.fcos import centerness_targets, match_points
from torchgauge.models.vision.detection.losses import giou_loss, sigmoid_focal_loss
from torchgauge.models.vision.detection.retinanet import RetinaNet, RetinaNetConfig
from torchgauge.models.vision.detection.tf_efficientnet import Conv2dSame, pad_same

LN2 = math.log(2.0)


# -- focal loss ---------------------------------------------------------------------------------
def test_focal_loss_hand_computed():
    logits = torch.tensor([0.0, 0.0, math.log(3.0)])  # p = 0.5, 0.5, 0.75
    targets = torch.tensor([1.0, 0.0, 1.0])
    # alpha_t * (1 - p_t)**2 * -log(p_t): 0.25 * 0.25 * ln2, 0.75 * 0.25 * ln2, 0.25 * 0.0625 * ln(4/3)
    expected = torch.tensor([0.0625 * LN2, 0.1875 * LN2, 0.015625 * math.log(4 / 3)])
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets), expected)
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets, reduction="sum"), expected.sum())
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets, reduction="mean"), expected.mean())


def test_focal_loss_without_focusing_is_bce():
    logits, targets = torch.tensor([-2.0, 0.5, 3.0]), torch.tensor([0.0, 1.0, 0.0])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets, alpha=-1, gamma=0.0), bce)


def test_focal_loss_rejects_unknown_reduction():
    with pytest.raises(ValueError, match="unknown reduction 'avg'"):
        sigmoid_focal_loss(torch.zeros(1), torch.ones(1), reduction="avg")


# -- GIoU and the linear box coder --------------------------------------------------------------
def test_generalized_box_iou_hand_computed():
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 1.0, 1.0]])
    b = torch.tensor([[1.0, 1.0, 3.0, 3.0], [2.0, 0.0, 3.0, 1.0], [0.0, 0.0, 2.0, 2.0]])
    # (a0, b0): IoU 1/7, hull 9, union 7; (a1, b1): disjoint, hull 3, union 2; (a0, b2) identical.
    # (a0, b1): IoU 0, hull 3*2 = 6, union 5; (a1, b0): IoU 0, hull 9, union 5; (a1, b2): IoU 1/4, hull 4.
    expected = torch.tensor([[1 / 7 - 2 / 9, -1 / 6, 1.0], [-4 / 9, -1 / 3, 0.25]])
    torch.testing.assert_close(generalized_box_iou(a, b), expected)
    paired = generalized_box_iou(a, b[:2], pairwise=False)
    torch.testing.assert_close(paired, torch.stack((expected[0, 0], expected[1, 1])))
    torch.testing.assert_close(giou_loss(a, b[:2]), 1 - paired)


def test_generalized_box_iou_paired_shape_mismatch():
    with pytest.raises(ValueError, match="paired GIoU needs equal shapes"):
        generalized_box_iou(torch.zeros(2, 4), torch.zeros(3, 4), pairwise=False)


def test_linear_box_coder_hand_computed_and_round_trip():
    coder = LinearBoxCoder(normalize_by_size=True)
    reference = torch.tensor([[0.0, 0.0, 8.0, 8.0]])  # point (4, 4), stride 8
    target = torch.tensor([[2.0, 0.0, 10.0, 12.0]])
    deltas = coder.encode(reference, target)
    torch.testing.assert_close(deltas, torch.tensor([[0.25, 0.5, 0.75, 1.0]]))
    torch.testing.assert_close(coder.decode(deltas, reference), target)
    # Negative distances decode to an empty box on the point, never an inverted one.
    torch.testing.assert_close(coder.decode(-deltas, reference), torch.tensor([[4.0, 4.0, 4.0, 4.0]]))


# -- FCOS target assignment ---------------------------------------------------------------------
def _point_anchors(points: list[tuple[float, float]], stride: float) -> torch.Tensor:
    return torch.tensor([[x - stride / 2, y - stride / 2, x + stride / 2, y + stride / 2] for x, y in points])


def test_fcos_match_points_hand_made_case():
    # Level 0 (stride 8, ranges 0..64) and level 1 (stride 16, 64..inf, the coarsest).
    anchors = torch.cat(
        (_point_anchors([(4, 4), (12, 4), (28, 28), (76, 76)], 8), _point_anchors([(8, 8), (80, 80)], 16))
    )
    gt = torch.tensor([[0.0, 0.0, 16.0, 16.0], [0.0, 0.0, 160.0, 160.0], [0.0, 0.0, 20.0, 20.0]])
    matched = match_points(anchors, [4, 2], gt)
    # (4,4), (12,4): inside box 0 and box 2 near both centres -> the smaller box 0 wins.
    # (28,28): inside only box 1, 52 px from its centre (> 1.5 * 8): center sampling rejects.
    # (76,76): near box 1's centre but its farthest side is 84 px > 8 * 8: too big for P3.
    # (8,8) on P4: boxes 0 and 2 have largest side distance 8 / 12 < 4 * 16: too small for P4.
    # (80,80) on P4: box 1's centre, side distance 80 in (64, inf).
    assert matched.tolist() == [0, 0, -1, -1, -1, 1]


def test_fcos_match_points_radius_and_empty():
    anchors = _point_anchors([(4, 4)], 8)
    gt = torch.tensor([[0.0, 0.0, 16.0, 16.0]])  # centre (8, 8): 4 px from the point
    assert match_points(anchors, [1], gt, radius=1.5).tolist() == [0]
    assert match_points(anchors, [1], gt, radius=0.25).tolist() == [-1]  # 4 px > 0.25 * 8
    assert match_points(anchors, [1], torch.zeros(0, 4)).tolist() == [-1]


def test_fcos_centerness_targets():
    anchors = _point_anchors([(4, 4), (8, 8)], 8)
    boxes = torch.tensor([[0.0, 0.0, 16.0, 16.0]]).repeat(2, 1)
    # (4,4): l = t = 4, r = b = 12 -> sqrt(1/3 * 1/3); the centre gives 1.
    torch.testing.assert_close(centerness_targets(anchors, boxes), torch.tensor([1 / 3, 1.0]))


# -- EfficientDet fusion ------------------------------------------------------------------------
def test_fusion_weights_normalised():
    weights = fusion_weights(torch.tensor([1.0, 3.0, -2.0]), eps=1e-4)
    torch.testing.assert_close(weights, torch.tensor([1.0, 3.0, 0.0]) / 4.0001)
    assert weights.min() >= 0 and weights.sum() <= 1
    maps = [torch.full((1, 2, 3, 3), 2.0), torch.full((1, 2, 3, 3), 4.0)]
    fused = fast_normalized_fusion(maps, torch.tensor([1.0, 1.0]), eps=0.0)
    torch.testing.assert_close(fused, torch.full((1, 2, 3, 3), 3.0))


def test_bifpn_nodes_fuse_with_normalised_weights():
    cfg = EfficientDetConfig(fpn_channels=8)
    node = FusionNode(1, (1, 2, 0), (8, 8, 8), cfg, torch.nn.BatchNorm2d)  # P4 from P4, P5 (up), P3 (down)
    out = node([torch.randn(2, 8, 8, 8), torch.randn(2, 8, 4, 4), torch.randn(2, 8, 16, 16)])
    assert out.shape == (2, 8, 8, 8)
    assert node.weights.shape == (3,)
    torch.testing.assert_close(
        fusion_weights(node.weights, cfg.fusion_eps).sum(), torch.tensor(3 / (3 + cfg.fusion_eps))
    )
    # Every node's first input is on its own level; 8 nodes per layer, 19 fusion weights.
    assert all(inputs[0] == level for level, inputs in BIFPN_NODES) and sum(len(i) for _, i in BIFPN_NODES) == 19


def test_efficientdet_shapes_and_anchors():
    cfg = EfficientDetConfig()
    model = EfficientDet(cfg).eval()
    assert model.taps == (5, 11, 16)  # last block at strides 8, 16, 32
    features = []
    x = torch.zeros(1, 3, 128, 128)
    for index, layer in enumerate(model.backbone):
        x = layer(x)
        if index in model.taps:
            features.append(x)
    assert [f.shape[1] for f in features] == [40, 112, 320]
    pyramid = model.bifpn(features)
    assert [tuple(p.shape[1:]) for p in pyramid] == [(64, 16, 16), (64, 8, 8), (64, 4, 4), (64, 2, 2), (64, 1, 1)]
    shapes = cfg.anchor_shapes()
    assert len(shapes) == 5 and all(len(level) == 9 for level in shapes)
    assert shapes[0][0] == (32.0, 32.0)  # anchor_scale 4 * stride 8, scale 1, ratio (1, 1)
    assert shapes[0][1] == pytest.approx((32 * 1.4, 32 * 0.7))


# -- post-processing and losses -----------------------------------------------------------------
def test_flatten_level_order():
    x = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).view(1, 2 * 3, 2, 2)  # A=2, k=3, H=W=2
    flat = flatten_level(x, 3)
    assert flat.shape == (1, 8, 3)
    torch.testing.assert_close(flat[0, 1], x[0, 3:6, 0, 0])  # cell (0, 0), anchor 1
    torch.testing.assert_close(flat[0, 2], x[0, 0:3, 0, 1])  # cell (0, 1), anchor 0


def test_dense_detections_threshold_topk_nms():
    anchors = torch.tensor([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 9.0], [20.0, 20.0, 30.0, 30.0]])
    scores = torch.tensor([[[0.01, 0.9], [0.01, 0.8], [0.7, 0.02]]])  # (B=1, N=3, C=2)
    deltas = torch.zeros(1, 3, 4)
    identity = lambda d, a: a  # boxes = anchors
    common = dict(score_thresh=0.05, nms_thresh=0.5, max_detections=10)
    (result,) = dense_detections(
        [scores], [deltas], [anchors], identity, [(25, 40)], topk_candidates=10, label_offset=1, **common
    )
    # Anchor 1 (IoU 0.9 with anchor 0, same class) is suppressed; anchor 2 is clipped to y <= 25.
    torch.testing.assert_close(result["boxes"], torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 25.0]]))
    torch.testing.assert_close(result["scores"], torch.tensor([0.9, 0.7]))
    assert result["labels"].tolist() == [2, 1] and result["labels"].dtype == torch.int64
    (top1,) = dense_detections([scores], [deltas], [anchors], identity, [(25, 40)], topk_candidates=1, **common)
    assert top1["scores"].tolist() == pytest.approx([0.9])


def test_one_hot_targets_background_rows_are_zero():
    torch.testing.assert_close(
        one_hot_targets(torch.tensor([1, -1, 0]), 3, torch.float32), torch.tensor([[0.0, 1, 0], [0, 0, 0], [1, 0, 0]])
    )
    assert 1 / (1 + math.exp(-prior_bias(0.01))) == pytest.approx(0.01)


@pytest.fixture(scope="module")
def two_class_retinanet() -> RetinaNet:
    return RetinaNet(RetinaNetConfig(num_classes=2))


@pytest.mark.parametrize("box_loss", ["l1", "smooth_l1", "giou"])
def test_retinanet_losses_hand_computed(two_class_retinanet, box_loss):
    model = two_class_retinanet
    model.cfg = replace(model.cfg, box_loss=box_loss)  # _losses reads the loss choice from cfg
    anchors = torch.tensor([[0.0, 0.0, 10.0, 10.0], [50.0, 50.0, 60.0, 60.0]])
    targets = [{"boxes": anchors[:1].clone(), "labels": torch.tensor([1])}]
    losses = model._losses(anchors, torch.zeros(1, 2, 2), torch.zeros(1, 2, 4), targets)
    # All logits 0 (p = 0.5): anchor 0 is foreground class 1 (one positive, one negative class
    # term), anchor 1 background (two negative terms); positive term 0.25 * 0.25 * ln2,
    # negative 0.75 * 0.25 * ln2; divided by one foreground anchor.
    torch.testing.assert_close(losses["loss_cls"], torch.tensor((0.0625 + 3 * 0.1875) * LN2))
    torch.testing.assert_close(losses["loss_box"], torch.tensor(0.0))  # zero deltas reproduce the box


def test_efficientdet_losses_hand_computed():
    model = EfficientDet(EfficientDetConfig(num_classes=2))
    # One level, one cell, two anchors: anchor 0 is class 0 with box target (0, 0.1, 0, log 1.2), anchor 1 background.
    labels = {
        "cls_0": torch.tensor([[[[0.0, -1.0]]]]),
        "box_0": torch.tensor([[[[0.0, 0.1, 0.0, math.log(1.2), 0.0, 0.0, 0.0, 0.0]]]]),
        "num_positives": torch.tensor([1.0]),
    }
    losses = model._losses([torch.zeros(1, 4, 1, 1)], [torch.zeros(1, 8, 1, 1)], labels)
    # gamma 1.5: (1 - p_t)**1.5 = 0.5**1.5; one positive term, three negative; / (1 positive + 1).
    focusing = 0.5**1.5 * LN2
    torch.testing.assert_close(losses["loss_cls"], torch.tensor((0.25 + 3 * 0.75) * focusing / 2))
    # Huber(delta 0.1) of the non-zero box targets: 0.5 * 0.1**2 + 0.1 * (log 1.2 - 0.05).
    huber = 0.5 * 0.01 + 0.1 * (math.log(1.2) - 0.05)
    torch.testing.assert_close(losses["loss_box"], torch.tensor(50.0 * huber / (4 * 2)))


def test_efficientdet_anchor_labels_per_level():
    model = EfficientDet(EfficientDetConfig(num_classes=3))
    anchors = model.anchor_generator([(16, 16), (8, 8), (4, 4), (2, 2), (1, 1)])
    box = anchors[1][5 * 9 + 2].clone()  # P4, cell (0, 5), anchor 2
    labels = anchor_labels(model, 128, [{"boxes": box[None], "labels": torch.tensor([2])}])
    assert labels["cls_1"].shape == (1, 8, 8, 9) and labels["box_1"].shape == (1, 8, 8, 36)
    assert labels["cls_1"][0, 0, 5, 2] == 2 and labels["cls_1"].dtype == torch.float32
    positives = torch.cat([labels[f"cls_{level}"].flatten() for level in range(5)])
    assert (positives[positives >= 0] == 2).all() and labels["num_positives"].item() == (positives >= 0).sum()


def test_tf_same_padding():
    x = torch.arange(16.0).view(1, 1, 4, 4)
    padded = pad_same(x, (3, 3), (2, 2))  # total 1: all of it bottom/right
    assert padded.shape == (1, 1, 5, 5) and padded[0, 0, :4, :4].equal(x[0, 0]) and padded[0, 0, 4].abs().sum() == 0
    assert pad_same(x, (5, 5), (2, 2)).shape == (1, 1, 7, 7)  # total 3: 1 top/left, 2 bottom/right
    conv = Conv2dSame(1, 1, 3, 2, bias=False)
    torch.nn.init.ones_(conv.weight)
    torch.testing.assert_close(
        conv(x)[0, 0], torch.tensor([[45.0, 39.0], [66.0, 50.0]])
    )  # 3x3 sums, zeros past the edge
    model = EfficientDet(EfficientDetConfig(tf_padding=True, backbone_depth=1.1, drop_path_rate=0.2))
    strided = [m for m in model.backbone.modules() if isinstance(m, torch.nn.Conv2d) and m.stride != (1, 1)]
    assert strided and all(isinstance(m, Conv2dSame) and m.padding == (0, 0) for m in strided)
    assert {m.eps for m in model.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)} == {1e-3}
    assert len(model.backbone) - 1 == 23  # B1: stage repeats 2, 3, 3, 4, 4, 5, 2


def test_invalid_configs_raise():
    with pytest.raises(ValueError, match="unknown box_loss 'iou'"):
        RetinaNet(RetinaNetConfig(box_loss="iou"))
    with pytest.raises(ValueError, match="multiple of 128"):
        torchgauge.create("timm_efficientdet", mode="eval", size="smoke", image_size=100)


# -- end to end at smoke size: the documented inference format -----------------------------------
BOX_KEYS = {"boxes", "scores", "labels"}


# Every registered box detector, including the two-stage family and YOLOv3: with random weights
# the benchmark threshold must still give detections, so NMS and post-processing are timed.
# Models fed resized images (Detectron2's mapper) report detections at each original size.
@pytest.mark.parametrize(
    "name,keys",
    [
        ("retinanet_r_50_fpn", BOX_KEYS),
        ("timm_efficientdet", BOX_KEYS),
        ("yolov3_416", BOX_KEYS),
        ("detectron2_fasterrcnn_r_50_c4", BOX_KEYS),
        ("detectron2_maskrcnn_r_50_fpn", BOX_KEYS | {"masks"}),
    ],
)
def test_eval_returns_documented_format(name, keys):
    w = torchgauge.create(name, mode="eval", size="smoke", batch_size=2)
    images, image_sizes, *output_sizes = w.inputs
    detections = w.step()
    assert len(detections) == 2
    for det, (height, width) in zip(detections, output_sizes[0] if output_sizes else image_sizes):
        assert set(det) == keys
        assert det["boxes"].shape == (det["scores"].shape[0], 4) and det["boxes"].dtype == torch.float32
        assert det["scores"].shape[0] > 0  # BENCHMARK_SCORE_THRESH drives NMS and the final top-k
        assert torch.all(det["scores"][:-1] >= det["scores"][1:])
        assert det["labels"].dtype == torch.int64
        assert det["boxes"][:, 0::2].max() <= width and det["boxes"][:, 1::2].max() <= height
        assert det["boxes"].min() >= 0
        if "masks" in keys:
            assert det["masks"].shape == (len(det["boxes"]), 1, height, width) and det["masks"].dtype == torch.bool


def test_detectron2_fcos_eval_is_empty_at_the_config_threshold():
    # TorchBench runs FCOS with random weights at the config's 0.2 threshold on
    # sqrt(class prob * centerness), which starts near sqrt(0.01 * 0.5): no detections.
    w = torchgauge.create("detectron2_fcos_r_50_fpn", mode="eval", size="smoke", batch_size=2)
    assert w.module.cfg.score_thresh == 0.2 and w.module.cfg.head_norm == "bn"
    detections = w.step()
    assert [set(d) for d in detections] == [BOX_KEYS, BOX_KEYS]
    assert all(d["boxes"].shape == (0, 4) for d in detections)


@pytest.mark.parametrize(
    "name,keys",
    [
        ("retinanet_r_50_fpn", {"loss_cls", "loss_box"}),
        ("detectron2_fcos_r_50_fpn", {"loss_cls", "loss_box", "loss_ctr"}),
        ("timm_efficientdet", {"loss_cls", "loss_box"}),
    ],
)
def test_train_forward_returns_positive_losses(name, keys):
    w = torchgauge.create(name, mode="train", size="smoke")
    losses = w.forward()
    assert set(losses) == keys
    for key, value in losses.items():
        # > 0 for the box terms means ground truth was assigned to some anchors/points.
        assert value.ndim == 0 and torch.isfinite(value) and value > 0, f"{name} {key} = {value}"


def test_timm_efficientdet_step_is_torchbench_s():
    w = torchgauge.create("timm_efficientdet", mode="train", size="smoke")
    assert w.max_grad_norm == 10.0  # TorchBench's --clip-grad
    no_decay, decay = w.optimizer.param_groups
    assert (no_decay["weight_decay"], decay["weight_decay"]) == (0.0, 4e-5)
    assert all(p.ndim > 1 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    assert all(g["lr"] == 1e-4 and g["momentum"] == 0.9 and not g["nesterov"] for g in (no_decay, decay))
    assert set(w.targets) == {"num_positives"} | {f"{k}_{level}" for k in ("cls", "box") for level in range(5)}
    rates = [m.drop_prob for m in w.module.backbone if hasattr(m, "drop_prob")]
    assert len(rates) == 23 and rates[0] == 0.0 and rates[-1] == pytest.approx(0.2 * 22 / 23)
