"""Mozilla TTS speaker encoder trained with the angular prototypical loss (TorchBench's tts_angular).

Reference: mozilla/TTS ``TTS/speaker_encoder/model.py`` and ``losses.py`` (MPL-2.0), the loss
adapted there from clovaai/voxceleb_trainer (Chung et al., "In defence of metric learning for
speaker recognition", 2020). Three LSTM layers of 768 units, each followed by a bias-free
projection to 256; the last frame's output, L2-normalised, is the utterance embedding. A batch
holds N speakers x M utterances; the loss is a softmax over scaled cosine similarities between
each speaker's first utterance and every speaker's centroid of the other utterances.

Shapes and step are TorchBench's ``tts_angular``: a batch of B random clips of 50 frames x 40
mel bins (``rand(B, 50, 40)``), RAdam(lr=1e-4) over the encoder's weights. TorchBench groups
the B = 64 embeddings as 64 speakers x 1 utterance, which leaves no "other utterances" and
makes its loss NaN; here they are grouped as B/2 speakers x 2 utterances (the loss is a
negligible part of the step), so training stays finite.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["AngleProtoLoss", "SpeakerEncoder"]


class LSTMWithProjection(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, proj_size: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        self.linear = nn.Linear(hidden_size, proj_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.lstm(x)[0])


class SpeakerEncoder(nn.Module):
    def __init__(self, input_dim: int = 40, proj_dim: int = 256, lstm_dim: int = 768, num_lstm_layers: int = 3) -> None:
        super().__init__()
        sizes = [input_dim] + [proj_dim] * (num_lstm_layers - 1)
        self.layers = nn.Sequential(*(LSTMWithProjection(size, lstm_dim, proj_dim) for size in sizes))
        for name, param in self.layers.named_parameters():
            if "bias" in name:
                nn.init.zeros_(param)
            else:
                nn.init.xavier_normal_(param)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Mel frames ``(B, T, input_dim)`` to unit-norm embeddings ``(B, proj_dim)``."""
        return F.normalize(self.layers(x)[:, -1], p=2, dim=1)


class AngleProtoLoss(nn.Module):
    """Cross-entropy over ``w * cos(positive_i, anchor_j) + b``; the right anchor is speaker i's own."""

    def __init__(self, init_w: float = 10.0, init_b: float = -5.0) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(init_w))
        self.b = nn.Parameter(torch.tensor(init_b))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(N speakers, M utterances, D)``, ``M >= 2``, to a scalar loss."""
        anchor = x[:, 1:].mean(dim=1)  # (N, D): centroid of the other utterances
        positive = x[:, 0]  # (N, D)
        cos = F.cosine_similarity(positive[:, None], anchor[None], dim=-1)  # (N, N)
        # The reference computes clamp(w, 1e-6) and discards it; the clamp is applied here.
        logits = cos * self.w.clamp(min=1e-6) + self.b
        return F.cross_entropy(logits, torch.arange(x.size(0), device=x.device))


class SpeakerEncoderWithLoss(nn.Module):
    """The encoder and its loss in one module, so the optimizer also trains the loss's ``w`` and ``b``."""

    def __init__(self, encoder: SpeakerEncoder, criterion: AngleProtoLoss) -> None:
        super().__init__()
        self.encoder = encoder
        self.criterion = criterion

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


def _create_speaker_encoder(
    ctx: BuildContext, *, utterances_per_speaker: int = 2, frames: int = 50, **kwargs
) -> Workload:
    # Smoke: a quarter of the LSTM and projection widths (the 9.4M weights, updated by RAdam,
    # set the step's cost); three projected LSTM layers and the loss kept.
    smoke = {"lstm_dim": 192, "proj_dim": 64} if ctx.smoke else {}
    model = SpeakerEncoderWithLoss(SpeakerEncoder(**{**smoke, **kwargs}), AngleProtoLoss())
    clips = ctx.batch_size
    if ctx.train and ctx.smoke and not ctx.batch_size_given:
        clips = 2 * utterances_per_speaker  # two speakers: the fewest for which the loss has a gradient
    if ctx.train and clips % utterances_per_speaker:
        raise ValueError(f"batch size {clips} must be a multiple of utterances_per_speaker={utterances_per_speaker}")
    speakers = clips // utterances_per_speaker
    mels = ctx.rand(clips, ctx.pick(frames, 8), model.encoder.layers[0].lstm.input_size)  # (B, T, 40)

    def angle_proto(embeddings: torch.Tensor, _targets: None) -> torch.Tensor:
        return model.criterion(embeddings.view(speakers, utterances_per_speaker, -1))

    # TorchBench's optimizer covers the encoder only; the loss's w and b stay at their init.
    opt = torch.optim.RAdam(model.encoder.parameters(), lr=1e-4) if ctx.train else None
    return Workload(ctx, model, (mels,), None, loss_fn=angle_proto, optimizer=opt)


@register_model(
    domain="speech",
    task="speaker_embedding",
    batch_size=(64, 64),
    param_count=9_381_890,
    source="mozilla/TTS speaker encoder; Chung et al. 2020 (angular prototypical loss)",
    notes="batch_size counts clips of 50 frames, grouped 2 per speaker for the loss; "
    "param_count includes the loss's w and b",
)
def tts_angular(ctx: BuildContext, **kwargs) -> Workload:
    """3-layer LSTM (768) speaker encoder with 256-dim projections and the angular prototypical loss."""
    return _create_speaker_encoder(ctx, **kwargs)
