"""WaveGlow: exact inverses of its flow layers, hand-computed log-determinants and losses."""

from __future__ import annotations

import math

import torch

import torchgauge
from torchgauge.models.speech.waveglow import (
    AffineCoupling,
    Invertible1x1Conv,
    WaveGlow,
    WaveGlowConfig,
    WaveGlowLoss,
    fused_add_tanh_sigmoid_multiply,
    squeeze_audio,
    squeeze_mel,
    unsqueeze_audio,
)

F64 = torch.float64
TINY = WaveGlowConfig(
    n_mel_channels=3, n_flows=4, n_early_every=2, n_layers=2, n_channels=4, upsample_kernel=8, hop_length=4
)


def _randomize_end_layers(model: torch.nn.Module, std: float = 0.1) -> None:
    """The zero-initialised WN ``end`` convs make every coupling the identity; give them weights."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".end." in f".{name}":
                p.normal_(0, std)


def test_invertible_1x1_conv_is_initialised_orthogonal_with_determinant_plus_one() -> None:
    torch.manual_seed(0)
    for c in (2, 5, 8):
        w = Invertible1x1Conv(c).conv.weight.squeeze(-1).double()
        torch.testing.assert_close(w @ w.T, torch.eye(c, dtype=F64), atol=1e-5, rtol=0)
        assert torch.det(w).item() > 0


def test_invertible_1x1_conv_reverse_undoes_forward() -> None:
    torch.manual_seed(1)
    conv = Invertible1x1Conv(6)
    with torch.no_grad():
        conv.conv.weight.add_(0.3 * torch.randn_like(conv.conv.weight))  # no longer orthogonal
    z = torch.randn(2, 6, 11)
    y, _ = conv(z)
    torch.testing.assert_close(conv.reverse(y), z, atol=1e-5, rtol=0)


def test_log_det_is_log_abs_det_times_batch_times_groups() -> None:
    conv = Invertible1x1Conv(3)
    w = torch.tensor([[2.0, 1.0, 0.0], [0.5, 3.0, -1.0], [1.0, 0.0, 1.5]])
    # cofactor expansion along the first row: 2 (3 * 1.5 - 0) - 1 (0.5 * 1.5 + 1) + 0 = 9 - 1.75
    det = 2 * (3.0 * 1.5 - (-1.0) * 0.0) - 1.0 * (0.5 * 1.5 - (-1.0) * 1.0)
    with torch.no_grad():
        conv.conv.weight.copy_(w.view(3, 3, 1))
    z = torch.randn(4, 3, 7)
    y, log_det = conv(z)
    assert abs(log_det.item() - math.log(det) * 4 * 7) < 1e-4
    torch.testing.assert_close(y, torch.einsum("oc,bct->bot", w, z))  # and the forward is W z per position


def test_fused_gate_is_tanh_times_sigmoid() -> None:
    a, b = torch.randn(2, 6, 5), torch.randn(2, 6, 5)
    s = a + b
    torch.testing.assert_close(fused_add_tanh_sigmoid_multiply(a, b, 3), torch.tanh(s[:, :3]) * torch.sigmoid(s[:, 3:]))


def test_affine_coupling_transforms_the_second_half_and_inverts_exactly() -> None:
    torch.manual_seed(2)
    coupling = AffineCoupling(3, 5, TINY)
    x, mel = torch.randn(2, 6, 9), torch.randn(2, 5, 9)
    y0, log_s0 = coupling(x, mel)
    torch.testing.assert_close(y0, x)  # zero-initialised end: the identity at init
    assert torch.count_nonzero(log_s0) == 0
    _randomize_end_layers(coupling, 0.3)
    y, log_s = coupling(x, mel)
    out = coupling.wn(x[:, :3], mel)
    torch.testing.assert_close(y[:, :3], x[:, :3])
    torch.testing.assert_close(log_s, out[:, 3:])
    torch.testing.assert_close(y[:, 3:], torch.exp(out[:, 3:]) * x[:, 3:] + out[:, :3])
    torch.testing.assert_close(coupling.reverse(y, mel), x, atol=1e-5, rtol=0)


def test_squeeze_groups_consecutive_samples_and_unsqueeze_round_trips() -> None:
    audio = torch.arange(2 * 24, dtype=torch.float32).view(2, 24)
    sq = squeeze_audio(audio, 8)  # (2, 8, 3)
    assert sq.shape == (2, 8, 3)
    assert sq[1, 5, 2].item() == audio[1, 2 * 8 + 5].item()
    torch.testing.assert_close(unsqueeze_audio(sq), audio)
    mel = torch.randn(2, 3, 24)
    msq = squeeze_mel(mel, 8)  # (2, 3 * 8, 3): channel m * 8 + j of group t is mel[m, 8 t + j]
    assert msq.shape == (2, 24, 3)
    for m, j, t in [(0, 0, 0), (2, 7, 1), (1, 3, 2)]:
        assert msq[1, m * 8 + j, t].item() == mel[1, m, 8 * t + j].item()


def _tiny_model(seed: int = 3) -> WaveGlow:
    torch.manual_seed(seed)
    model = WaveGlow(TINY).double()
    _randomize_end_layers(model, 0.2)
    with torch.no_grad():
        for conv in model.convinv:
            conv.conv.weight.add_(0.2 * torch.randn_like(conv.conv.weight))
    return model


def test_whole_flow_reverse_with_its_own_latents_recovers_the_audio() -> None:
    model = _tiny_model()
    mel, audio = torch.randn(2, 3, 4, dtype=F64), torch.randn(2, 16, dtype=F64)
    z, _, _ = model(mel, audio)
    assert z.shape == (2, 8, 2)
    spect = squeeze_mel(model.upsample(mel)[:, :, :16], 8)
    assert model.n_remaining_channels == 6  # 2 channels output early, before flow 2
    x, early = z[:, 2:], [z[:, :2]]
    with torch.no_grad():
        for k in reversed(range(TINY.n_flows)):
            x = model.convinv[k].reverse(model.couplings[k].reverse(x, spect))
            if k % TINY.n_early_every == 0 and k > 0:
                x = torch.cat((early.pop(), x), 1)
    # W^-1 is computed in float32 as the reference (W.float().inverse()), so the recovery is to ~1e-6
    torch.testing.assert_close(unsqueeze_audio(x), audio, atol=1e-5, rtol=0)


def test_loss_is_the_change_of_variables_nll_per_sample() -> None:
    # sum(z^2) / 2 - log|det dz/dx| over all samples, with the Jacobian of the whole flow by autograd
    model = _tiny_model(4)
    mel, audio = torch.randn(1, 3, 4, dtype=F64), torch.randn(1, 16, dtype=F64)
    z, log_s, log_det_w = model(mel, audio)
    loss = WaveGlowLoss(sigma=1.0)((z, log_s, log_det_w))
    jac = torch.autograd.functional.jacobian(lambda a: model(mel, a)[0].reshape(-1), audio).reshape(16, 16)
    expected = (z.pow(2).sum() / 2 - torch.linalg.slogdet(jac)[1]) / 16
    torch.testing.assert_close(loss, expected)


def test_loss_formula_by_hand() -> None:
    z = torch.tensor([[[1.0, 2.0], [0.0, -1.0]]])  # (1, 2, 2), sum z^2 = 6
    log_s = [torch.full((1, 1, 2), 0.5), torch.full((1, 1, 2), -0.25)]  # sums 1.0, -0.5
    log_det = [torch.tensor(0.3), torch.tensor(-0.1)]
    loss = WaveGlowLoss(sigma=2.0)((z, log_s, log_det))
    expected = (6 / (2 * 4) - (1.0 - 0.5) - (0.3 - 0.1)) / 4
    assert abs(loss.item() - expected) < 1e-6


def test_training_loss_falls_on_a_fixed_batch() -> None:
    torch.manual_seed(0)
    w = torchgauge.create("waveglow", mode="train", size="smoke")
    losses = [w.step().item() for _ in range(15)]
    assert losses[-1] < losses[0] - 0.005, losses


def test_inference_produces_audio_of_frames_times_hop() -> None:
    w = torchgauge.create("waveglow", mode="eval", size="smoke")
    (mel,) = w.inputs
    audio = w.step()
    assert audio.shape == (mel.size(0), mel.size(2) * w.module.cfg.hop_length)
    assert torch.isfinite(audio).all()
