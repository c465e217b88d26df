"""Building blocks of the recommendation models against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from torchgauge.models.recommendation.deep_recommender import masked_mse
from torchgauge.models.recommendation.dlrm import DLRMConfig, DotInteraction, interaction_output_dim, random_bags
from torchgauge.workload import BuildContext


@pytest.mark.parametrize(
    "num_features,dim,itself,expected",
    [(9, 64, False, 36 + 64), (9, 64, True, 45 + 64), (27, 16, False, 351 + 16), (2, 4, False, 1 + 4)],
)
def test_interaction_output_dim_formula(num_features: int, dim: int, itself: bool, expected: int) -> None:
    assert interaction_output_dim(num_features, dim, itself) == expected
    dense = torch.randn(3, dim)
    pooled = [torch.randn(3, dim) for _ in range(num_features - 1)]
    assert DotInteraction(num_features, itself)(dense, pooled).shape == (3, expected)


def test_dlrm_default_top_mlp_input_is_the_reference_100() -> None:
    # 8 tables + dense = 9 features: 36 pairs + 64 dense values (dlrm_s_pytorch's num_int).
    assert DLRMConfig().num_interactions == 100


def test_dot_interaction_values_keep_each_pair_once() -> None:
    dense = torch.tensor([[1.0, 0.0]])  # f0
    pooled = [torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 1.0]])]  # f1, f2
    out = DotInteraction(3)(dense, pooled)
    # dense, then f1.f0 = 0, f2.f0 = 1, f2.f1 = 1 (pairs i > j in row-major order)
    assert out.tolist() == [[1.0, 0.0, 0.0, 1.0, 1.0]]
    with_self = DotInteraction(3, itself=True)(dense, pooled)
    # adds the squared norms f0.f0 = 1, f1.f1 = 1, f2.f2 = 2 on the diagonal
    assert with_self.tolist() == [[1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 2.0]]


def test_embedding_bag_offsets_match_a_manual_sum() -> None:
    ctx = BuildContext(name="bags", mode="eval", device=torch.device("cpu"), batch_size=5, size="full")
    offsets, indices = random_bags(ctx, batch=5, rows=20, max_lookups=4, fixed=False)
    bag = torch.nn.EmbeddingBag(20, 3, mode="sum")
    ends = torch.cat([offsets[1:], torch.tensor([indices.numel()])])
    manual = torch.stack([bag.weight[indices[s:e]].sum(0) for s, e in zip(offsets.tolist(), ends.tolist())])
    torch.testing.assert_close(bag(indices, offsets), manual)
    assert offsets[0] == 0 and (ends - offsets).min() >= 1 and (ends - offsets).max() <= 4


def test_fixed_bags_hold_exactly_the_lookup_count() -> None:
    ctx = BuildContext(name="bags", mode="eval", device=torch.device("cpu"), batch_size=3, size="full")
    offsets, indices = random_bags(ctx, batch=3, rows=1000, max_lookups=100, fixed=True)
    assert offsets.tolist() == [0, 100, 200] and indices.numel() == 300
    assert 0 <= int(indices.min()) and int(indices.max()) < 1000


def test_masked_mse_counts_only_rated_items() -> None:
    predictions = torch.tensor([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]])
    ratings = torch.tensor([[0.0, 4.0, 5.0], [0.0, 0.0, 1.0]])
    # rated errors: (2-4)^2 + (3-5)^2 + (4-1)^2 = 4 + 4 + 9 = 17 over 3 ratings
    assert masked_mse(predictions, ratings).item() == pytest.approx(17 / 3)
