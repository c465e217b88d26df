"""Face recognition (ArcFace margin, batch-hard triplets) against hand computations and slow references."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

import torchgauge
from torchgauge.models.vision.face_recognition import (
    ArcFaceConfig,
    ArcFaceHead,
    FaceNetConfig,
    InceptionResnetV1,
    _block8,
    _block35,
    arcface_logits,
    batch_hard_triplets,
)

F64 = torch.float64


# -- ArcFace ------------------------------------------------------------------------------------------
def test_arcface_logits_add_the_margin_to_the_target_angle_only() -> None:
    cos = torch.tensor([[0.5, 0.0, -0.5], [1.0, 0.8, -1.0], [0.3, 0.2, 0.1]], dtype=F64)
    labels = torch.tensor([0, 2, -1])
    out = arcface_logits(cos.clone(), labels, s=64.0, margin=0.5)
    expected = 64.0 * cos.clone()
    expected[0, 0] = 64.0 * math.cos(math.acos(0.5) + 0.5)  # theta = pi / 3
    expected[1, 2] = 64.0 * math.cos(math.pi + 0.5)  # theta = pi: the margin goes past pi (no easy_margin)
    torch.testing.assert_close(out, expected)  # row 2 has label -1: no margin


def test_arcface_logits_backward_is_the_straight_through_scale() -> None:
    # CombinedMarginLoss edits the angles under no_grad: d out / d cos = s everywhere.
    cos = torch.rand(4, 6, dtype=F64, requires_grad=True)
    w = torch.randn(4, 6, dtype=F64)
    (arcface_logits(cos * 1.0, torch.tensor([1, 0, 5, 3]), s=64.0, margin=0.5) * w).sum().backward()
    torch.testing.assert_close(cos.grad, 64.0 * w)


def test_arcface_head_loss_matches_a_slow_reference() -> None:
    torch.manual_seed(0)
    cfg = ArcFaceConfig(embedding=8, num_classes=5)
    head = ArcFaceHead(cfg).double()
    emb = torch.randn(3, 8, dtype=F64)
    labels = torch.tensor([4, 0, 2])
    w = head.weight.detach()
    expected = 0.0
    for i, y in enumerate(labels.tolist()):
        cos = [float(emb[i] @ w[j] / (emb[i].norm() * w[j].norm())) for j in range(5)]
        logits = [64.0 * (math.cos(math.acos(c) + 0.5) if j == y else c) for j, c in enumerate(cos)]
        expected += (math.log(sum(math.exp(v - max(logits)) for v in logits)) + max(logits) - logits[y]) / 3
    assert head(emb, labels).item() == pytest.approx(expected, rel=1e-10)


def test_arcface_eval_score_is_one_for_a_face_and_its_mirror_image() -> None:
    w = torchgauge.create("arcface_iresnet50", mode="eval", size="smoke", batch_size=3)
    (images,) = w.inputs
    w.inputs = (torch.stack([images[:, 0], torch.flip(images[:, 0], dims=[3])], 1),)
    emb, score = w.step()
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(3, 2))
    torch.testing.assert_close(score, torch.ones(3))  # flip-summed embeddings are mirror-invariant


def test_arcface_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("arcface_iresnet50", mode="train", size="smoke", batch_size=8)
    w.optimizer.param_groups[0]["lr"] = w.optimizer.param_groups[1]["lr"] = 0.01
    losses = [w.step().item() for _ in range(15)]
    assert losses[-1] < 0.7 * losses[0]


def test_arcface_backbone_grad_is_clipped_to_norm_5() -> None:
    w = torchgauge.create("arcface_iresnet50", mode="train", size="smoke", batch_size=8)
    w.step()
    grads = [p.grad for p in w.module.backbone.parameters() if p.grad is not None]
    assert torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item() <= 5.0 + 1e-4


# -- FaceNet ------------------------------------------------------------------------------------------
def test_batch_hard_triplets_match_a_slow_search() -> None:
    gen = torch.Generator().manual_seed(3)
    emb = F.normalize(torch.randn(12, 5, generator=gen, dtype=F64))
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    pos, neg = batch_hard_triplets(emb, labels)
    for a in range(12):
        d = [float((emb[a] - emb[j]).norm()) for j in range(12)]
        same = [j for j in range(12) if labels[j] == labels[a] and j != a]
        other = [j for j in range(12) if labels[j] != labels[a]]
        assert pos[a].item() == max(same, key=lambda j: d[j])
        assert neg[a].item() == min(other, key=lambda j: d[j])


def test_batch_hard_triplets_of_a_lone_identity_are_self() -> None:
    emb = torch.eye(3, dtype=F64)
    pos, neg = batch_hard_triplets(emb, torch.tensor([0, 1, 1]))
    assert pos[0].item() == 0 and neg[0].item() in (1, 2)
    pos, neg = batch_hard_triplets(emb, torch.tensor([7, 7, 7]))
    assert neg.tolist() == [0, 1, 2]


def test_facenet_loss_is_the_hand_computed_hinge() -> None:
    w = torchgauge.create("facenet_triplet", mode="train", size="smoke")
    # four unit embeddings on a circle: identity 0 at angles 0 and 90 deg, identity 1 at 100 and 180 deg
    ang = torch.tensor([0.0, 90.0, 100.0, 180.0]).deg2rad()
    emb = torch.stack([ang.cos(), ang.sin()], 1)
    chord = lambda deg: 2 * math.sin(math.radians(deg) / 2)
    # anchors: 0 -> p 1 (90), n 2 (100); 1 -> p 0 (90), n 2 (10); 2 -> p 3 (80), n 1 (10); 3 -> p 2 (80), n 1 (90)
    hinge = [max(chord(p) - chord(n) + 0.2, 0.0) for p, n in [(90, 100), (90, 10), (80, 10), (80, 90)]]
    assert w.compute_loss(emb).item() == pytest.approx(sum(hinge) / 4, rel=1e-5)


def test_facenet_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("facenet_triplet", mode="train", size="smoke", batch_size=8)
    losses = [w.step().item() for _ in range(15)]
    assert min(losses[-3:]) < 0.7 * losses[0]


def test_residual_blocks_with_a_zero_mixing_conv_pass_the_input_through() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 16, 5, 5)
    for block, expected in [(_block35(16, 16), x.relu()), (_block8(16, 16, scale=1.0, relu=False), x)]:
        torch.nn.init.zeros_(block.conv2d.weight)
        torch.nn.init.zeros_(block.conv2d.bias)
        torch.testing.assert_close(block.eval()(x), expected)


def test_inception_resnet_v1_embeddings_are_unit_vectors_at_the_smallest_input() -> None:
    model = InceptionResnetV1(FaceNetConfig(divisor=16, repeats=(1, 1, 1), embedding=8)).eval()
    emb = model(torch.randn(2, 3, 75, 75))  # the unpadded stem needs >= 75 px: Mixed_7a sees 3x3
    assert emb.shape == (2, 8)
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(2))
