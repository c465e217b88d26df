"""Detection building blocks against hand-computed cases and slow reference implementations."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.vision.detection.boxes import (
    AnchorGenerator,
    BoxCoder,
    Matcher,
    anchor_shapes,
    batched_nms,
    box_iou,
    clip_boxes,
    nms,
    sample_labels,
)
from torchgauge.models.vision.detection.roi_align import RoIPooler, assign_fpn_levels, paste_masks, roi_align


# -- IoU, clipping, box coding -----------------------------------------------------------------
def test_box_iou_hand_computed():
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 1.0, 1.0]])
    b = torch.tensor([[1.0, 1.0, 3.0, 3.0], [0.0, 0.0, 2.0, 2.0], [5.0, 5.0, 6.0, 6.0]])
    expected = torch.tensor([[1 / 7, 1.0, 0.0], [0.0, 1 / 4, 0.0]])
    torch.testing.assert_close(box_iou(a, b), expected)


def test_box_iou_degenerate_boxes_give_zero_not_nan():
    a = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    assert box_iou(a, a).item() == 0.0


def test_clip_boxes():
    boxes = torch.tensor([[-5.0, 2.0, 30.0, 50.0]])
    torch.testing.assert_close(clip_boxes(boxes, (40, 20)), torch.tensor([[0.0, 2.0, 20.0, 40.0]]))


def test_box_coder_hand_computed_and_round_trip():
    coder = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
    reference = torch.tensor([[0.0, 0.0, 10.0, 20.0]])
    target = torch.tensor([[5.0, 0.0, 15.0, 40.0]])
    # centre moves by (+5, +10) = (0.5 w, 0.5 h); height doubles.
    expected = torch.tensor([[10 * 0.5, 10 * 0.5, 5 * math.log(1.0), 5 * math.log(2.0)]])
    deltas = coder.encode(reference, target)
    torch.testing.assert_close(deltas, expected)
    torch.testing.assert_close(coder.decode(deltas, reference), target)


def test_box_coder_decodes_several_boxes_per_reference():
    coder = BoxCoder()
    reference = torch.tensor([[0.0, 0.0, 4.0, 4.0]])
    deltas = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0]])  # two classes
    decoded = coder.decode(deltas, reference)
    torch.testing.assert_close(decoded, torch.tensor([[0.0, 0.0, 4.0, 4.0, 2.0, 0.0, 6.0, 4.0]]))


def test_box_coder_clamps_huge_scales():
    coder = BoxCoder()
    decoded = coder.decode(torch.tensor([[0.0, 0.0, 100.0, 100.0]]), torch.tensor([[0.0, 0.0, 1.0, 1.0]]))
    assert torch.isfinite(decoded).all()
    assert decoded[0, 2] - decoded[0, 0] == pytest.approx(1000 / 16, rel=1e-5)


# -- NMS -----------------------------------------------------------------------------------------
def _greedy_nms(boxes, scores, threshold):
    iou = box_iou(boxes, boxes).tolist()
    keep = []
    for i in scores.argsort(descending=True).tolist():
        if all(iou[i][j] <= threshold for j in keep):
            keep.append(i)
    return torch.tensor(keep, dtype=torch.int64)


def test_nms_hand_computed():
    boxes = torch.tensor(
        [[0.0, 0.0, 10.0, 10.0], [1.0, 0.0, 11.0, 10.0], [20.0, 20.0, 30.0, 30.0], [2.0, 0.0, 12.0, 10.0]]
    )
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
    # box 3 (0.95) suppresses 1 (IoU 9/11) and 0 (IoU 8/12 = 0.67 > 0.5); box 2 is far away.
    assert nms(boxes, scores, 0.5).tolist() == [3, 2]
    # At 0.7 box 0 survives (IoU with 3 is 0.67) and then suppresses nothing new: 1 overlaps 3 by 0.82.
    assert nms(boxes, scores, 0.7).tolist() == [3, 0, 2]


def test_nms_chain_needs_greedy_order():
    # a suppresses b, b would suppress c, but b is gone so c survives.
    boxes = torch.tensor([[0.0, 0, 10, 10], [3.0, 0, 13, 10], [6.0, 0, 16, 10]])
    scores = torch.tensor([3.0, 2.0, 1.0])
    assert nms(boxes, scores, 0.4).tolist() == [0, 2]


@pytest.mark.parametrize("num", [1, 50, 700, 1300])
def test_nms_matches_greedy_reference(num):
    gen = torch.Generator().manual_seed(num)
    xy = torch.rand(num, 2, generator=gen) * 100
    wh = torch.rand(num, 2, generator=gen) * 40 + 5
    boxes = torch.cat((xy, xy + wh), dim=1)
    scores = torch.rand(num, generator=gen)
    kept = nms(boxes, scores, 0.5)
    assert kept.tolist() == _greedy_nms(boxes, scores, 0.5).tolist()
    assert nms(boxes, scores, 0.5, max_output=7).tolist() == kept[:7].tolist()


def _fixed_point_nms(boxes, scores, threshold, block=512):
    """The previous implementation (until issue 20), kept as the equality reference: blocks
    checked against earlier survivors, then a fixed-point iteration inside each block."""
    from torchgauge.models.vision.detection.boxes import _overlaps_above

    order = scores.argsort(descending=True)
    boxes = boxes[order]
    keep = torch.zeros(len(boxes), dtype=torch.bool)
    survivors = boxes[:0]
    for start in range(0, len(boxes), block):
        chunk = boxes[start : start + block]
        alive = ~_overlaps_above(survivors, chunk, threshold).any(dim=0)
        suppresses = _overlaps_above(chunk, chunk, threshold).triu_(diagonal=1)
        chunk_keep = alive
        while True:
            new_keep = alive & ~(suppresses & chunk_keep[:, None]).any(dim=0)
            if torch.equal(new_keep, chunk_keep):
                break
            chunk_keep = new_keep
        keep[start : start + block] = chunk_keep
        survivors = torch.cat((survivors, chunk[chunk_keep]))
    return order[keep]


@pytest.mark.parametrize("layout", ["uniform", "clustered", "chain"])
@pytest.mark.parametrize("num", [7, 420, 513, 1500])
def test_nms_equals_the_fixed_point_loop_on_random_boxes(layout, num):
    gen = torch.Generator().manual_seed(num)
    if layout == "uniform":
        xy = torch.rand(num, 2, generator=gen) * 200
    elif layout == "clustered":  # untrained detector: piles of near-duplicates
        xy = torch.randint(0, 5, (num, 2), generator=gen) * 50 + torch.rand(num, 2, generator=gen) * 6
    else:  # boxes shifted along a line: long suppression chains
        xy = torch.stack((torch.arange(num) * 2.0, torch.zeros(num)), 1) + torch.rand(num, 2, generator=gen)
    boxes = torch.cat((xy, xy + torch.rand(num, 2, generator=gen) * 30 + 8), dim=1)
    scores = torch.rand(num, generator=gen)
    for threshold in (0.3, 0.5, 0.7):
        reference = _fixed_point_nms(boxes, scores, threshold)
        assert nms(boxes, scores, threshold).tolist() == reference.tolist()
        assert nms(boxes, scores, threshold, max_output=100).tolist() == reference[:100].tolist()


def test_nms_empty():
    assert nms(torch.zeros(0, 4), torch.zeros(0), 0.5).numel() == 0


@pytest.mark.parametrize("num", [30, 5000])  # one offset NMS, and one NMS per category
def test_batched_nms_only_suppresses_within_a_category(num):
    gen = torch.Generator().manual_seed(0)
    xy = torch.rand(num, 2, generator=gen) * 200
    boxes = torch.cat((xy, xy + 30), dim=1)
    scores = torch.rand(num, generator=gen)
    categories = torch.randint(0, 3, (num,), generator=gen)
    kept = batched_nms(boxes, scores, categories, 0.5)
    expected = torch.cat(
        [
            torch.nonzero(categories == c).squeeze(1)[nms(boxes[categories == c], scores[categories == c], 0.5)]
            for c in range(3)
        ]
    )
    assert sorted(kept.tolist()) == sorted(expected.tolist())
    assert torch.all(scores[kept][:-1] >= scores[kept][1:])


# -- anchors, matching, sampling -------------------------------------------------------------------
def test_anchor_shapes_keep_area_and_ratio():
    (w1, h1), (w2, h2) = anchor_shapes([32], [0.5, 2.0])
    assert w1 * h1 == pytest.approx(32 * 32) and h1 / w1 == pytest.approx(0.5)
    assert w2 * h2 == pytest.approx(32 * 32) and h2 / w2 == pytest.approx(2.0)
    assert anchor_shapes([32], [0.5], round_to_int=True) == [(46.0, 22.0)]


def test_anchor_generator_grid_order():
    generator = AnchorGenerator([[(4.0, 2.0), (2.0, 2.0)]], strides=[8], offset=0.5)
    (anchors,) = generator([(2, 3)])
    assert anchors.shape == (2 * 3 * 2, 4)
    # (y, x, anchor) order: second cell is x=1 (centre 12, 4)
    torch.testing.assert_close(anchors[0], torch.tensor([2.0, 3.0, 6.0, 5.0]))
    torch.testing.assert_close(anchors[2], torch.tensor([10.0, 3.0, 14.0, 5.0]))
    torch.testing.assert_close(anchors[6], torch.tensor([2.0, 11.0, 6.0, 13.0]))  # y=1 row


def test_matcher_thresholds_and_low_quality_matches():
    iou = torch.tensor([[0.9, 0.45, 0.1, 0.2], [0.1, 0.2, 0.35, 0.1]])
    matched, labels = Matcher(0.3, 0.7)(iou)
    assert matched.tolist() == [0, 0, 1, 0]
    assert labels.tolist() == [1, -1, -1, 0]
    matched, labels = Matcher(0.3, 0.7, allow_low_quality_matches=True)(iou)
    assert labels.tolist() == [1, -1, 1, 0]  # prediction 2 is gt 1's best match


def test_matcher_without_ground_truth_is_all_background():
    matched, labels = Matcher(0.3, 0.7)(torch.zeros(0, 5))
    assert labels.tolist() == [0] * 5 and matched.tolist() == [0] * 5


def test_sample_labels_respects_fraction_and_ignores():
    labels = torch.tensor([3] * 10 + [0] * 100 + [-1] * 5)  # class 3 fg, 0 bg, -1 ignored
    torch.manual_seed(0)
    pos, neg = sample_labels(labels, 16, 0.25, background=0)
    assert len(pos) == 4 and len(neg) == 12
    assert (labels[pos] == 3).all() and (labels[neg] == 0).all()
    pos, neg = sample_labels(labels[:12], 16, 0.5, background=0)  # 8 fg allowed, only 2 bg exist
    assert len(pos) == 8 and len(neg) == 2


# -- RoIAlign ----------------------------------------------------------------------------------
def _bilinear(feature, y, x):
    """The reference kernels' bilinear_interpolate for one channel map (H, W)."""
    height, width = feature.shape
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_high = y_low = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_high = x_low = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    f = feature
    return (
        hy * hx * f[y_low, x_low]
        + hy * lx * f[y_low, x_high]
        + ly * hx * f[y_high, x_low]
        + ly * lx * f[y_high, x_high]
    )


