"""Forecasting models (Autoformer, TFT, DeepAR, PatchTST) against hand-computed answers and slow references."""

from __future__ import annotations

import pytest
import torch

from torchgauge.models.other.timeseries.autoformer import (
    AutoCorrelation,
    Autoformer,
    AutoformerConfig,
    MovingAverage,
    cross_correlation,
)
from torchgauge.models.other.timeseries.deepar import DeepAR, DeepARConfig, lagged_values, negative_binomial
from torchgauge.models.other.timeseries.patchtst import PatchTST, PatchTSTConfig, ResidualAttention, RevIN, patchify
from torchgauge.models.other.timeseries.temporal_fusion_transformer import (
    GatedResidualNetwork,
    TemporalFusionTransformer,
    TFTConfig,
    VariableSelectionNetwork,
    quantile_loss,
)

F64 = torch.float64


def _loss_falls(model: torch.nn.Module, loss_fn, steps: int = 30, lr: float = 1e-2) -> tuple[float, float]:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


# -- Autoformer --------------------------------------------------------------------------------------------
def test_moving_average_matches_a_window_mean_over_the_end_padded_series() -> None:
    x = torch.randn(2, 11, 3, dtype=F64)
    kernel, pad = 5, 2
    padded = torch.cat([x[:, :1].expand(-1, pad, -1), x, x[:, -1:].expand(-1, pad, -1)], dim=1)
    slow = torch.stack([padded[:, t : t + kernel].mean(1) for t in range(11)], dim=1)
    torch.testing.assert_close(MovingAverage(kernel)(x), slow)


def test_moving_average_keeps_a_line_in_the_interior() -> None:
    line = torch.arange(20, dtype=F64).view(1, 20, 1) * 0.5 + 3
    trend = MovingAverage(5)(line)
    torch.testing.assert_close(trend[:, 2:-2], line[:, 2:-2])  # the symmetric window averages to the centre


def test_cross_correlation_is_the_circular_lagged_product() -> None:
    q, k = torch.randn(2, 3, 12, dtype=F64), torch.randn(2, 3, 12, dtype=F64)
    slow = torch.stack([(torch.roll(q, -tau, -1) * k).sum(-1) for tau in range(12)], dim=-1)  # q[t + tau] k[t]
    torch.testing.assert_close(cross_correlation(q, k), slow)


def test_auto_correlation_of_a_periodic_series_peaks_at_multiples_of_the_period() -> None:
    t = torch.arange(48, dtype=F64)
    x = torch.sin(2 * torch.pi * t / 12).view(1, 1, 1, 48)
    corr = cross_correlation(x, x)[0, 0, 0]
    top = set(torch.topk(corr, 4).indices.tolist())
    assert top == {0, 12, 24, 36}


def test_delay_aggregation_inference_matches_a_slow_per_sample_roll() -> None:
    torch.manual_seed(0)
    ac = AutoCorrelation(factor=1)
    values, corr = torch.randn(3, 2, 4, 16, dtype=F64), torch.randn(3, 2, 4, 16, dtype=F64)
    k = ac.top_k(16)
    weights, delays = torch.topk(corr.mean(dim=(1, 2)), k, dim=-1)
    weights = torch.softmax(weights, -1)
    slow = torch.stack(
        [sum(weights[b, i] * torch.roll(values[b], -int(delays[b, i]), -1) for i in range(k)) for b in range(3)]
    )
    torch.testing.assert_close(ac.delay_agg_inference(values, corr), slow)


def test_training_and_inference_aggregation_agree_when_the_batch_shares_its_delays() -> None:
    ac = AutoCorrelation(factor=2)
    values = torch.randn(1, 2, 3, 20, dtype=F64).expand(4, -1, -1, -1)
    corr = torch.randn(1, 2, 3, 20, dtype=F64).expand(4, -1, -1, -1)  # same top-k for every sample
    torch.testing.assert_close(ac.delay_agg_training(values, corr), ac.delay_agg_inference(values, corr))


def _tiny_autoformer() -> tuple[Autoformer, tuple[torch.Tensor, ...], torch.Tensor]:
    torch.manual_seed(0)
    cfg = AutoformerConfig(
        seq_len=32, label_len=16, pred_len=16, d_model=16, n_heads=2, d_ff=32, moving_avg=5, dropout=0.0
    )
    t = torch.arange(48, dtype=torch.float32)
    series = torch.stack([torch.sin(2 * torch.pi * (t + s) / 8) for s in range(4)]).unsqueeze(-1).repeat(1, 1, 7)
    marks = torch.zeros(4, 48, 4)
    return Autoformer(cfg), (series[:, :32], marks[:, :32], marks[:, 16:]), series[:, 32:]


