"""Known-answer tests of the Tacotron pieces: Griffin-Lim, CBHG time lengths, highway, decoder."""

from __future__ import annotations

import math

import torch

from torchgauge.models.speech.tacotron1 import CBHG, SMOKE, Highway, Tacotron, griffin_lim, tacotron_loss


def _spectral_error(signal: torch.Tensor, magnitude: torch.Tensor, n_fft: int, hop: int, win: int) -> float:
    window = torch.hann_window(win, dtype=signal.dtype)
    spec = torch.stft(signal, n_fft, hop, win, window=window, return_complex=True).abs()
    return ((spec - magnitude).norm() / magnitude.norm()).item()


def test_griffin_lim_moves_toward_target_magnitude():
    torch.manual_seed(0)
    n_fft, hop, win = 256, 32, 128
    t = torch.arange(4000, dtype=torch.float64) / 8000
    chirp = torch.sin(2 * math.pi * (200 * t + 600 * t**2)) + 0.5 * torch.sin(2 * math.pi * 1500 * t)
    window = torch.hann_window(win, dtype=torch.float64)
    magnitude = torch.stft(chirp[None], n_fft, hop, win, window=window, return_complex=True).abs()
    torch.manual_seed(1)
    start = _spectral_error(griffin_lim(magnitude, n_fft, hop, win, 0), magnitude, n_fft, hop, win)
    torch.manual_seed(1)  # the same random initial phase
    end = _spectral_error(griffin_lim(magnitude, n_fft, hop, win, 30), magnitude, n_fft, hop, win)
    assert end < 0.5 * start


def test_conv_bank_and_max_pool_keep_time_length():
    torch.manual_seed(0)
    cbhg = CBHG(dim=4, k=6, projections=(8, 4)).eval()  # even kernels and the pool each add one step
    for T in (1, 2, 7, 10):
        x = torch.randn(3, T, 4)
        assert cbhg.bank_and_pool(x.transpose(1, 2)).shape == (3, 6 * 4, T)
        assert cbhg(x).shape == (3, T, 8)


def test_max_pool_is_max_of_current_and_previous_step():
    cbhg = CBHG(dim=1, k=1, projections=(1, 1))
    x = torch.tensor([[[3.0, -1.0, 2.0, 5.0, 0.0]]])
    pooled = cbhg.max_pool1d(x)[:, :, : x.size(-1)]  # trimmed as in the model: window (t - 1, t)
    assert torch.equal(pooled, torch.tensor([[[3.0, 3.0, 2.0, 5.0, 5.0]]]))


def test_highway_gate_algebra():
    hw = Highway(2)
    with torch.no_grad():
        hw.H.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
        hw.H.bias.zero_()
        hw.T.weight.zero_()
        hw.T.bias.copy_(torch.tensor([0.0, math.log(3.0)]))  # gates 1/2 and 3/4
    x = torch.tensor([[2.0, 4.0]])
    # unit 0: relu(2) * 1/2 + 2 * 1/2 = 2; unit 1: relu(-4) * 3/4 + 4 * 1/4 = 1
    torch.testing.assert_close(hw(x), torch.tensor([[2.0, 1.0]]))
    fresh = Highway(3)  # T's bias starts at -1: the gate opens to sigmoid(-1) on a zero input
    torch.testing.assert_close(torch.sigmoid(fresh.T(torch.zeros(1, 3))), torch.full((1, 3), 1 / (1 + math.e)))


def test_teacher_forcing_shapes_and_dependence_on_previous_frames_only():
    torch.manual_seed(0)
    model = Tacotron(SMOKE).eval()
    B, L, T = 2, 7, 4 * SMOKE.r
    text = torch.randint(1, SMOKE.n_symbols, (B, L))
    mels = torch.rand(B, T, SMOKE.n_mels)
    mel, linear, alignments = model(text, torch.tensor([L, L - 2]), mels, T)
    assert mel.shape == (B, T, SMOKE.n_mels)
    assert linear.shape == (B, T, SMOKE.n_freq)
    assert alignments.shape == (B, T // SMOKE.r, L)
    torch.testing.assert_close(alignments.sum(-1), torch.ones(B, T // SMOKE.r))
    # The decoder at step s sees target frames only up to step s - 1: changing the last group of
    # r target frames leaves every decoder output unchanged.
    changed = mels.clone()
    changed[:, -SMOKE.r :] += 1.0
    memory = model.encoder_cbhg(model.encoder_prenet(model.embedding(text)))
    torch.testing.assert_close(model.decoder(memory, changed, 4)[0], model.decoder(memory, mels, 4)[0])


def test_priority_loss_weighting_by_hand():
    mel = torch.zeros(1, 2, 3)
    linear = torch.zeros(1, 2, 4)
    linear_target = torch.zeros(1, 2, 4)
    linear_target[..., 0] = 1.0  # error 1 on the lowest bin only
    loss = tacotron_loss((mel, linear, None), (mel + 2.0, linear_target), n_priority_freq=2)
    # mel L1 = 2; linear: 0.5 * mean over 4 bins (1/4) + 0.5 * mean over the 2 priority bins (1/2)
    torch.testing.assert_close(loss, torch.tensor(2.0 + 0.125 + 0.25))


def test_loss_falls_on_a_fixed_batch():
    from torchgauge.registry import create

    torch.manual_seed(0)
    workload = create("tacotron1", mode="train", size="smoke", device="cpu")
    losses = [workload.train_step().item() for _ in range(12)]
    assert losses[-1] < 0.85 * losses[0]


def test_synthesis_length():
    torch.manual_seed(0)
    model = Tacotron(SMOKE).eval()
    with torch.inference_mode():
        wave = model.synthesize(torch.randint(1, SMOKE.n_symbols, (2, 5)), 2 * SMOKE.r)
    assert wave.shape == (2, (2 * SMOKE.r - 1) * SMOKE.hop_length)
    assert torch.isfinite(wave).all()
