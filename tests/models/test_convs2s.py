"""ConvS2S (fairseq fconv): ConvTBC, causality, incremental = full decoding, label smoothing, padding."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

import torchgauge
from torchgauge.models.nlp.convs2s import (
    EOS,
    PAD,
    ConvS2S,
    ConvS2SConfig,
    ConvTBC,
    GradMultiply,
    LinearizedConvolution,
    _fold_weight_norm,
    label_smoothed_nll_loss,
    make_positions,
)

F64 = torch.float64
TINY = ConvS2SConfig(
    src_vocab=30,
    tgt_vocab=20,
    embed_dim=8,
    encoder_layers=((8, 3), (12, 3)),
    decoder_layers=((8, 3), (12, 3), (12, 2)),
    decoder_out_embed_dim=6,
    max_positions=64,
)


def _model(seed: int = 0) -> ConvS2S:
    torch.manual_seed(seed)
    return ConvS2S(TINY).double().eval()  # eval: dropout off


def _src() -> torch.Tensor:
    return torch.tensor([[7, 8, 9, 10, 11, EOS], [PAD, PAD, 12, 13, 14, EOS]])


def test_conv_tbc_is_a_time_major_conv1d() -> None:
    torch.manual_seed(0)
    conv = ConvTBC(3, 5, 3, padding=1, dropout=0.0).double()
    x = torch.randn(7, 2, 3, dtype=F64)  # (T, B, C)
    ref = F.conv1d(x.permute(1, 2, 0), conv.weight.permute(2, 1, 0), conv.bias, padding=1)  # (B, C_out, T)
    torch.testing.assert_close(conv(x), ref.permute(2, 0, 1))


def test_linearized_convolution_is_causal() -> None:
    torch.manual_seed(0)
    conv = LinearizedConvolution(3, 4, 3, padding=2, dropout=0.0).double()
    x = torch.randn(6, 1, 3, dtype=F64)
    y = x.clone()
    y[4:] += 1.0
    out_x, out_y = conv(x), conv(y)
    assert out_x.shape == (6, 1, 4)
    torch.testing.assert_close(out_x[:4], out_y[:4])
    assert not torch.allclose(out_x[4:], out_y[4:])


def test_incremental_decoding_equals_the_full_decoder() -> None:
    # teacher-forced one token at a time through the conv buffers = one parallel forward
    model = _model()
    src = _src()
    prev = torch.tensor([[EOS, 3, 4, 5, 6, 7], [EOS, 8, 9, 10, 11, 12]])
    encoder_out = model.encoder(src)
    full = model.decoder(prev, encoder_out)  # (B, T, V)
    z, values, pad_mask = encoder_out
    keys = z.transpose(1, 2).contiguous()
    buffers = [None] * len(model.decoder.convolutions)
    steps = [model.decoder.incremental_forward(prev[:, t : t + 1], t, keys, values, pad_mask, buffers)
             for t in range(prev.size(1))]  # fmt: skip
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_greedy_decode_matches_a_slow_full_recompute_and_survives_weight_norm_folding() -> None:
    model = _model(1)
    src = _src()
    with torch.no_grad():
        tokens, score = model.greedy_decode(src, steps=5)
        prev, total = torch.full((2, 1), EOS), torch.zeros(2, dtype=F64)
        for _ in range(5):  # slow reference: the whole prefix through the parallel decoder every step
            lprobs = F.log_softmax(model(src, prev)[:, -1], dim=-1)
            lprobs[:, PAD] = -math.inf
            best, token = lprobs.max(-1, keepdim=True)
            prev, total = torch.cat([prev, token], dim=1), total + best.squeeze(1)
        assert torch.equal(tokens, prev[:, 1:])
        torch.testing.assert_close(score, total.float())
        _fold_weight_norm(model)
        assert not any("parametrizations" in n for n, _ in model.named_parameters())
        folded_tokens, folded_score = model.greedy_decode(src, steps=5)
    assert torch.equal(folded_tokens, tokens)
    torch.testing.assert_close(folded_score, score)


def test_padding_does_not_change_a_sentence_translation() -> None:
    # the same source sentence with and without left padding: same encoder output on its tokens
    model = _model()
    short = torch.tensor([[12, 13, 14, EOS]])
    padded = torch.tensor([[PAD, PAD, 12, 13, 14, EOS]])
    with torch.no_grad():
        a = model.greedy_decode(short, steps=4)
        b = model.greedy_decode(padded, steps=4)
    assert torch.equal(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])
    assert make_positions(padded).tolist() == [[PAD, PAD, PAD + 1, PAD + 2, PAD + 3, PAD + 4]]


def test_label_smoothing_is_cross_entropy_with_a_smoothed_target() -> None:
    torch.manual_seed(0)
    lprobs = F.log_softmax(torch.randn(5, 7, dtype=F64), dim=-1)
    target = torch.tensor([3, 0, PAD, 6, 2])
    eps = 0.1
    q = torch.full((5, 7), eps / 6, dtype=F64).scatter(1, target[:, None], 1 - eps)  # eps spread on the others
    expected = -(q * lprobs).sum(-1)[target != PAD].sum()
    torch.testing.assert_close(label_smoothed_nll_loss(lprobs, target, eps), expected)


def test_grad_multiply_scales_only_the_gradient() -> None:
    x = torch.randn(3, requires_grad=True)
    y = GradMultiply.apply(x, 0.25)
    torch.testing.assert_close(y, x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 0.25))


def test_batches_are_fairseq_shaped() -> None:
    w = torchgauge.create("convs2s_iwslt_de_en", mode="train", size="smoke", batch_size=6)
    src, prev = w.inputs
    target = w.targets
    assert (src[:, -1] == EOS).all()  # left-padded sources end with </s>
    assert (prev[:, 0] == EOS).all() and (prev[:, 1:] != EOS).all()  # </s> moved to the front
    assert torch.equal(prev[:, 1:], torch.where(target[:, :-1] == EOS, PAD, target[:, :-1]))
    assert ((target == EOS).sum(1) == 1).all()


def test_training_lowers_the_loss_on_a_fixed_batch() -> None:
    w = torchgauge.create("convs2s_iwslt_de_en", mode="train", size="smoke", dropout=0.0)
    losses = [w.step().item() for _ in range(15)]
    assert losses[-1] < 0.9 * losses[0]