def _slow_roi_align(features, rois, output_size, scale, sampling_ratio, aligned):
    """Loop-for-loop transcription of the reference RoIAlign forward kernel."""
    ph_n, pw_n = output_size
    out = torch.zeros(len(rois), features.shape[1], ph_n, pw_n, dtype=torch.float64)
    offset = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois.tolist()):
        start_w, start_h = x1 * scale - offset, y1 * scale - offset
        roi_w, roi_h = (x2 - x1) * scale, (y2 - y1) * scale
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / ph_n, roi_w / pw_n
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / ph_n)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / pw_n)
        count = max(grid_h * grid_w, 1)
        for c in range(features.shape[1]):
            fmap = features[int(b), c].double()
            for ph in range(ph_n):
                for pw in range(pw_n):
                    total = 0.0
                    for iy in range(grid_h):
                        y = start_h + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                        for ix in range(grid_w):
                            x = start_w + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                            total += float(_bilinear(fmap, y, x))
                    out[k, c, ph, pw] = total / count
    return out


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_matches_slow_reference(aligned, sampling_ratio):
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(2, 3, 9, 11, generator=gen)
    rois = torch.tensor(
        [
            [0, 2.0, 3.0, 30.0, 20.0],
            [1, 0.0, 0.0, 44.0, 36.0],  # whole image
            [1, -6.0, -5.0, 10.0, 8.0],  # partly outside (samples below -1 are zero)
            [0, 40.0, 30.0, 60.0, 50.0],  # mostly outside
            [1, 5.0, 5.0, 5.5, 21.0],  # thinner than a bin
            [0, 8.0, 8.0, 8.0, 8.0],  # empty box
        ]
    )
    expected = _slow_roi_align(features, rois, (3, 2), 0.25, sampling_ratio, aligned)
    actual = roi_align(features, rois, (3, 2), spatial_scale=0.25, sampling_ratio=sampling_ratio, aligned=aligned)
    torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5)