def test_autoformer_output_shape_and_zero_padded_cross_attention() -> None:
    model, inputs, target = _tiny_autoformer()
    model.eval()  # decoder (32 steps) longer than encoder (32): equal here; check the padding path separately
    assert model(*inputs).shape == target.shape
    layer = model.decoder[0].cross_attention
    out = layer(torch.randn(2, 24, 16), torch.randn(2, 10, 16))  # L = 24 > S = 10: keys/values zero-padded
    assert out.shape == (2, 24, 16) and torch.isfinite(out).all()


def test_autoformer_mse_falls_on_a_fixed_batch() -> None:
    model, inputs, target = _tiny_autoformer()
    first, last = _loss_falls(model, lambda: torch.nn.functional.mse_loss(model(*inputs), target), lr=3e-3)
    assert last < 0.5 * first


def test_autoformer_full_parameter_count_matches_the_layer_arithmetic() -> None:
    d, ff, c = 512, 2048, 7
    attention = 4 * (d * d + d)
    encoder_layer = attention + 2 * d * ff
    decoder_layer = 2 * attention + 2 * d * ff + d * c * 3
    expected = 2 * (c * d * 3 + 4 * d) + 2 * encoder_layer + decoder_layer + 2 * 2 * d + (d * c + c)
    assert sum(p.numel() for p in Autoformer(AutoformerConfig()).parameters()) == expected == 10_535_943


# -- Temporal Fusion Transformer ---------------------------------------------------------------------------
def test_quantile_loss_hand_computed() -> None:
    pred = torch.tensor([[0.0, 1.0, 3.0]])  # y = 1: errors 1, 0, -2
    # q = 0.1: max(0.1, -0.9) = 0.1; q = 0.5: 0; q = 0.9: max(-1.8, 0.2) = 0.2
    assert quantile_loss(pred, torch.tensor([1.0]), (0.1, 0.5, 0.9)).item() == pytest.approx(0.3)


def test_median_quantile_loss_is_half_the_absolute_error() -> None:
    pred, y = torch.randn(5, 7, 1, dtype=F64), torch.randn(5, 7, dtype=F64)
    torch.testing.assert_close(quantile_loss(pred, y, (0.5,)), 0.5 * (pred[..., 0] - y).abs().mean())


def test_gated_residual_network_matches_its_formula() -> None:
    torch.manual_seed(0)
    grn = GatedResidualNetwork(6, 8, 4, dropout=0.0, context_features=3).double()
    x, c = torch.randn(5, 6, dtype=F64), torch.randn(5, 3, dtype=F64)
    h = (
        grn.fc2.weight
        @ torch.nn.functional.elu(grn.fc1.weight @ x.T + grn.fc1.bias[:, None] + grn.context.weight @ c.T)
        + grn.fc2.bias[:, None]
    )  # (8, N)
    z = grn.gate_norm.glu.fc.weight @ h + grn.gate_norm.glu.fc.bias[:, None]  # (8, N): value rows then gate rows
    gated = z[:4] * torch.sigmoid(z[4:])
    skip = grn.skip.weight @ x.T + grn.skip.bias[:, None]
    expected = torch.nn.functional.layer_norm((skip + gated).T, (4,))  # LayerNorm at its initial unit affine
    torch.testing.assert_close(grn(x, c), expected)


def test_variable_selection_is_a_softmax_weighted_sum_of_per_variable_grns() -> None:
    torch.manual_seed(0)
    vsn = VariableSelectionNetwork(3, 8, dropout=0.0).double()
    x = torch.randn(4, 3, 8, dtype=F64)
    out, weights = vsn(x)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, dtype=F64))
    slow = sum(weights[:, i : i + 1] * vsn.single[i](x[:, i]) for i in range(3))
    torch.testing.assert_close(out, slow)


