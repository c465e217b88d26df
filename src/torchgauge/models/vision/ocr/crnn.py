"""CRNN word recogniser: docTR's ``crnn_vgg16_bn`` (the network behind TorchBench's ``doctr_reco_predictor``).

Paper: Shi et al., "An End-to-End Trainable Neural Network for Image-based Sequence
Recognition and Its Application to Scene Text Recognition" (2015). Layers follow docTR's
``doctr/models/recognition/crnn/pytorch.py`` and ``classification/vgg/pytorch.py``
(Apache-2.0, https://github.com/mindee/doctr): torchvision's VGG-16-BN convolutions (the
layer table of this package's :mod:`~torchgauge.models.vision.vgg`) with the last three 2x2
max-pools made (2, 1), so a 32x128 word crop becomes a ``(512, 1, 32)`` map read as 32 time
steps; a 2-layer bidirectional LSTM (128 units) and a linear layer over the vocabulary plus
the CTC blank (last index). The vocabulary is docTR's ``french`` (126 characters, docTR >= 1.0,
which TorchBench installs unpinned): 15,808,447 parameters, the count of TorchBench's model.

Two registrations. ``doctr_reco_predictor`` is TorchBench's benchmark: eval only (its ``train()``
raises NotImplementedError; CPU is ``not_implemented`` in its metadata), batch 1, the bare
recognition model (``predictor.reco_predictor.model``) called on ``randn(B, 3, 32, 128)`` with
``return_model_output=True``: docTR's pre-processor (resize, normalise) is not part of the call,
so the inputs are not normalised here either. ``crnn_vgg16_bn`` is the same network as docTR's
training reference runs it: 0-255 crops normalised by docTR's mean and std inside the model,
training at batch 64 with CTC and Adam, evaluation at batch 1.

Training: CTC loss (``zero_infinity``, as docTR) against seeded random label sequences.

Evaluation output (greedy CTC decoding, docTR's ``ctc_best_path``), one dict for the batch::

    {"tokens": Tensor (B, T) int64, decoded character ids left-aligned, padded with -1,
     "lengths": Tensor (B,) int64, number of decoded characters,
     "scores": Tensor (B,) float, min over time of the max softmax probability (docTR's confidence)}

:func:`tokens_to_words` maps them to strings; docTR does that inside the predictor, here it is
left out of the timed step because it is pure Python string work.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.conv_blocks import init_conv_weights
from ..vgg import VGG16_LAYERS

__all__ = [
    "CRNN",
    "CRNNConfig",
    "FRENCH_VOCAB",
    "WordRecognitionWorkload",
    "ctc_greedy_decode",
    "tokens_to_words",
    "vgg16_bn_r",
]

# docTR >= 1.0 (datasets/vocabs.py): VOCABS["french"] = english ("latin" + "°" + currencies) + accents
FRENCH_VOCAB = string.digits + string.ascii_letters + string.punctuation + "°" + "£€¥¢฿" + "àâéèêëîïôùûüçÀÂÉÈÊËÎÏÔÙÛÜÇ"
# Last max-pools made (2, 1): height still halves, the 32 horizontal steps survive.
NUM_RECT_POOLS = 3


@dataclass(frozen=True)
class CRNNConfig:
    """docTR ``crnn_vgg16_bn`` defaults."""

    vocab: str = FRENCH_VOCAB
    rnn_units: int = 128
    vgg_width_mult: float = 1.0  # scales the VGG-16-BN channels (64 .. 512)
    input_size: tuple[int, int] = (32, 128)  # (height, width) of a word crop
    max_label_length: int = 12  # synthetic words have 1..this many characters (T = width / 4 = 32 steps)
    # docTR's crop normalisation (crnn_vgg16_bn default_cfgs)
    mean: tuple[float, float, float] = (0.694, 0.695, 0.693)
    std: tuple[float, float, float] = (0.299, 0.296, 0.301)
    normalize: bool = True  # False: the crops go to the network as given (TorchBench's bare-model call)


def vgg16_bn_r(width_mult: float = 1.0) -> nn.Sequential:
    """VGG-16-BN convolutions with the last ``NUM_RECT_POOLS`` pools made (2, 1): ``(B, 512, H/32, W/4)``.

    ``width_mult`` scales every conv's channels (the last one gives 512 x ``width_mult``).
    """
    layers: list[nn.Module] = []
    in_ch = 3
    num_pools = VGG16_LAYERS.count("M")
    pool_index = 0
    for layer in VGG16_LAYERS:
        if layer == "M":
            rect = pool_index >= num_pools - NUM_RECT_POOLS
            layers.append(nn.MaxPool2d((2, 1)) if rect else nn.MaxPool2d(2, 2))
            pool_index += 1
        else:  # torchvision vgg16_bn keeps the conv bias in front of BatchNorm
            out_ch = max(1, round(layer * width_mult))
            layers += [nn.Conv2d(in_ch, out_ch, 3, padding=1), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True)]
            in_ch = out_ch
    features = nn.Sequential(*layers)
    init_conv_weights(features)
    return features


def ctc_greedy_decode(logits: Tensor, blank: int) -> dict[str, Tensor]:
    """Best-path CTC decoding of ``logits (B, T, C)``: argmax per step, merge repeats, drop blanks.

    Returns ``tokens (B, T)`` (left-aligned, -1 padded), ``lengths (B,)`` and ``scores (B,)``
    (the smallest per-step max probability, docTR's word confidence).
    """
    best = logits.argmax(dim=-1)  # (B, T)
    previous = F.pad(best[:, :-1], (1, 0), value=-1)
    keep = (best != blank) & (best != previous)
    position = keep.cumsum(dim=1) - 1
    tokens = torch.full_like(best, -1)
    rows = torch.arange(best.shape[0], device=best.device)[:, None].expand_as(best)
    tokens[rows[keep], position[keep]] = best[keep]
    scores = logits.softmax(dim=-1).amax(dim=-1).amin(dim=1)
    return {"tokens": tokens, "lengths": keep.sum(dim=1), "scores": scores}


def tokens_to_words(decoded: dict[str, Tensor], vocab: str) -> list[str]:
    """Strings from :func:`ctc_greedy_decode` output."""
    return [
        "".join(vocab[i] for i in row[:n]) for row, n in zip(decoded["tokens"].tolist(), decoded["lengths"].tolist())
    ]


class CRNN(nn.Module):
    """VGG-16-BN (rectangular pools) -> BiLSTM x2 -> linear over vocab + blank.

    ``forward(crops, labels=None, label_lengths=None)`` takes 0-255 crops ``(B, 3, 32, W)``.
    Training returns ``{"loss_ctc": ...}``; evaluation the decoded batch (module docstring).
    """

    def __init__(self, cfg: CRNNConfig):
        super().__init__()
        self.cfg = cfg
        self.blank = len(cfg.vocab)
        self.features = vgg16_bn_r(cfg.vgg_width_mult)
        channels = self.features[-3].num_features  # the last BatchNorm: 512 at full width
        height = cfg.input_size[0] // 2 ** VGG16_LAYERS.count("M")
        if height < 1:
            raise ValueError(f"invalid CRNN input height {cfg.input_size[0]}; accepted: a multiple of 32")
        self.decoder = nn.LSTM(channels * height, cfg.rnn_units, num_layers=2, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(2 * cfg.rnn_units, len(cfg.vocab) + 1)
        self.register_buffer("pixel_mean", 255.0 * torch.tensor(cfg.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", 255.0 * torch.tensor(cfg.std).view(1, 3, 1, 1), persistent=False)

    def logits(self, crops: Tensor) -> Tensor:
        """Per-step class logits ``(B, T, V + 1)`` with ``T = W / 4``."""
        if self.cfg.normalize:
            crops = (crops - self.pixel_mean) / self.pixel_std
        features = self.features(crops)  # (B, 512, h, T)
        batch, channels, height, steps = features.shape
        sequence = features.reshape(batch, channels * height, steps).transpose(1, 2)  # (B, T, 512 h)
        return self.linear(self.decoder(sequence)[0])

    def forward(
        self, crops: Tensor, labels: Tensor | None = None, label_lengths: Tensor | None = None
    ) -> dict[str, Tensor]:
        logits = self.logits(crops)
        if not self.training:
            return ctc_greedy_decode(logits, self.blank)
        # CTC in float32 whatever the compute dtype (autocast does the same); (T, B, V + 1)
        log_probs = logits.float().log_softmax(dim=-1).transpose(0, 1)
        input_lengths = torch.full((logits.shape[0],), logits.shape[1], dtype=torch.long, device=logits.device)
        loss = F.ctc_loss(log_probs, labels, input_lengths, label_lengths, blank=self.blank, zero_infinity=True)
        return {"loss_ctc": loss}


class WordRecognitionWorkload(Workload):
    """A recogniser on synthetic word crops with padded label sequences ``(labels, lengths)``."""

    def forward(self) -> Any:
        (crops,) = self.inputs
        if self.module.training:
            labels, lengths = self.targets
            return self.module(crops, labels, lengths)
        return self.module(crops)

    def compute_loss(self, outputs: dict[str, Tensor]) -> Tensor:
        return outputs["loss_ctc"]


def _create_crnn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """CRNN on synthetic word crops; ``kwargs`` are :class:`CRNNConfig` fields."""
    # Smoke: a quarter of the VGG channels (15.8M -> 1M weights), crops, LSTM and vocabulary kept.
    cfg = CRNNConfig(**{**({"vgg_width_mult": 0.25} if ctx.smoke else {}), **kwargs})
    height, width = cfg.input_size
    if height < 32 or height % 32 or width < 8 or width % 4:
        raise ValueError(
            f"invalid CRNN input_size {cfg.input_size}; accepted: height a positive multiple of 32, "
            "width a multiple of 4 of at least 8"
        )
    if not 1 <= cfg.max_label_length <= width // 8:
        raise ValueError(
            f"invalid max_label_length {cfg.max_label_length}; accepted: 1..{width // 8} for width {width}"
        )
    if cfg.normalize:
        crops = ctx.rand(ctx.batch_size, 3, height, width) * 255.0
    else:  # TorchBench: randn crops straight into the model
        crops = ctx.randn(ctx.batch_size, 3, height, width)
    # Labels (B, S) padded with the blank; CTC reads only the first `lengths` of each row.
    lengths = ctx.randint(1, cfg.max_label_length + 1, (ctx.batch_size,))
    labels = ctx.randint(0, len(cfg.vocab), (ctx.batch_size, cfg.max_label_length))
    labels = torch.where(
        torch.arange(cfg.max_label_length, device=ctx.device)[None] < lengths[:, None], labels, len(cfg.vocab)
    )
    model = CRNN(cfg)
    # docTR's recognition reference trains with Adam (lr 1e-3, betas 0.95/0.99)
    optimizer = ctx.optimizer(model.parameters(), "adam", lr=1e-3, betas=(0.95, 0.99)) if ctx.train else None
    return WordRecognitionWorkload(ctx, model, (crops,), (labels, lengths), optimizer=optimizer)


@register_model(
    domain="vision", task="text_recognition", batch_size=1, modes=("eval",), param_count=15_808_447,
    source="Shi et al., CRNN, 2015; docTR crnn_vgg16_bn (mindee/doctr) as TorchBench's doctr_reco_predictor",
    notes="TorchBench's step: the bare docTR recognition model on randn(1, 3, 32, 128), CTC-decoded; eval only",
)  # fmt: skip
def doctr_reco_predictor(ctx: BuildContext, **kwargs: Any) -> Workload:
    """docTR's CRNN VGG-16-BN on unnormalised randn 32x128 crops, as TorchBench (smoke: a quarter of the width)."""
    return _create_crnn(ctx, **{"normalize": False, **kwargs})


@register_model(
    domain="vision", task="text_recognition", batch_size=(64, 1), param_count=15_808_447,
    source="Shi et al., CRNN, 2015; docTR crnn_vgg16_bn (mindee/doctr)",
    notes="docTR's recognition reference: 0-255 crops normalised in the model; CTC loss and Adam at batch 64",
)  # fmt: skip
def crnn_vgg16_bn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """docTR's CRNN VGG-16-BN word recogniser on 32x128 crops (smoke: same crops, a quarter of the VGG width)."""
    return _create_crnn(ctx, **kwargs)