def test_roi_align_on_single_row_map_and_backward():
    features = torch.randn(1, 2, 1, 5, requires_grad=True)
    rois = torch.tensor([[0, 0.0, 0.0, 4.0, 1.0], [0, -4.0, -4.0, -2.5, -2.5]])
    out = roi_align(features, rois, (2, 2), 1.0, 0, True)
    expected = _slow_roi_align(features.detach(), rois, (2, 2), 1.0, 0, True)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    assert features.grad is not None and torch.isfinite(features.grad).all()


def test_roi_align_constant_map_and_no_rois():
    features = torch.full((1, 1, 8, 8), 3.0)
    out = roi_align(features, torch.tensor([[0, 1.0, 1.0, 6.0, 7.0]]), 4, 1.0, 0, True)
    torch.testing.assert_close(out, torch.full((1, 1, 4, 4), 3.0))
    assert roi_align(features, torch.zeros(0, 5), 4).shape == (0, 1, 4, 4)


def test_fpn_level_assignment():
    boxes = torch.tensor(
        [[0, 0, 224.0, 224.0], [0, 0, 112.0, 112.0], [0, 0, 10.0, 10.0], [0, 0, 1000.0, 1000.0], [0, 0, 447.0, 447.0]]
    )
    assert assign_fpn_levels(boxes, 2, 5).tolist() == [2, 1, 0, 3, 2]  # levels 4, 3, 2, 5, 4


