"""pytorch/examples word_language_model: carried state, causality, positions, the hand-written SGD step."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

import torchgauge
from torchgauge.models.nlp.word_language_model import (
    PositionalEncoding,
    RNNModel,
    TransformerModel,
    WordLMConfig,
    repackage_hidden,
)

SMALL = dict(ntoken=50, emsize=8, nhid=12, nlayers=2, dropout=0.0)


@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"])
def test_carried_hidden_state_makes_two_chunks_one_sequence(rnn_type: str) -> None:
    # truncated BPTT only cuts the graph: the forward of chunk B after chunk A, with A's final
    # state carried (and detached), is the forward of A + B in one go
    torch.manual_seed(0)
    model = RNNModel(WordLMConfig(rnn_type=rnn_type, **SMALL)).double().eval()
    ids = torch.randint(0, 50, (10, 3))
    whole, _ = model(ids, model.init_hidden(3))
    first, hidden = model(ids[:6], model.init_hidden(3))
    second, _ = model(ids[6:], repackage_hidden(hidden))
    torch.testing.assert_close(torch.cat([first, second]), whole)
    assert torch.allclose(whole.exp().sum(-1), torch.ones(30, dtype=torch.float64))  # log-probabilities


def test_transformer_outputs_do_not_depend_on_later_tokens() -> None:
    torch.manual_seed(0)
    model = TransformerModel(WordLMConfig(rnn_type="Transformer", **{**SMALL, "nhid": 16})).double().eval()
    ids = torch.randint(0, 50, (7, 2))
    changed = ids.clone()
    changed[4:] = (changed[4:] + 1) % 50
    out, out_changed = model(ids).view(7, 2, 50), model(changed).view(7, 2, 50)
    torch.testing.assert_close(out[:4], out_changed[:4])
    assert not torch.allclose(out[4:], out_changed[4:])
    assert model.src_mask[0, 1] == float("-inf") and model.src_mask[1, 0] == 0


def test_positional_encoding_is_the_sinusoid_table() -> None:
    pe = PositionalEncoding(6, dropout=0.0).pe  # (max_len, 1, 6)
    pos, i = 3, 2  # channel pair (4, 5): frequency 10000^(-4/6)
    angle = pos / 10000 ** (2 * i / 6)
    torch.testing.assert_close(pe[pos, 0, 2 * i], torch.tensor(math.sin(angle)))
    torch.testing.assert_close(pe[pos, 0, 2 * i + 1], torch.tensor(math.cos(angle)))


def test_train_step_is_clipped_plain_sgd() -> None:
    w = torchgauge.create("word_language_model_gru", mode="train", size="smoke", dropout=0.0)
    before = {n: p.detach().clone() for n, p in w.module.named_parameters()}
    data, targets = w.inputs
    # slow reference: NLL, gradient, global norm clipped to 0.25, p -= 20 g
    log_probs, _ = w.module(data, w.module.init_hidden(data.size(1)))
    grads = torch.autograd.grad(F.nll_loss(log_probs, targets), list(w.module.parameters()))
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    scale = min(1.0, 0.25 / (norm.item() + 1e-6))
    expected = {n: before[n] - 20.0 * scale * g for (n, _), g in zip(w.module.named_parameters(), grads)}
    w.step()
    for name, p in w.module.named_parameters():
        torch.testing.assert_close(p.detach(), expected[name], rtol=1e-4, atol=1e-6)
