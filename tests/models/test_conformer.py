"""Conformer-CTC: mel filterbank, relative-position shift, greedy CTC decoding, padding, training."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.speech.conformer import (
    ConformerConfig,
    ConformerCTC,
    ctc_greedy_decode,
    hz_to_mel,
    mel_filterbank,
    mel_to_hz,
    rel_shift,
)
from torchgauge.registry import get_spec


# -- mel scale and filterbank ----------------------------------------------------------------------------
def test_mel_scale_known_values_and_round_trip() -> None:
    assert hz_to_mel(0.0).item() == 0.0
    assert hz_to_mel(700.0).item() == pytest.approx(2595 * math.log10(2))  # f = 700 Hz doubles 1 + f/700
    assert hz_to_mel(1000.0).item() == pytest.approx(1000.0, abs=0.1)  # the scale's anchor: 1 kHz ~ 1000 mel
    hz = torch.tensor([0.0, 20.0, 440.0, 4000.0, 8000.0], dtype=torch.float64)
    torch.testing.assert_close(mel_to_hz(hz_to_mel(hz)), hz)
    mel = torch.linspace(0, 2840, 7, dtype=torch.float64)
    torch.testing.assert_close(hz_to_mel(mel_to_hz(mel)), mel)


def test_mel_filterbank_shape_and_every_filter_nonzero() -> None:
    fb = mel_filterbank(80, 400, 16_000)
    assert fb.shape == (80, 201)
    assert (fb >= 0).all() and (fb <= 1).all()
    assert (fb.sum(1) > 0).all()  # no empty band at 80 mels, 40 Hz bins


def test_mel_filterbank_single_filter_by_hand() -> None:
    # n_fft 8 at 16 Hz: bins at 0, 2, 4, 6, 8 Hz; one filter with edges 0, c, 8 Hz, c the mel midpoint
    c = mel_to_hz(hz_to_mel(8.0) / 2).item()
    assert 3.9 < c < 4.0  # the mel scale is nearly linear at a few Hz
    expected = torch.tensor([[0.0, 2 / c, (8 - 4) / (8 - c), (8 - 6) / (8 - c), 0.0]], dtype=torch.float64)
    torch.testing.assert_close(mel_filterbank(1, 8, 16), expected)


def test_mel_filters_are_triangles_peaking_at_their_centres() -> None:
    sr, n_mels = 16_000, 80
    fb = mel_filterbank(n_mels, sr, sr)  # n_fft = sr: bins 1 Hz apart, so the peaks are resolved
    edges = mel_to_hz(torch.linspace(0, hz_to_mel(sr / 2).item(), n_mels + 2, dtype=torch.float64))
    for m in range(n_mels):
        row, (left, centre, right) = fb[m], edges[m : m + 3].tolist()
        peak = int(row.argmax())
        assert abs(peak - centre) <= 1.0, f"filter {m}: peak at {peak} Hz, centre {centre:.1f} Hz"
        assert row[peak] > 0.95
        assert (row[: peak + 1].diff() >= 0).all() and (row[peak:].diff() <= 0).all()  # rises, then falls
        bins = torch.arange(row.numel(), dtype=torch.float64)
        assert (row[(bins <= left) | (bins >= right)] == 0).all()
        assert (row[(bins > left) & (bins < right)] > 0).all()
    # Between the first and the last centre, neighbouring triangles sum to one.
    inside = (torch.arange(fb.size(1)) >= edges[1]) & (torch.arange(fb.size(1)) <= edges[-2])
    torch.testing.assert_close(fb[:, inside].sum(0), torch.ones(int(inside.sum()), dtype=torch.float64))


# -- attention ----------------------------------------------------------------------------------------------
def test_rel_shift_indexes_relative_distance() -> None:
    T = 5
    x = torch.randn(2, 3, T, 2 * T - 1)
    expected = torch.empty(2, 3, T, T)
    for i in range(T):
        for j in range(T):
            expected[..., i, j] = x[..., i, T - 1 - i + j]  # column p holds distance i - j = T - 1 - p
    assert torch.equal(rel_shift(x), expected)


# -- greedy CTC decoding ------------------------------------------------------------------------------------
def test_ctc_greedy_decode_hand_written_paths() -> None:
    paths = torch.tensor(
        [
            [0, 1, 1, 0, 1, 2, 2, 0, 0],  # "a a b": a blank separates the repeated 1
            [3, 3, 3, 0, 4, 4, 5, 5, 5],  # only the first 5 frames are valid: "c d"
            [0, 0, 0, 0, 0, 0, 0, 0, 0],  # all blank: nothing
        ]
    )
    logits = torch.nn.functional.one_hot(paths, 6).float() * 4.0 - 2.0
    labels, counts = ctc_greedy_decode(logits, torch.tensor([9, 5, 9]))
    assert counts.tolist() == [3, 2, 0]
    assert labels.tolist() == [
        [1, 1, 2, -1, -1, -1, -1, -1, -1],
        [3, 4, -1, -1, -1, -1, -1, -1, -1],
        [-1] * 9,
    ]


# -- the model -----------------------------------------------------------------------------------------------
def _conformer_param_count(cfg: ConformerConfig) -> int:
    d, k = cfg.d_model, cfg.conv_kernel
    ffn = 2 * d + (d * cfg.ff_mult * d + cfg.ff_mult * d) + (cfg.ff_mult * d * d + d)  # LayerNorm, 2 Linears
    attn = 2 * d + 4 * (d * d + d) + d * d + 2 * d  # LayerNorm, q/k/v/out, position projection, u and v biases
    conv = 2 * d + (d * 2 * d + 2 * d) + (k * d + d) + 2 * d + (d * d + d)  # LN, pointwise, depthwise, BN, pointwise
    block = 2 * ffn + attn + conv + 2 * d  # and the final LayerNorm
    freq = ((cfg.n_mels - 1) // 2 - 1) // 2
    subsampling = (9 * d + d) + (9 * d * d + d) + (d * freq * d + d)
    return subsampling + cfg.n_layers * block + (d * cfg.vocab_size + cfg.vocab_size)


def test_conformer_s_parameter_count_by_formula() -> None:
    cfg = ConformerConfig()
    assert _conformer_param_count(cfg) == 8_694_317 == get_spec("conformer_ctc").param_count
    head = cfg.d_model * cfg.vocab_size + cfg.vocab_size
    assert _conformer_param_count(cfg) - head == 8_690_112  # the encoder alone, vs the paper's 10.3 M with decoder
    small = ConformerConfig(d_model=32, n_layers=2)
    assert sum(p.numel() for p in ConformerCTC(small).parameters()) == _conformer_param_count(small)


def test_padding_does_not_change_valid_outputs() -> None:
    torch.manual_seed(0)
    model = ConformerCTC(ConformerConfig(d_model=32, n_layers=2)).eval()
    feats, frames = torch.randn(2, 60, 80), torch.tensor([60, 37])
    changed = feats.clone()
    changed[1, 37:] = 100.0  # garbage in the padded frames of the shorter utterance
    with torch.no_grad():
        logits, lengths = model.encode(feats, frames)
        logits2, _ = model.encode(changed, frames)
    assert lengths.tolist() == [14, 8]  # ((T - 1) // 2 - 1) // 2
    torch.testing.assert_close(logits2[1, :8], logits[1, :8])
    torch.testing.assert_close(logits2[0], logits[0])


def test_spec_augment_is_seeded_and_only_in_training() -> None:
    a = torchgauge.create("conformer_ctc", mode="train", size="smoke")
    b = torchgauge.create("conformer_ctc", mode="train", size="smoke")
    feats, frames = a.module.front_end(*a.inputs)
    masked_a = a.module.spec_augment(feats, frames)
    masked_b = b.module.spec_augment(feats, frames)
    assert torch.equal(masked_a, masked_b)  # same seed, same masks
    assert (masked_a == 0).sum() > (feats == 0).sum()


def test_ctc_loss_finite_and_falls_on_a_fixed_batch() -> None:
    torch.manual_seed(0)
    w = torchgauge.create("conformer_ctc", mode="train", size="smoke", dropout=0.0)
    losses = [w.step().item() for _ in range(12)]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.7 * losses[0], losses


def test_eval_decodes_within_the_output_lengths() -> None:
    w = torchgauge.create("conformer_ctc", mode="eval", size="smoke", batch_size=3)
    labels, counts, score = w.step()
    wave, lengths = w.inputs
    out_lengths = ((lengths // 160) // 2 - 1) // 2  # ((frames - 1) // 2 - 1) // 2 with frames = 1 + n // hop
    assert labels.shape[0] == 3 and (counts <= out_lengths).all()
    assert ((labels >= 1) == (torch.arange(labels.size(1)) < counts[:, None])).all()
    assert (score <= 0).all()
