"""Building blocks of the speech models: transducer loss, angular prototypical loss, front-ends."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import torchgauge
from torchgauge.models.speech.demucs import Demucs, FlipChannels, FlipSign, Remix, SincResample, TimeShift, center_trim
from torchgauge.models.speech.rnnt import stack_time, transducer_loss
from torchgauge.models.speech.speaker_encoder import AngleProtoLoss
from torchgauge.models.speech.speech_transformer import stack_low_frame_rate
from torchgauge.registry import get_builder
from torchgauge.workload import BuildContext


def _brute_force_transducer_nll(log_probs: torch.Tensor, labels: list[int], blank: int) -> torch.Tensor:
    """-log of the sum over every alignment: T blanks and U labels in any order, the last move a blank."""
    T, U1, _ = log_probs.shape
    U = U1 - 1
    path_scores = []
    for label_steps in itertools.combinations(range(T + U - 1), U):  # which of the first T+U-1 moves emit
        t = u = 0
        score = log_probs.new_zeros(())
        for move in range(T + U):
            if move in label_steps:
                score = score + log_probs[t, u, labels[u]]
                u += 1
            else:
                score = score + log_probs[t, u, blank]
                t += 1
        path_scores.append(score)
    return -torch.logsumexp(torch.stack(path_scores), dim=0)


def test_transducer_loss_matches_brute_force_enumeration() -> None:
    torch.manual_seed(0)
    T, U, V, blank = 3, 2, 3, 2
    logits = torch.randn(1, T, U + 1, V, dtype=torch.float64, requires_grad=True)
    labels = [0, 1]
    ours = transducer_loss(logits.log_softmax(-1), torch.tensor([labels]), torch.tensor([T]), torch.tensor([U]), blank)
    expected = _brute_force_transducer_nll(logits[0].log_softmax(-1), labels, blank)
    assert len(list(itertools.combinations(range(T + U - 1), U))) == 6  # C(4, 2) alignments
    assert torch.allclose(ours[0], expected)
    (grad_ours,) = torch.autograd.grad(ours[0], logits)
    (grad_expected,) = torch.autograd.grad(expected, logits)
    assert torch.allclose(grad_ours, grad_expected)


def test_transducer_loss_single_frame_single_label_by_hand() -> None:
    # T=1, U=1: the only path emits the label at (0, 0), then a blank at (0, 1).
    probs = torch.tensor([[[[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]]]])  # (1, 1, 2, 3), blank = 2
    loss = transducer_loss(probs.log(), torch.tensor([[1]]), torch.tensor([1]), torch.tensor([1]), blank=2)
    assert torch.allclose(loss, torch.tensor([-math.log(0.5 * 0.8)]))


def test_transducer_loss_respects_lengths_in_a_batch() -> None:
    torch.manual_seed(1)
    T, U, V = 5, 3, 4
    log_probs = torch.randn(2, T, U + 1, V, dtype=torch.float64).log_softmax(-1)
    labels = torch.tensor([[0, 1, 2], [2, 0, 0]])
    logit_lens, label_lens = torch.tensor([5, 3]), torch.tensor([3, 1])
    batched = transducer_loss(log_probs, labels, logit_lens, label_lens, blank=3)
    alone = transducer_loss(log_probs[1:, :3, :2], labels[1:, :1], torch.tensor([3]), torch.tensor([1]), blank=3)
    brute = _brute_force_transducer_nll(log_probs[1, :3, :2], [2], blank=3)
    assert torch.allclose(batched[1], alone[0]) and torch.allclose(alone[0], brute)


def test_stack_time_concatenates_frames_and_rounds_lengths_up() -> None:
    x = torch.arange(6.0).view(3, 1, 2)  # (T=3, B=1, H=2)
    stacked, lengths = stack_time(x, torch.tensor([3]), factor=2)
    assert stacked.squeeze(1).tolist() == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 0.0, 0.0]]
    assert lengths.tolist() == [2]


def test_angle_proto_loss_hand_computed() -> None:
    # Speaker 0: positive (1, 0), other utterances average to (1, 0).
    # Speaker 1: positive (1, 1)/sqrt2, other utterances average to (0, 1.5).
    x = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], [[1.0, 1.0], [0.0, 1.0], [0.0, 2.0]]])
    loss = AngleProtoLoss(init_w=10.0, init_b=-5.0)(x)
    # cosines: row 0 = [1, 0]; row 1 = [1/sqrt2, 1/sqrt2]; logits = 10 cos - 5
    row0 = math.log(1 + math.exp(-10.0))  # -log softmax([5, -5])[0]
    row1 = math.log(2.0)  # equal logits
    assert loss.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)


def test_low_frame_rate_stacking_repeats_the_last_frame() -> None:
    feats = torch.arange(7.0).view(1, 7, 1)  # frame i has the value i
    stacked = stack_low_frame_rate(feats, m=4, n=3)
    assert stacked.squeeze(0).tolist() == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 6, 6, 6]]


def test_sinc_resampling_keeps_a_band_limited_signal() -> None:
    n = torch.arange(400, dtype=torch.float32)
    tone = torch.sin(2 * math.pi * 0.02 * n)  # well below both Nyquist frequencies
    up = SincResample(1, 2)(tone)
    assert up.shape == (800,)
    expected_up = torch.sin(2 * math.pi * 0.01 * torch.arange(800, dtype=torch.float32))
    assert torch.allclose(up[100:-100], expected_up[100:-100], atol=1e-3)
    round_trip = SincResample(2, 1)(up)
    assert torch.allclose(round_trip[50:-50], tone[50:-50], atol=1e-3)


def test_center_trim_and_demucs_output_length() -> None:
    x = torch.arange(10.0)
    assert center_trim(x, torch.zeros(5)).tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    model = Demucs(channels=4, depth=3, lstm_layers=1).eval()
    length = model.valid_length(500)
    assert length >= 500
    out = model(torch.randn(1, 2, length))
    assert out.shape[:3] == (1, 4, 2) and out.shape[-1] < length


def test_demucs_augmentation_keeps_the_stems_values() -> None:
    torch.manual_seed(0)
    wav = torch.randn(8, 4, 2, 50)  # (clips, sources, channels, time)
    flipped = FlipSign().train()(wav)
    assert torch.equal(flipped.abs(), wav.abs())
    assert torch.equal((flipped / wav)[..., :1, :1].expand_as(wav), flipped / wav)  # one sign per source
    swapped = FlipChannels().train()(wav)
    assert all(
        torch.equal(swapped[b, s], wav[b, s]) or torch.equal(swapped[b, s], wav[b, s].flip(0))
        for b in range(8)
        for s in range(4)
    )
    shifted = TimeShift(10).train()(wav)
    assert shifted.shape == (8, 4, 2, 40)
    assert any(torch.equal(shifted[0, 0], wav[0, 0, :, k : k + 40]) for k in range(10))
    assert torch.equal(TimeShift(10).eval()(wav), wav[..., :40])  # eval: the crop only
    remixed = Remix(4).train()(wav)  # each source permuted among the 4 clips of its group
    for group in (slice(0, 4), slice(4, 8)):
        for s in range(4):
            before = sorted(wav[group, s].sum((1, 2)).tolist())
            assert sorted(remixed[group, s].sum((1, 2)).tolist()) == pytest.approx(before)
    for module in (FlipSign(), FlipChannels(), Remix(4)):
        assert torch.equal(module.eval()(wav), wav)


def test_demucs_is_torchbench_workload() -> None:
    w = torchgauge.create("demucs", mode="eval", size="smoke", batch_size=2)
    (streams,) = w.inputs
    assert streams.shape[:3] == (2, 5, 2) and 0 <= streams.min() and streams.max() < 1  # rand(B, 5, 2, T)
    sources, estimates = w.step()
    assert torch.equal(sources, streams[:, 1:, :, : streams.shape[-1] - w.module.augment[2].shift])
    assert w.module.model.upsample is None  # TorchBench's Demucs does not resample
    ctx = BuildContext("demucs", "train", torch.device("cpu"), 6, "full", batch_size_given=True)
    with pytest.raises(ValueError, match="multiple of 4"):  # refused before anything is built
        get_builder("demucs")(ctx)


def test_tts_angular_batches_clips_and_trains_finite() -> None:
    w = torchgauge.create("tts_angular", mode="eval", size="smoke", batch_size=3)
    (mels,) = w.inputs
    assert mels.shape == (3, 8, 40)  # TorchBench's rand(B, frames, 40)
    embeddings = w.step()
    assert torch.allclose(embeddings.norm(dim=1), torch.ones(3), atol=1e-5)
    train = torchgauge.create("tts_angular", mode="train", size="smoke", batch_size=4)
    assert torch.isfinite(train.step())  # 2 speakers x 2 clips: a finite angular prototypical loss


def test_speech_transformer_targets_end_with_eos() -> None:
    w = torchgauge.create("speech_transformer", mode="train", size="smoke", batch_size=3)
    feats, feat_lens, ys_in, ys_valid = w.inputs
    model = w.module
    assert feats.shape[-1] == 320  # 4 stacked 80-dim frames
    lengths = ys_valid.sum(1) - 1  # characters per transcript
    assert (ys_in[:, 0] == model.sos_id).all()
    assert (w.targets.gather(1, lengths[:, None]) == model.eos_id).all()
    assert ((w.targets == -1) == ~ys_valid).all()


def test_tacotron2_inference_decodes_as_many_frames_as_the_targets() -> None:
    # tacotron2's eval is TorchBench's teacher-forced forward; the autoregressive loop is tacotron2_inference's
    w = torchgauge.create("tacotron2_inference", mode="eval", size="smoke")
    mel, gate = w.step()
    frames = w.inputs[2].size(2)
    assert mel.shape == (2, 80, frames) and gate.shape == (2, frames)


def test_tacotron2_eval_is_the_teacher_forced_forward() -> None:
    # TorchBench's tacotron2 eval runs the training forward on the target mels, not synthesis
    w = torchgauge.create("tacotron2", mode="eval", size="smoke")
    mel, mel_post, gate = w.step()
    _, _, mels, mel_lens = w.inputs
    assert mel.shape == mel_post.shape == mels.shape and gate.shape == (2, mels.size(2))
    padding = torch.arange(mels.size(2)) >= mel_lens[:, None]
    assert padding.any() and (mel_post.transpose(1, 2)[padding] == 0).all() and (gate[padding] == 1e3).all()