def _tiny_tft() -> tuple[TemporalFusionTransformer, tuple[torch.Tensor, ...], torch.Tensor]:
    torch.manual_seed(0)
    cfg = TFTConfig(hidden=16, heads=2, encoder_steps=12, decoder_steps=6, num_static_categories=5, dropout=0.0)
    t = torch.arange(18, dtype=torch.float32)
    usage = torch.stack([torch.sin(2 * torch.pi * (t + s) / 6) for s in range(4)])
    known = torch.stack([torch.sin(2 * torch.pi * t / 6), torch.cos(2 * torch.pi * t / 6), t / 18], -1).expand(
        4, -1, -1
    )
    return TemporalFusionTransformer(cfg), (torch.arange(4) % 5, usage[:, :12], known.contiguous()), usage[:, 12:]


def test_tft_forecast_at_a_step_ignores_later_known_inputs() -> None:
    model, (sid, past, known), _ = _tiny_tft()
    model.eval()
    base = model(sid, past, known)
    changed = known.clone()
    changed[:, 12 + 3] += 5.0  # the 4th future step's known inputs
    out = model(sid, past, changed)
    assert out.shape == (4, 6, 3)
    torch.testing.assert_close(out[:, :3], base[:, :3])  # LSTM and causal attention: earlier steps untouched
    assert (out[:, 3:] - base[:, 3:]).abs().max() > 1e-4


def test_tft_quantile_loss_falls_on_a_fixed_batch() -> None:
    model, inputs, target = _tiny_tft()
    first, last = _loss_falls(model, lambda: quantile_loss(model(*inputs), target, model.cfg.quantiles))
    assert last < 0.5 * first


# -- DeepAR ---------------------------------------------------------------------------------------------------
def test_lagged_values_hand_computed() -> None:
    seq = torch.arange(10.0).view(1, 10) * 10  # value at position p is 10 p
    lags = torch.tensor([1, 3])
    out = lagged_values(seq, lags, start=5, steps=3)  # positions 5, 6, 7
    assert out.tolist() == [[[40.0, 20.0], [50.0, 30.0], [60.0, 40.0]]]


def test_negative_binomial_has_the_papers_mean_and_variance() -> None:
    mu, alpha = torch.tensor([3.0, 250.0], dtype=F64), torch.tensor([0.5, 0.01], dtype=F64)
    nb = negative_binomial(mu, alpha)
    torch.testing.assert_close(nb.mean, mu)
    torch.testing.assert_close(nb.variance, mu + alpha * mu**2)


