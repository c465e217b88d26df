"""TorchBench's yolov3 (YOLOv3-SPP, ultralytics' step) against hand-computed cases.

The full-size network was also checked against TorchBench's own ``Darknet(yolov3-spp.cfg)``
with copied weights: equal parameter count, identical raw maps, equal loss (see the report
of issue 19); these tests pin the pieces that comparison relied on.
"""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.vision.detection.yolov3 import SpatialPyramidPooling, YOLOv3Config
from torchgauge.models.vision.detection.yolov3_torchbench import (
    BIAS_LR,
    TORCHBENCH_CONFIG,
    ModelEMA,
    UltralyticsDarknet,
    build_targets,
    burn_in_sgd,
    non_max_suppression,
)

ANCHORS = torch.tensor(YOLOv3Config().anchors, dtype=torch.float32)


def _maps(batch: int = 1, classes: int = 2) -> list[torch.Tensor]:
    return [torch.zeros(batch, 3, s, s, 5 + classes) for s in (13, 26, 52)]  # 416 px


def test_spp_concatenates_pools_13_9_5_then_the_input():
    x = torch.zeros(1, 1, 13, 13)
    x[0, 0, 6, 0] = 1.0  # a spike 6 columns from the far edge of a 13-wide pool's reach
    out = SpatialPyramidPooling()(x)
    assert out.shape == (1, 4, 13, 13)
    # column 6 sees the spike through the 13-pool (reach 6), not the 9- (reach 4) or 5-pool (reach 2)
    assert out[0, :, 6, 6].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert out[0, :, 6, 4].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert out[0, :, 6, 2].tolist() == [1.0, 1.0, 1.0, 0.0]
    torch.testing.assert_close(out[:, 3:], x)


def test_ultralytics_output_bias_init():
    torch.manual_seed(0)
    model = UltralyticsDarknet(YOLOv3Config(**{**TORCHBENCH_CONFIG, "width": 4, "num_classes": 80}))
    for head in (model.head32, model.head16, model.head8):
        output = head.head[1]
        bound = 1 / math.sqrt(output.in_channels)
        bias = output.bias.view(3, 85)
        assert ((bias[:, 4] + 4.5).abs() <= bound).all()
        assert ((bias[:, 5:] - math.log(0.6 / 79.01)).abs() <= bound).all()
        assert (bias[:, :4].abs() <= bound).all()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert {(m.eps, m.momentum) for m in norms} == {(1e-4, 0.03)}


def test_build_targets_matches_every_anchor_above_shape_iou_0_2():
    # One target at (0.5, 0.5) of size 116x90 px (area 10440): at stride 32 it is exactly anchor
    # (116, 90); (156, 198) has IoU 10440/30888 = 0.34 > 0.2, (373, 326) 0.086. At stride 16,
    # (30, 61) has 1830/10440 = 0.18, (62, 45) 2790/10440 = 0.27, (59, 119) 5310/12151 = 0.44;
    # at stride 8 all stay under 0.08.
    targets = torch.tensor([[0.0, 1.0, 0.5, 0.5, 116 / 416, 90 / 416]])
    coarse, middle, fine = build_targets(_maps(), targets, ANCHORS)
    (image, anchor, gy, gx), box, anchor_wh, label = coarse
    assert anchor.tolist() == [0, 1] and image.tolist() == [0, 0] and label.tolist() == [1, 1]
    assert gx.tolist() == [6, 6] and gy.tolist() == [6, 6]
    torch.testing.assert_close(box[0], torch.tensor([0.5, 0.5, 116 / 32, 90 / 32]))
    torch.testing.assert_close(anchor_wh[1], torch.tensor([156 / 32, 198 / 32]))
    assert middle[0][1].tolist() == [1, 2]
    assert fine[0][0].numel() == 0