def test_roi_pooler_uses_each_box_level():
    features = [
        torch.full((1, 1, 64, 64), 2.0),
        torch.full((1, 1, 32, 32), 3.0),
        torch.full((1, 1, 16, 16), 4.0),
        torch.full((1, 1, 8, 8), 5.0),
    ]
    pooler = RoIPooler(2, strides=(4, 8, 16, 32), sampling_ratio=0, aligned=True)
    boxes = [torch.tensor([[0, 0, 20.0, 20.0], [0, 0, 250.0, 250.0]]), torch.zeros(0, 4)]
    out = pooler(features, boxes)
    assert out.shape == (2, 1, 2, 2)
    assert out[0].unique().item() == 2.0 and out[1].unique().item() == 4.0


def test_paste_masks_fills_box_region_only():
    masks = torch.ones(1, 4, 4)
    pasted = paste_masks(masks, torch.tensor([[2.0, 1.0, 6.0, 5.0]]), (8, 10))
    assert pasted.shape == (1, 1, 8, 10)
    inside = pasted[0, 0, 1:5, 2:6]
    assert (inside > 0.49).all()
    assert pasted[0, 0, 6:, :].abs().max() == 0 and pasted[0, 0, :, 8:].abs().max() == 0
    assert paste_masks(torch.zeros(0, 4, 4), torch.zeros(0, 4), (8, 10)).shape == (0, 1, 8, 10)


# -- R-CNN configs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["detectron2_fasterrcnn_r_50_c4", "vision_maskrcnn"])
def test_smoke_proposal_counts_override_the_family_defaults(name):
    from torchgauge.registry import create

    # C4's (2000, 1000) and torchvision's post-NMS counts used to win over smoke's 8, so a
    # smoke eval ran res5 (C4) or the box head on hundreds of proposals.
    workload = create(name, mode="eval", size="smoke")
    assert workload.module.cfg.rpn_post_nms_topk == (8, 8)
    assert workload.module.cfg.rpn_pre_nms_topk == (64, 64)
    explicit = create(name, mode="eval", size="smoke", rpn_post_nms_topk=(4, 4))
    assert explicit.module.cfg.rpn_post_nms_topk == (4, 4)


