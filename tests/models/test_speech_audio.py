"""HiFi-GAN, WaveNet, DDSP and DeepSpeech2 pieces against hand-computed answers and slow references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from torchgauge.models.speech.ddsp import (
    DDSPAutoencoder,
    DDSPConfig,
    a_weighting_db,
    exp_sigmoid,
    fft_convolve,
    frequency_impulse_response,
    harmonic_synthesis,
    multiscale_spectral_loss,
    overlap_and_add,
    upsample_with_windows,
)
from torchgauge.models.speech.deepspeech2 import BatchRNN, DeepSpeech2, DeepSpeech2Config, ctc_greedy_decode
from torchgauge.models.speech.hifigan import (
    DiscriminatorP,
    Generator,
    HiFiGANConfig,
    discriminator_loss,
    feature_loss,
    generator_loss,
    mel_spectrogram,
    slaney_mel_filterbank,
)
from torchgauge.models.speech.wavenet import WaveNet, WaveNetConfig, mu_law_decode, mu_law_encode

F64 = torch.float64


# -- HiFi-GAN ------------------------------------------------------------------------------------
def test_slaney_filterbank_matches_a_per_bin_loop() -> None:
    sr, n_fft, n_mels, fmin, fmax = 22050, 64, 10, 0.0, 8000.0
    fb = slaney_mel_filterbank(sr, n_fft, n_mels, fmin, fmax)

    def hz_to_mel(f: float) -> float:  # Slaney: 3 mels per 200 Hz below 1 kHz, log spacing above
        return f / (200 / 3) if f < 1000 else 15 + math.log(f / 1000) / (math.log(6.4) / 27)

    def mel_to_hz(m: float) -> float:
        return m * (200 / 3) if m < 15 else 1000 * math.exp((m - 15) * math.log(6.4) / 27)

    lo, hi = hz_to_mel(fmin), hz_to_mel(fmax)
    edges = [mel_to_hz(lo + (hi - lo) * i / (n_mels + 1)) for i in range(n_mels + 2)]
    expected = torch.zeros(n_mels, n_fft // 2 + 1, dtype=F64)
    for m in range(n_mels):
        left, centre, right = edges[m : m + 3]
        for k in range(n_fft // 2 + 1):
            f = k * sr / n_fft
            rise, fall = (f - left) / (centre - left), (right - f) / (right - centre)
            expected[m, k] = max(0.0, min(rise, fall)) * 2 / (right - left)
    torch.testing.assert_close(fb, expected)
    assert hz_to_mel(1000) == pytest.approx(15.0)


def test_mel_spectrogram_equals_framed_rfft_magnitudes() -> None:
    n_fft, hop = 32, 8
    y = torch.randn(2, 128, dtype=F64)
    window = torch.hann_window(n_fft, dtype=F64)
    out = mel_spectrogram(y, torch.eye(n_fft // 2 + 1, dtype=F64), window, n_fft, hop)  # identity "filterbank"
    padded = F.pad(y.unsqueeze(1), ((n_fft - hop) // 2,) * 2, mode="reflect").squeeze(1)
    frames = padded.unfold(-1, n_fft, hop) * window  # (B, frames, n_fft)
    mag = torch.sqrt(torch.fft.rfft(frames).abs() ** 2 + 1e-9).transpose(1, 2)
    torch.testing.assert_close(out, torch.log(mag.clamp_min(1e-5)))
    assert out.shape[-1] == 128 // hop


def test_lsgan_and_feature_losses_hand_computed() -> None:
    ones, zeros = torch.ones(2, 3), torch.zeros(2, 3)
    assert discriminator_loss([ones, ones], [zeros, zeros]).item() == 0.0  # a perfect discriminator
    assert discriminator_loss([zeros], [ones]).item() == 2.0  # (1 - 0)^2 + 1^2
    assert generator_loss([ones, zeros, 0.5 * ones]).item() == pytest.approx(0 + 1 + 0.25)
    fm = feature_loss([[ones, zeros]], [[zeros, 3 * ones]])
    assert fm.item() == pytest.approx(2 * (1 + 3))


def test_period_discriminator_reflect_pads_and_folds_by_period() -> None:
    torch.manual_seed(0)
    d = DiscriminatorP(3, (2, 2, 2, 2, 2)).double()
    x = torch.randn(1, 1, 10, dtype=F64)  # 10 % 3 = 1: reflect-padded by 2 to 12 = 4 x 3
    captured = {}
    d.convs[0].register_forward_pre_hook(lambda m, args: captured.setdefault("in", args[0]))
    score, fmap = d(x)
    padded = F.pad(x, (0, 2), mode="reflect")
    torch.testing.assert_close(captured["in"], padded.view(1, 1, 4, 3))
    assert captured["in"][0, 0, 0, 1] == x[0, 0, 1]  # column j holds samples j, j + 3, ...
    assert len(fmap) == 6 and score.shape == (1, fmap[-1][0].numel())


def test_generator_upsamples_by_hop_and_weight_norm_removal_keeps_the_function() -> None:
    torch.manual_seed(0)
    cfg = HiFiGANConfig(
        num_mels=8,
        upsample_rates=(4, 2),
        upsample_kernel_sizes=(8, 4),
        upsample_initial_channel=16,
        resblock_kernel_sizes=(3, 5),
        resblock_dilation_sizes=((1, 3), (1, 3)),
    )
    g = Generator(cfg).double().eval()
    mel = torch.randn(2, 8, 5, dtype=F64)
    with torch.no_grad():
        before = g(mel)
        g.remove_weight_norm()
        after = g(mel)
    assert before.shape == (2, 1, 5 * 8) and before.abs().max() < 1
    torch.testing.assert_close(after, before)
    assert not any("parametrizations" in n for n, _ in g.named_parameters())


def test_generator_v1_parameter_count() -> None:
    g = Generator(HiFiGANConfig())
    g.remove_weight_norm()
    assert sum(p.numel() for p in g.parameters()) == 13_926_017  # paper: 13.92 M


# -- WaveNet -------------------------------------------------------------------------------------
def test_mu_law_hand_computed_and_round_trip() -> None:
    x = torch.tensor([-1.0, 0.0, 1.0, 2.0])
    assert mu_law_encode(x, 256).tolist() == [0, 128, 255, 255]  # |x| > 1 clipped
    # 0.5: log1p(255 / 2) / log1p(255) = 0.8757; (1.8757 / 2) * 255 + 0.5 -> 239
    expected = int((1 + math.log1p(127.5) / math.log1p(255)) / 2 * 255 + 0.5)
    assert expected == 239 and mu_law_encode(torch.tensor([0.5]), 256).item() == expected
    wave = torch.linspace(-0.99, 0.99, 1001)
    decoded = mu_law_decode(mu_law_encode(wave, 256), 256)
    # quantisation steps grow with |x|: relative error bounded by the companding slope
    assert ((decoded - wave).abs() <= 0.004 + 0.035 * wave.abs()).all()
    assert decoded.diff().ge(0).all()


def _small_wavenet(use_biases: bool = True) -> WaveNet:
    torch.manual_seed(0)
    cfg = WaveNetConfig(
        dilations=(1, 2, 4) * 2,
        residual_channels=6,
        dilation_channels=5,
        skip_channels=7,
        quantization_channels=16,
        use_biases=use_biases,
    )
    return WaveNet(cfg).double().eval()


def test_wavenet_receptive_field_and_causality() -> None:
    model = _small_wavenet()
    assert model.receptive_field == 1 * (14 + 1) + 1 == 16
    classes = torch.randint(0, 16, (1, 40))
    logits = model(classes)  # predictions of classes 16 .. 39
    assert logits.shape == (1, 16, 40 - 16)
    changed = classes.clone()
    changed[0, 30:] = (changed[0, 30:] + 1) % 16
    # the prediction of sample t (logits index t - 16) sees samples < t only
    torch.testing.assert_close(model(changed)[..., : 31 - 16], logits[..., : 31 - 16])
    assert not torch.allclose(model(changed)[..., 31 - 16], logits[..., 31 - 16])


def test_fast_generation_queues_reproduce_the_convolutional_forward() -> None:
    model = _small_wavenet()
    r = model.receptive_field
    classes = torch.randint(0, 16, (2, 3 * r))
    with torch.no_grad():
        full = model(classes)  # (B, Q, T - r): index j predicts sample r + j
        queues = model.init_queues(2, classes)
        steps = torch.stack([model.step(classes[:, t], queues) for t in range(classes.size(1) - 1)], dim=2)
    # after feeding sample t the step predicts t + 1; beyond the receptive field the zero start is forgotten
    torch.testing.assert_close(steps[..., r - 1 :], full)


def test_wavenet_loss_falls_on_a_fixed_piece() -> None:
    model = _small_wavenet().float().train()
    audio = 0.5 * torch.sin(torch.arange(200) * 0.3).unsqueeze(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = model.loss(audio)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > math.log(16) * 0.8 and losses[-1] < 0.75 * losses[0]


# -- DDSP ----------------------------------------------------------------------------------------
def test_exp_sigmoid_hand_computed() -> None:
    assert exp_sigmoid(torch.tensor(0.0)).item() == pytest.approx(2 * 0.5 ** math.log(10) + 1e-7)
    assert exp_sigmoid(torch.tensor(50.0)).item() == pytest.approx(2.0)


def test_overlap_and_add_matches_a_loop() -> None:
    frames = torch.randn(2, 5, 7, dtype=F64)
    out = overlap_and_add(frames, 3)
    expected = torch.zeros(2, 4 * 3 + 7, dtype=F64)
    for i in range(5):
        expected[:, 3 * i : 3 * i + 7] += frames[:, i]
    torch.testing.assert_close(out, expected)


def test_upsample_with_windows_keeps_constants_and_interpolates_between_frames() -> None:
    const = torch.full((1, 4, 2), 3.0, dtype=F64)
    torch.testing.assert_close(upsample_with_windows(const, 32), torch.full((1, 32, 2), 3.0, dtype=F64))
    step = torch.tensor([0.0, 1.0], dtype=F64).view(1, 2, 1)
    out = upsample_with_windows(step, 16)[0, :, 0]  # hop 8: a Hann crossfade from frame 0 to frame 1
    torch.testing.assert_close(out[:8], torch.sin(math.pi * torch.arange(8, dtype=F64) / 16) ** 2)


def test_harmonic_synthesis_is_a_cumulative_phase_sine_and_drops_harmonics_above_nyquist() -> None:
    sr, n = 16000, 60
    f0 = torch.full((1, 5, 1), 1000.0, dtype=F64)
    amps = torch.tensor([1.0, 0.0], dtype=F64).expand(1, 5, 2).contiguous()
    out = harmonic_synthesis(f0, amps, sr, n)
    expected = torch.sin(2 * math.pi * 1000 * torch.arange(1, n + 1, dtype=F64) / sr)
    torch.testing.assert_close(out[0], expected)
    high = harmonic_synthesis(torch.full((1, 5, 1), 5000.0, dtype=F64), torch.ones(1, 5, 2, dtype=F64), sr, n)
    torch.testing.assert_close(high[0], torch.sin(2 * math.pi * 5000 * torch.arange(1, n + 1, dtype=F64) / sr))


def test_flat_magnitude_filter_is_a_delayed_impulse() -> None:
    ir = frequency_impulse_response(torch.ones(1, 1, 9, dtype=F64))  # 16 taps
    expected = torch.zeros(16, dtype=F64)
    expected[8] = 1.0
    torch.testing.assert_close(ir[0, 0], expected)


def test_fft_convolve_matches_direct_framewise_convolution() -> None:
    gen = torch.Generator().manual_seed(0)
    audio = torch.randn(2, 40, generator=gen, dtype=F64)
    ir = torch.randn(2, 4, 6, generator=gen, dtype=F64)  # 4 frames of 10 samples, 6-tap filters
    out = fft_convolve(audio, ir)
    full = torch.zeros(2, 40 + 5, dtype=F64)
    for b in range(2):
        for i in range(4):
            seg = audio[b, 10 * i : 10 * (i + 1)]
            conv = F.conv1d(seg.view(1, 1, -1), ir[b, i].flip(0).view(1, 1, -1), padding=5).view(-1)  # full convolution
            full[b, 10 * i : 10 * i + 15] += conv
    start = (6 - 1) // 2 - 1  # the reference's delay compensation
    torch.testing.assert_close(out, full[:, start : start + 40])
    single = fft_convolve(audio, ir[:, :1], delay_compensation=0)  # one filter for the whole signal
    direct = F.conv1d(audio.unsqueeze(0), ir[:, 0].flip(-1).unsqueeze(1), padding=5, groups=2)[0, :, :40]
    torch.testing.assert_close(single, direct)


def test_a_weighting_is_zero_at_one_kilohertz() -> None:
    db = a_weighting_db(torch.tensor([0.0, 100.0, 1000.0, 10000.0], dtype=F64))
    assert db[0].item() == -80.0  # floored
    assert db[1].item() == pytest.approx(-19.1, abs=0.1)  # IEC 61672 table values
    assert db[2].item() == pytest.approx(0.0, abs=0.01)
    assert db[3].item() == pytest.approx(-2.5, abs=0.1)


def test_ddsp_spectral_loss_falls_on_a_fixed_note() -> None:
    torch.manual_seed(0)
    cfg = DDSPConfig(
        n_samples=1600,
        ch=16,
        rnn_channels=16,
        n_harmonics=8,
        n_noise_magnitudes=9,
        reverb_length=400,
        fft_sizes=(256, 64),
    )
    model = DDSPAutoencoder(cfg)
    frames = cfg.n_frames
    f0 = torch.full((1, frames, 1), 220.0)
    loudness = torch.full((1, frames, 1), -20.0)
    t = torch.arange(cfg.n_samples) / cfg.sample_rate
    target = 0.5 * torch.sin(2 * math.pi * 220 * t).unsqueeze(0)
    assert multiscale_spectral_loss(target, target, cfg.fft_sizes).item() == 0.0
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        opt.zero_grad()
        loss = multiscale_spectral_loss(target, model(f0, loudness), cfg.fft_sizes)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


# -- DeepSpeech2 ---------------------------------------------------------------------------------
def test_ctc_greedy_decode_collapses_repeats_and_drops_blanks() -> None:
    ids = torch.tensor([[0, 3, 3, 0, 3, 5, 5, 0], [2, 2, 2, 4, 0, 4, 1, 1]])
    probs = F.one_hot(ids, 6).float()
    decoded = ctc_greedy_decode(probs, torch.tensor([8, 5]))
    assert [d.tolist() for d in decoded] == [[3, 3, 5], [2, 4]]  # the second stops after 5 frames


def test_deepspeech2_lengths_and_parameter_count() -> None:
    cfg = DeepSpeech2Config()
    model = DeepSpeech2(cfg)
    assert sum(p.numel() for p in model.parameters()) == 41_187_968
    small_cfg = DeepSpeech2Config(window_size=0.004, window_stride=0.002, hidden_size=8, hidden_layers=2)
    small = DeepSpeech2(small_cfg).eval()
    x = torch.randn(2, 1, 33, 21)
    lengths = torch.tensor([21, 14])
    with torch.no_grad():
        probs, out_lengths = small(x, lengths)
    assert out_lengths.tolist() == [11, 7]  # (T + 10 - 11) // 2 + 1
    assert probs.shape == (2, 11, 29)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 11))  # eval returns softmax


def test_batch_rnn_sums_the_two_directions_of_the_gru() -> None:
    torch.manual_seed(0)
    rnn = BatchRNN(4, 3, bidirectional=True, batch_norm=False).double()
    x = torch.randn(6, 2, 4, dtype=F64)
    out = rnn(x, torch.tensor([6, 6]))
    both, _ = rnn.rnn(x)
    torch.testing.assert_close(out, both[..., :3] + both[..., 3:])
    short = rnn(x, torch.tensor([6, 4]))  # packed: the second sequence's backward pass starts at its frame 3
    expected, _ = rnn.rnn(x[:4, 1:2])
    torch.testing.assert_close(short[:4, 1], (expected[..., :3] + expected[..., 3:])[:, 0])
    assert short[4:, 1].abs().max() == 0