def _tiny_deepar(num_samples: int = 3) -> tuple[DeepAR, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    cfg = DeepARConfig(
        context_length=12,
        prediction_length=4,
        num_series=5,
        hidden=8,
        num_samples=num_samples,
        lags=(1, 2, 6),
        dropout=0.0,
    )
    t = torch.arange(6 + 16, dtype=torch.float32)
    series = (20 + 10 * torch.sin(2 * torch.pi * (t[None] + torch.arange(3)[:, None]) / 6)).round()  # (3, 22)
    features = torch.randn(3, 16, 5, dtype=F64)
    return DeepAR(cfg).double(), series.double(), features, torch.arange(3)


def test_deepar_training_likelihood_is_causal() -> None:
    model, series, features, sid = _tiny_deepar()
    model.eval()
    base = model(series, features, sid)
    changed = series.clone()
    changed[:, 6 + 14] += 7  # a value in the prediction range: the scale (context mean) is unchanged
    dist = model(changed, features, sid)
    torch.testing.assert_close(dist.mean[:, :15], base.mean[:, :15])  # positions up to it see only earlier values
    assert (dist.mean[:, 15:] - base.mean[:, 15:]).abs().min() > 0


def test_deepar_ancestral_sampling_matches_re_unrolling_from_scratch() -> None:
    model, series, features, sid = _tiny_deepar(num_samples=3)
    model.eval()
    past = series[:, :-4]
    with torch.no_grad():
        torch.manual_seed(123)
        fast = model.sample(past, features, sid)  # (3, 3, 4), carries the LSTM state
        torch.manual_seed(123)
        seq = past.repeat_interleave(3, 0)
        feats, ids = features.repeat_interleave(3, 0), sid.repeat_interleave(3, 0)
        for t in range(4):  # teacher-forced unroll of the whole window so far, last distribution sampled
            seq_ext = torch.cat([seq, seq.new_zeros(seq.shape[0], 1)], dim=1)  # placeholder for the step drawn
            dist = model(seq_ext, feats[:, : 12 + t + 1], ids)
            value = torch.distributions.NegativeBinomial(dist.total_count[:, -1:], logits=dist.logits[:, -1:]).sample()
            seq = torch.cat([seq, value], dim=1)
    torch.testing.assert_close(fast, seq[:, -4:].reshape(3, 3, 4))
    assert (fast >= 0).all() and torch.equal(fast, fast.round())


def test_deepar_nll_falls_on_a_fixed_batch() -> None:
    model, series, features, sid = _tiny_deepar()
    first, last = _loss_falls(model, lambda: -model(series, features, sid).log_prob(series[:, 6:]).mean(), steps=40)
    assert last < first - 0.5  # nats per value


# -- PatchTST ---------------------------------------------------------------------------------------------------
def test_revin_round_trip_is_the_identity() -> None:
    revin = RevIN(3).double()
    with torch.no_grad():
        revin.affine_weight.copy_(torch.tensor([0.5, 2.0, -1.5]))
        revin.affine_bias.copy_(torch.tensor([1.0, 0.0, -3.0]))
    x = 5 + 3 * torch.randn(2, 40, 3, dtype=F64)
    y, stats = revin.normalize(x)
    plain = (y - revin.affine_bias) / revin.affine_weight
    torch.testing.assert_close(plain.mean(1), torch.zeros(2, 3, dtype=F64))
    torch.testing.assert_close(plain.std(1, unbiased=False), torch.ones(2, 3, dtype=F64), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(revin.denormalize(y, stats), x, rtol=1e-8, atol=1e-8)


def test_patches_of_the_end_padded_series_number_42() -> None:
    cfg = PatchTSTConfig()
    x = torch.arange(336.0).view(1, 1, 336)
    patches = patchify(torch.nn.ReplicationPad1d((0, 8))(x), 16, 8)
    assert patches.shape == (1, 1, 42, 16) == (1, 1, cfg.patch_num, cfg.patch_len)
    assert patches[0, 0, 5].tolist() == list(range(40, 56))
    assert patches[0, 0, -1].tolist() == list(range(328, 336)) + [335.0] * 8  # the last value repeated


def test_residual_attention_adds_the_previous_layers_scores() -> None:
    torch.manual_seed(0)
    attn = ResidualAttention(8, 2).double()
    x, prev = torch.randn(3, 5, 8, dtype=F64), torch.randn(3, 2, 5, 5, dtype=F64)
    q = attn.W_Q(x).view(3, 5, 2, 4).transpose(1, 2)
    k = attn.W_K(x).view(3, 5, 2, 4).transpose(1, 2)
    v = attn.W_V(x).view(3, 5, 2, 4).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / 2.0 + prev  # head dim 4
    expected = attn.to_out((torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(3, 5, 8))
    out, new_scores = attn(x, prev)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(new_scores, scores)


def test_patchtst_channels_are_independent_in_eval() -> None:
    torch.manual_seed(0)
    model = PatchTST(
        PatchTSTConfig(enc_in=3, seq_len=48, pred_len=16, d_model=16, n_heads=2, d_ff=32, e_layers=2)
    ).eval()
    x = torch.randn(2, 48, 3)
    base = model(x)
    changed = x.clone()
    changed[..., 0] = 10 * torch.randn(2, 48)
    out = model(changed)
    torch.testing.assert_close(out[..., 1:], base[..., 1:])
    assert (out[..., 0] - base[..., 0]).abs().max() > 1e-3


def test_patchtst_mse_falls_on_a_fixed_batch() -> None:
    torch.manual_seed(0)
    model = PatchTST(
        PatchTSTConfig(enc_in=2, seq_len=48, pred_len=16, d_model=16, n_heads=2, d_ff=32, e_layers=2, dropout=0.0)
    )
    t = torch.arange(64, dtype=torch.float32)
    series = torch.stack([torch.sin(2 * torch.pi * (t + 3 * s) / 12) for s in range(8)]).unsqueeze(-1).repeat(1, 1, 2)
    x, y = series[:, :48], series[:, 48:]
    first, last = _loss_falls(model, lambda: torch.nn.functional.mse_loss(model(x), y), lr=3e-3)
    assert last < 0.5 * first


def test_patchtst42_parameter_count_matches_the_layer_arithmetic() -> None:
    d, ff, n, c = 128, 256, 42, 21
    layer = 4 * (d * d + d) + 1 + 2 * 2 * d + (d * ff + ff + ff * d + d)
    expected = (16 * d + d) + n * d + 3 * layer + (d * n * 96 + 96) + 2 * c
    assert sum(p.numel() for p in PatchTST(PatchTSTConfig()).parameters()) == expected == 921_229