def test_nms_keeps_best_class_per_box_and_merges_overlaps():
    pred = torch.zeros(1, 5, 7)  # 2 classes; rows: cx, cy, w, h, obj, cls0, cls1
    pred[0, 0] = torch.tensor([50.0, 50.0, 20.0, 20.0, 0.9, 0.9, 0.1])
    pred[0, 1] = torch.tensor([52.0, 50.0, 20.0, 20.0, 0.8, 0.9, 0.1])  # IoU 18/22 with row 0: merged
    pred[0, 2] = torch.tensor([50.0, 50.0, 20.0, 20.0, 0.9, 0.1, 0.8])  # same box, best class 1: kept
    pred[0, 3] = torch.tensor([10.0, 10.0, 1.5, 9.0, 0.9, 0.9, 0.1])  # narrower than 2 px: dropped
    pred[0, 4] = torch.tensor([90.0, 90.0, 9.0, 9.0, 0.2, 0.9, 0.1])  # objectness under 0.3: dropped
    (det,) = non_max_suppression(pred)
    assert det.shape == (2, 6)
    assert det[:, 5].tolist() == [0.0, 1.0] and det[:, 4].tolist() == pytest.approx([0.81, 0.72])
    w0, w1 = 0.81, 0.72  # scores of rows 0 and 1 weight the merged box
    merged_x1 = (w0 * 40.0 + w1 * 42.0) / (w0 + w1)
    torch.testing.assert_close(det[0, :4], torch.tensor([merged_x1, 40.0, merged_x1 + 20.0, 60.0]))
    torch.testing.assert_close(det[1, :4], torch.tensor([40.0, 40.0, 60.0, 60.0]))


def test_burn_in_sgd_groups():
    model = UltralyticsDarknet(YOLOv3Config(**{**TORCHBENCH_CONFIG, "width": 4, "num_classes": 2}))
    norm_weights, conv_weights, biases = burn_in_sgd(model).param_groups
    assert all(p.ndim == 1 for p in norm_weights["params"]) and all(p.ndim == 4 for p in conv_weights["params"])
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(names[id(p)].endswith(".bias") for p in biases["params"])
    assert len(norm_weights["params"]) + len(conv_weights["params"]) + len(biases["params"]) == len(names)
    assert [g["lr"] for g in (norm_weights, conv_weights, biases)] == [0.0, 0.0, BIAS_LR]
    groups = (norm_weights, conv_weights, biases)
    assert all(g["nesterov"] and g["momentum"] == 0.9 and g["weight_decay"] == 0.0 for g in groups)


def test_model_ema_moves_by_the_ramped_decay():
    model = torch.nn.Linear(2, 1)
    ema = ModelEMA(model)
    before = ema.module.weight.clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update(model)
    d = 0.9999 * (1 - math.exp(-1 / 2000))
    torch.testing.assert_close(ema.module.weight, d * before + (1 - d) * model.weight)


def test_train_step_moves_only_biases_and_updates_the_ema():
    w = torchgauge.create("yolov3", mode="train", size="smoke")
    (images,) = w.inputs
    assert images.dtype == torch.uint8 and w.targets.shape[1] == 6
    conv = w.module.backbone.stem[0].weight.detach().clone()
    bias = w.module.head8.head[1].bias.detach().clone()
    loss = w.step()
    assert torch.isfinite(loss)
    torch.testing.assert_close(w.module.backbone.stem[0].weight, conv)  # learning rate 0 at iteration 0
    assert not torch.equal(w.module.head8.head[1].bias, bias)
    assert w.ema.updates == 1


def test_eval_returns_decoded_and_raw_maps():
    w = torchgauge.create("yolov3", mode="eval", size="smoke")
    (images,) = w.inputs
    assert images.shape[2:] == (64, 96) and 0 <= images.min() and images.max() < 1
    decoded, *raw = w.step()
    assert [tuple(r.shape[2:4]) for r in raw] == [(2, 3), (4, 6), (8, 12)]
    assert decoded.shape == (2, 3 * (6 + 24 + 96), 13)
    assert ((decoded[..., 4:] >= 0) & (decoded[..., 4:] <= 1)).all()
