"""Knowledge-graph link prediction (TransE, NTN) against hand-computed values and slow references."""

from __future__ import annotations

import torch

import torchgauge
from torchgauge.models.recommendation.knowledge_graph import (
    NTN,
    NTNConfig,
    TransE,
    TransEConfig,
    corrupt,
    ntn_loss,
    rank_of_truth,
)

F64 = torch.float64


def test_transe_distance_of_a_hand_computed_triple() -> None:
    model = TransE(TransEConfig(num_entities=3, num_relations=2, dim=3, norm=1))
    with torch.no_grad():
        model.entities.weight.copy_(torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [3.0, 3.0, 3.0]]))
        model.relations.weight.copy_(torch.tensor([[0.5, -1.0, 0.0], [1.0, 1.0, 1.0]]))
    # h + r - t = (1, 0, 2) + (0.5, -1, 0) - (0, 1, 0) = (1.5, -2, 2): L1 5.5; with norm=2, sqrt(10.25)
    triple = torch.tensor([[0, 0, 1]])
    assert model.distance(triple).tolist() == [5.5]
    model.cfg = TransEConfig(num_entities=3, num_relations=2, dim=3, norm=2)
    torch.testing.assert_close(model.distance(triple), torch.tensor([10.25]).sqrt())


def test_transe_relations_start_at_unit_l1_norm_and_entities_are_renormalised_every_forward() -> None:
    torch.manual_seed(0)
    model = TransE(TransEConfig(num_entities=20, num_relations=4, dim=8))
    torch.testing.assert_close(model.relations.weight.norm(p=1, dim=1), torch.ones(4))
    assert (model.entities.weight.norm(dim=1) > 1).any()  # uniform(+-6/sqrt(d)) rows are longer
    triples = torch.tensor([[0, 1, 2], [3, 0, 4]])
    model(triples, triples)
    norms = model.entities.weight.norm(dim=1)
    assert (norms <= 1 + 1e-6).all()
    torch.testing.assert_close(norms, torch.ones(20))


def test_corrupt_replaces_exactly_the_chosen_side() -> None:
    triples = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8]])
    neg = corrupt(triples, torch.tensor([True, False, True]), torch.tensor([10, 11, 12]))
    assert neg.tolist() == [[10, 1, 2], [3, 4, 11], [12, 7, 8]]


def test_rank_of_truth_on_a_hand_made_score_matrix() -> None:
    scores = torch.tensor([
        [0.3, 0.1, 0.9, 0.5],  # ascending: 1, 0, 3, 2
        [2.0, 1.0, 0.0, 3.0],  # ascending: 2, 1, 0, 3
        [0.0, 0.2, 0.4, 0.6],
    ])  # fmt: skip
    truth = torch.tensor([0, 3, 0])
    ranks = rank_of_truth(scores, truth)
    assert ranks.tolist() == [2, 4, 1]
    mrr = (1 / ranks.float()).mean()
    torch.testing.assert_close(mrr, torch.tensor((1 / 2 + 1 / 4 + 1) / 3))


def _ntn(seed: int = 0) -> NTN:
    torch.manual_seed(seed)
    model = NTN(NTNConfig(num_entities=7, num_relations=3, dim=5, slices=4)).double()
    with torch.no_grad():  # move off the reference init (V = 0, b = 0, u = 1) so every term counts
        for p in model.parameters():
            p.normal_()
    return model


def _slow_ntn_score(model: NTN, h: int, r: int, t: int) -> torch.Tensor:
    """u_R^T tanh(e1^T W_R^[k] e2 + V_R [e1; e2] + b_R), one slice at a time."""
    e1, e2 = model.entities[h], model.entities[t]
    hidden = []
    for k in range(model.cfg.slices):
        pre = e1 @ model.W[r, k] @ e2 + model.V[r, k] @ torch.cat((e1, e2)) + model.b[r, k]
        hidden.append(torch.tanh(pre))
    return torch.stack(hidden) @ model.U[r]


def test_ntn_scores_match_a_slow_per_slice_loop() -> None:
    model = _ntn()
    positive = torch.tensor([[0, 2, 1], [3, 0, 4], [5, 2, 6], [1, 1, 1]])
    negative = torch.tensor([[6, 2, 1], [3, 0, 2], [0, 2, 6], [1, 1, 5]])
    with torch.no_grad():
        pos, neg = model(positive, negative)
        for i in range(4):
            torch.testing.assert_close(pos[i], _slow_ntn_score(model, *positive[i].tolist()))
            torch.testing.assert_close(neg[i], _slow_ntn_score(model, *negative[i].tolist()))


def test_ntn_all_entity_scores_match_the_slow_loop_on_both_sides() -> None:
    model = _ntn(1)
    h, r, t = torch.tensor([0, 4]), torch.tensor([2, 1]), torch.tensor([3, 3])
    with torch.no_grad():
        tails = model.score_all(h, r, fixed_is_head=True)  # (2, 7): (h, r, e)
        heads = model.score_all(t, r, fixed_is_head=False)  # (2, 7): (e, r, t)
        for b in range(2):
            for e in range(7):
                torch.testing.assert_close(tails[b, e], _slow_ntn_score(model, h[b].item(), r[b].item(), e))
                torch.testing.assert_close(heads[b, e], _slow_ntn_score(model, e, r[b].item(), t[b].item()))


def test_ntn_loss_is_the_hinge_sum_per_batch_plus_half_lambda_l2() -> None:
    model = _ntn()
    pos, neg = torch.tensor([2.0, 0.5], dtype=F64), torch.tensor([0.0, 1.0], dtype=F64)
    # max(0, 1 - 2 + 0) + max(0, 1 - 0.5 + 1) = 0 + 1.5, over a batch of 3 positives
    l2 = sum(p.pow(2).sum() for p in model.parameters())
    expected = 1.5 / 3 + 0.5 * model.cfg.lamda * l2
    torch.testing.assert_close(ntn_loss(model, pos, neg, batch=3), expected)


def test_transe_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("transe_fb15k237", mode="train", size="smoke", batch_size=16)
    first = w.step().item()
    for _ in range(30):
        last = w.step().item()
    assert first > 0 and last < 0.5 * first


def test_ntn_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("ntn_fb15k237", mode="train", size="smoke", batch_size=8)
    with torch.no_grad():
        first = w.compute_loss(w.forward()).item()
    for _ in range(5):
        w.step()
    with torch.no_grad():
        last = w.compute_loss(w.forward()).item()
    assert last < 0.9 * first


def test_eval_returns_one_rank_per_query_side_within_range() -> None:
    for name in ("transe_fb15k237", "ntn_fb15k237"):
        w = torchgauge.create(name, mode="eval", size="smoke", batch_size=3)
        ranks = w.step()
        assert ranks.shape == (6,)
        assert ((ranks >= 1) & (ranks <= w.module.cfg.num_entities)).all()
