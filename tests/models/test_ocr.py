"""docTR OCR pieces against hand-computed cases: DB binarisation, losses, targets, regions; CTC decoding."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import torchgauge
from torchgauge.models.vision.ocr.crnn import (
    CRNN,
    FRENCH_VOCAB,
    CRNNConfig,
    ctc_greedy_decode,
    tokens_to_words,
)
from torchgauge.models.vision.ocr.db_net import (
    balanced_bce_loss,
    connected_components,
    db_targets,
    dice_loss,
    differentiable_binarization,
    masked_l1_loss,
    regions_to_boxes,
)


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


# -- DB: binarisation and loss pieces -----------------------------------------------------------
def test_differentiable_binarization_formula():
    prob = torch.tensor([0.5, 0.3, 0.3])
    thresh = torch.tensor([0.3, 0.3, 0.32])
    expected = torch.tensor([1 / (1 + math.exp(-10.0)), 0.5, 1 / (1 + math.exp(1.0))])
    torch.testing.assert_close(differentiable_binarization(prob, thresh), expected)
    assert differentiable_binarization(torch.tensor([0.7]), torch.tensor([0.3]), k=1.0).item() == pytest.approx(
        1 / (1 + math.exp(-0.4))
    )


def test_balanced_bce_keeps_hardest_negatives():
    # one positive (logit 0) and negatives with logits 3, 2, 1, 0, -1, -2: keep the 3 hardest
    logits = torch.tensor([0.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0])
    target = torch.tensor([1.0, 0, 0, 0, 0, 0, 0])
    mask = torch.ones(7)
    expected = (math.log(2) + _softplus(3) + _softplus(2) + _softplus(1)) / 4
    assert balanced_bce_loss(logits, target, mask).item() == pytest.approx(expected, rel=1e-6)
    mask[1] = 0  # the hardest negative is outside the mask: the next three count
    expected = (math.log(2) + _softplus(2) + _softplus(1) + _softplus(0)) / 4
    assert balanced_bce_loss(logits, target, mask).item() == pytest.approx(expected, rel=1e-6)


def test_balanced_bce_few_negatives_and_no_positives():
    logits = torch.tensor([1.0, -1.0, 2.0])
    target = torch.tensor([1.0, 1.0, 0.0])  # 2 positives, only 1 negative available
    expected = (_softplus(-1) + _softplus(1) + _softplus(2)) / 3
    assert balanced_bce_loss(logits, target, torch.ones(3)).item() == pytest.approx(expected, rel=1e-6)
    assert balanced_bce_loss(logits, torch.zeros(3), torch.ones(3)).item() == 0.0  # no positives: no negatives kept


def test_dice_and_l1_hand_computed():
    binary = torch.tensor([1.0, 0.5, 0.0, 0.9])
    target = torch.tensor([1.0, 1.0, 0.0, 1.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert dice_loss(binary, target, mask).item() == pytest.approx(1 - 2 * 1.5 / 3.5, rel=1e-6)
    pred = torch.tensor([0.3, 0.5, 0.7, 0.0])
    goal = torch.tensor([0.3, 0.7, 0.4, 1.0])
    assert masked_l1_loss(pred, goal, mask).item() == pytest.approx((0.0 + 0.2 + 0.3) / 3, rel=1e-5)


def test_db_targets_hand_computed():
    # box 10x4 at (2, 2): D = 40 * (1 - 0.16) / 28 = 1.2; shrunk to [3.2, 10.8] x [3.2, 4.8]
    t = db_targets([torch.tensor([[2.0, 2.0, 12.0, 6.0]])], 16, 16)
    seg = t["seg_target"][0, 0]
    expected = torch.zeros(16, 16)
    expected[3:5, 3:11] = 1.0  # pixel centres 3.5 .. 10.5 and 3.5, 4.5
    torch.testing.assert_close(seg, expected)
    assert t["seg_mask"].min().item() == 1.0
    thresh, mask = t["thresh_target"][0, 0], t["thresh_mask"][0, 0]
    assert thresh[3, 7].item() == pytest.approx(0.3)  # 1.5 px inside: farther than D
    assert thresh[2, 7].item() == pytest.approx(0.3 + 0.4 * (1 - 0.5 / 1.2))  # 0.5 px inside
    assert thresh[3, 1].item() == pytest.approx(0.3 + 0.4 * (1 - 0.5 / 1.2))  # 0.5 px outside, left
    assert mask[3, 1].item() == 1.0 and mask[0, 0].item() == 0.0  # dilated box starts at 0.8
    assert thresh[0, 0].item() == pytest.approx(0.3)


def test_db_targets_ignore_boxes_too_small_to_shrink():
    # 2x1 box: D = 0.28, the shrunk height 0.44 px is under a pixel -> ignored, no positives
    t = db_targets([torch.tensor([[2.0, 2.0, 4.0, 3.0]])], 8, 8)
    assert t["seg_target"].sum().item() == 0.0
    assert t["seg_mask"][0, 0, 2, 2:4].tolist() == [0.0, 0.0] and t["seg_mask"].sum().item() == 62.0


# -- DB: connected regions and boxes -------------------------------------------------------------
def _partition(labels: torch.Tensor) -> set[frozenset[int]]:
    flat = labels.flatten().tolist()
    groups: dict[int, set[int]] = {}
    for i, label in enumerate(flat):
        if label:
            groups.setdefault(label, set()).add(i)
    return {frozenset(g) for g in groups.values()}


def test_connected_components_hand_computed():
    mask = torch.tensor(
        [
            [1, 1, 0, 0, 1],
            [0, 1, 0, 0, 1],
            [0, 0, 1, 0, 1],  # (2, 2) touches (1, 1) diagonally: 8-connected
            [1, 0, 0, 0, 1],
            [1, 1, 1, 1, 1],  # U-shape joins the right column with the bottom-left corner
        ],
        dtype=torch.bool,
    )
    labels = connected_components(mask[None])[0]
    a = frozenset({0, 1, 6, 12})
    b = frozenset({4, 9, 14, 15, 19, 20, 21, 22, 23, 24})
    assert _partition(labels) == {a, b}
    assert labels[0, 0].item() == 1 + max(a) and labels[4, 0].item() == 1 + max(b)
    assert (labels[~mask] == 0).all()


def test_connected_components_matches_scipy_on_random_masks():
    ndimage = pytest.importorskip("scipy.ndimage")
    gen = torch.Generator().manual_seed(0)
    mask = torch.rand(3, 40, 50, generator=gen) < 0.45
    labels = connected_components(mask)
    for i in range(3):
        reference, _ = ndimage.label(mask[i].numpy(), structure=[[1, 1, 1], [1, 1, 1], [1, 1, 1]])
        assert _partition(labels[i]) == _partition(torch.from_numpy(reference))


def test_regions_to_boxes_hand_computed():
    prob = torch.zeros(2, 16, 16)
    prob[0, 2:5, 3:9] = 0.9  # region 6x3 at (3, 2): D' = 18 * 1.5 / 18 = 1.5
    prob[0, 10:14, 12] = 0.8  # 1 px wide: dropped (min side 2)
    prob[0, 10:12, 1:3] = 0.4  # 2x2 region of 0.4: D' = 4 * 1.5 / 8 = 0.75
    out = regions_to_boxes(prob, bin_thresh=0.3, box_thresh=0.1)
    assert set(out[0]) == {"boxes", "scores", "labels"}
    torch.testing.assert_close(out[0]["boxes"], torch.tensor([[1.5, 0.5, 10.5, 6.5], [0.25, 9.25, 3.75, 12.75]]))
    torch.testing.assert_close(out[0]["scores"], torch.tensor([0.9, 0.4]))
    assert out[0]["labels"].tolist() == [0, 0]
    assert out[1]["boxes"].shape == (0, 4) and out[1]["scores"].shape == (0,)
    strict = regions_to_boxes(prob, bin_thresh=0.3, box_thresh=0.5)  # the 0.4 region scores too low
    assert strict[0]["scores"].tolist() == pytest.approx([0.9])


def test_regions_to_boxes_clips_to_the_map():
    prob = torch.zeros(1, 8, 8)
    prob[0, :, :] = 0.95
    (out,) = regions_to_boxes(prob)
    torch.testing.assert_close(out["boxes"], torch.tensor([[0.0, 0.0, 8.0, 8.0]]))


# -- CRNN: CTC greedy decoding --------------------------------------------------------------------
def test_ctc_greedy_decode_merges_repeats_and_drops_blanks():
    blank = 3
    paths = torch.tensor([[1, 1, 3, 1, 2, 2, 3], [3, 3, 3, 3, 3, 3, 3], [0, 3, 0, 0, 3, 3, 2]])
    logits = F.one_hot(paths, 4).float() * 5.0  # (B, T, C)
    out = ctc_greedy_decode(logits, blank)
    assert out["lengths"].tolist() == [3, 0, 3]
    assert out["tokens"][:, :4].tolist() == [[1, 1, 2, -1], [-1, -1, -1, -1], [0, 0, 2, -1]]
    assert (out["tokens"][:, 4:] == -1).all()
    expected_conf = math.exp(5) / (math.exp(5) + 3)  # every step's max probability
    torch.testing.assert_close(out["scores"], torch.full((3,), expected_conf))
    assert tokens_to_words(out, "abc") == ["bbc", "", "aac"]


def test_ctc_greedy_confidence_is_the_least_certain_step():
    logits = torch.log(torch.tensor([[[0.7, 0.2, 0.1], [0.1, 0.5, 0.4]]]))
    out = ctc_greedy_decode(logits, blank=2)
    assert out["scores"].item() == pytest.approx(0.5) and out["tokens"][0, :2].tolist() == [0, 1]


def test_crnn_shapes_and_ctc_loss():
    torch.manual_seed(0)
    model = CRNN(CRNNConfig())
    crops = torch.rand(2, 3, 32, 128) * 255
    assert model.logits(crops).shape == (2, 32, len(FRENCH_VOCAB) + 1)
    assert len(FRENCH_VOCAB) == 126  # docTR >= 1.0's VOCABS["french"]
    labels = torch.tensor([[5, 6, 7, 126], [1, 126, 126, 126]])
    loss = model(crops, labels, torch.tensor([3, 1]))["loss_ctc"]
    assert torch.isfinite(loss) and loss.item() > 0
    model.eval()
    out = model(crops)
    assert out["tokens"].shape == (2, 32) and out["lengths"].shape == (2,)


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="max_label_length"):
        torchgauge.create("crnn_vgg16_bn", mode="train", size="smoke", max_label_length=40)
    with pytest.raises(ValueError, match="multiple of 32"):
        torchgauge.create("doctr_det_predictor", mode="eval", size="smoke", image_size=50)


def test_bad_crop_size_is_rejected():
    with pytest.raises(ValueError, match="input_size"):
        torchgauge.create("doctr_reco_predictor", mode="eval", size="smoke", input_size=(20, 128))