# -- Detectron2 inputs and heads as TorchBench runs them ---------------------------------------
def test_resize_shortest_edge_follows_detectron2_rounding_and_cap():
    from torchgauge.models.vision.detection.detectron2_inputs import resize_shortest_edge

    assert resize_shortest_edge((480, 640), 800, 1333) == (800, 1067)  # 640 * 5/3 = 1066.67
    assert resize_shortest_edge((427, 640), 800, 1333) == (800, 1199)
    assert resize_shortest_edge((640, 480), 640, 1333) == (853, 640)
    assert resize_shortest_edge((300, 1000), 800, 1333) == (400, 1333)  # long side capped


def test_detectron2_models_take_mapper_sizes_and_report_at_the_original_size():
    eval_w = torchgauge.create("detectron2_maskrcnn_r_50_c4", mode="eval", size="smoke")
    images, image_sizes, output_sizes = eval_w.inputs
    assert image_sizes == [(128, 160)] and output_sizes == [(96, 120)] and images.shape == (1, 3, 128, 160)
    (detection,) = eval_w.step()
    assert detection["masks"].shape[-2:] == (96, 120) and detection["boxes"][:, 2].max() <= 120
    train_w = torchgauge.create("detectron2_maskrcnn_r_50_c4", mode="train", size="smoke")
    assert train_w.inputs[1][0] in ((112, 140), (128, 160))  # short edge drawn from the train choices
    assert train_w.targets[0]["polygons"].shape[1:] == (24, 2) and "masks" not in train_w.targets[0]


def test_rescale_detections_scales_clips_and_drops_empty_boxes():
    from torchgauge.models.vision.detection.boxes import rescale_detections

    detections = [
        {
            "boxes": torch.tensor([[10.0, 10.0, 20.0, 30.0], [200.0, 0.0, 210.0, 5.0]]),
            "scores": torch.tensor([0.9, 0.8]),
            "labels": torch.tensor([1, 2]),
        }
    ]
    (kept,) = rescale_detections(detections, [(100, 200)], [(50, 100)])
    assert kept.tolist() == [0]  # the second box lies past the right edge: empty after clipping
    assert detections[0]["boxes"].tolist() == [[5.0, 5.0, 10.0, 15.0]] and detections[0]["labels"].tolist() == [1]


def test_polygon_mask_targets_agree_with_the_cropped_bitmask():
    from torchgauge.models.vision.detection.batch import _ellipse_masks
    from torchgauge.models.vision.detection.polygon_masks import ellipse_polygons, rasterize_polygons_in_boxes

    gt = torch.tensor([[10.0, 20.0, 90.0, 60.0], [5.0, 5.0, 45.0, 95.0]])
    rois = gt + torch.tensor([[-5.0, 3.0, 4.0, -2.0], [2.0, -4.0, 6.0, 1.0]])
    targets = rasterize_polygons_in_boxes(ellipse_polygons(gt, 64), rois, 28)
    bitmasks = _ellipse_masks(gt, 100, 100)[:, None].float()
    cropped = roi_align(bitmasks, torch.cat((torch.arange(2.0)[:, None], rois), 1), 28, 1.0, 0, True)[:, 0] >= 0.5
    assert targets.dtype == torch.bool and targets.shape == (2, 28, 28)
    assert (targets != cropped).float().mean() < 0.03  # only cells on the outline may differ


def test_level_batch_norm_keeps_statistics_per_level_and_one_affine():
    from torchgauge.models.vision.detection.dense_heads import LevelBatchNorm

    norm = LevelBatchNorm(4, num_levels=2)
    norm(torch.randn(2, 4, 3, 3) + 5.0, 0)
    norm(torch.randn(2, 4, 3, 3) - 5.0, 1)
    assert norm.norms[0].running_mean.mean() > 0.2 and norm.norms[1].running_mean.mean() < -0.2
    assert sum(p.numel() for p in norm.parameters()) == 8  # shared weight and bias only


def test_detectron2_maskrcnn_lazyconfig_backbone_is_not_frozen():
    lazy = torchgauge.create("detectron2_maskrcnn", mode="train", size="smoke").module
    yaml = torchgauge.create("detectron2_maskrcnn_r_50_fpn", mode="train", size="smoke").module
    assert all(p.requires_grad for p in lazy.parameters())
    frozen = [n for n, p in yaml.named_parameters() if not p.requires_grad]
    assert frozen and all(n.startswith(("backbone.stem.", "backbone.res2.")) for n in frozen)
