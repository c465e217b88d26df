"""Skip-gram with negative sampling: the loss by hand, the noise distribution, sparse updates, neighbours."""

from __future__ import annotations

import math

import torch

import torchgauge
from torchgauge.models.nlp.word2vec import SkipGram, SkipGramConfig, noise_distribution, zipf_counts


def _model(u: list[list[float]], v: list[list[float]]) -> SkipGram:
    model = SkipGram(SkipGramConfig(vocab_size=len(u), dim=len(u[0])))
    with torch.no_grad():
        model.u_embeddings.weight.copy_(torch.tensor(u))
        model.v_embeddings.weight.copy_(torch.tensor(v))
    return model


def test_loss_by_hand() -> None:
    # u_0 . v_1 = 2 (positive pair); negatives 2 and 3: u_0 . v_2 = 0, u_0 . v_3 = -1
    model = _model([[1, 0], [0, 0], [0, 0], [0, 0]], [[0, 0], [2, 0], [0, 1], [-1, 0]])
    loss = model(torch.tensor([0]), torch.tensor([1]), torch.tensor([[2, 3]]))
    softplus = lambda x: math.log1p(math.exp(x))  # -log sigmoid(x) = softplus(-x)
    expected = softplus(-2) + softplus(0) + softplus(-1)
    assert math.isclose(loss.item(), expected, rel_tol=1e-6)


def test_scores_are_clamped_at_ten() -> None:
    model = _model([[30, 0], [0, 0]], [[0, 0], [1, 0]])  # score 30 -> 10; negative score 0
    loss = model(torch.tensor([0]), torch.tensor([1]), torch.tensor([[0]]))
    assert math.isclose(loss.item(), math.log1p(math.exp(-10)) + math.log(2), rel_tol=1e-6)


def test_noise_distribution_is_unigram_to_the_three_quarters() -> None:
    counts = torch.tensor([16.0, 1.0, 81.0], dtype=torch.float64)
    p = noise_distribution(counts)
    torch.testing.assert_close(p, torch.tensor([8.0, 1.0, 27.0]) / 36)  # 16^0.75 = 8, 81^0.75 = 27
    draws = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(torch.bincount(draws, minlength=3) / 200_000, p, atol=5e-3, rtol=0)
    assert zipf_counts(4).tolist() == [1e6, 5e5, 1e6 / 3, 2.5e5]


def test_sparse_adam_moves_only_the_rows_the_batch_touched() -> None:
    w = torchgauge.create("word2vec_skipgram", mode="train", size="smoke")
    u_before = w.module.u_embeddings.weight.detach().clone()
    v_before = w.module.v_embeddings.weight.detach().clone()
    center, context = w.inputs[0], w.inputs[1]
    w.step()
    assert w.module.u_embeddings.weight.grad.is_sparse
    # v starts at zero, so the first step's u gradient is zero: no u row moves yet
    torch.testing.assert_close(w.module.u_embeddings.weight, u_before, rtol=0, atol=0)
    v_changed = (w.module.v_embeddings.weight != v_before).any(1)
    assert v_changed[context].all()  # context rows always get a gradient (-sigmoid(0) u)
    w.step()
    u_changed = (w.module.u_embeddings.weight != u_before).any(1)
    untouched = ~torch.isin(torch.arange(u_changed.numel()), center)
    assert u_changed[center].all() and not u_changed[untouched].any()


def test_most_similar_ranks_by_cosine_and_skips_the_word_itself() -> None:
    # word 0 is (1, 0); cosines: word 1 (2, 0.1) ~ 0.999, word 2 (0, 3) 0, word 3 (-1, -1) -0.707, word 4 (1, 1) 0.707
    model = _model([[1, 0], [2, 0.1], [0, 3], [-1, -1], [1, 1]], [[0, 0]] * 5)
    sims, ids = model.most_similar(torch.tensor([0, 2]), k=3)
    assert ids[0].tolist() == [1, 4, 2]
    assert ids[1].tolist()[:2] == [4, 1]  # (1, 1) is closer to (0, 3) than (2, 0.1)
    torch.testing.assert_close(sims[0, 1], torch.tensor(1 / math.sqrt(2)))
