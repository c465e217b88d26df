"""DALL-E's discrete VAE: 256x256 images <-> 32x32 grids of tokens from an 8192-code vocabulary.

Ramesh, Pavlov, Goh, Gray, Voss, Radford, Chen and Sutskever, "Zero-Shot Text-to-Image
Generation", ICML 2021. Architecture as the released dVAE (github.com/openai/DALL-E, MIT,
``dall_e/encoder.py`` and ``decoder.py``):

- encoder: ``Conv 7x7 (256)``, four groups of two bottleneck residual blocks (256, 512, 1024, 2048
  channels; max-pool 2x2 after the first three), ``ReLU -> Conv 1x1`` to 8192 logits per position;
  a block is ``id + (1 / n_layers^2) res`` with ``res = (ReLU -> Conv 3x3) x 3 -> ReLU -> Conv 1x1``
  at ``n_out / 4`` hidden channels (``n_layers = 8`` blocks) and ``id`` a 1x1 conv where the
  width changes;
- decoder: ``Conv 1x1`` from the 8192 one-hot channels to 128, four groups of two blocks (2048,
  1024, 512, 256; nearest 2x upsampling after the first three; blocks ``ReLU -> Conv 1x1`` first
  then 3x3s), ``ReLU -> Conv 1x1`` to 6 channels: per-pixel location and log-scale of a
  logit-Laplace distribution;
- convolutions initialised as the release: weights ``N(0, 1 / (c_in k^2))``, biases 0.

The training code is not released; the loss is the paper's (sec. 2.1, appendix A.2-A.3): the
negative ELBO ``logit-Laplace NLL + beta KL(q(z | x) || U(8192))`` per image, with the
Gumbel-softmax relaxation (``F.gumbel_softmax``, temperature ``tau``) of the encoder's
categorical posterior feeding the decoder, pixels mapped to ``[eps, 1 - eps]``, eps = 0.1. The
KL to the uniform prior is written as in lucidrains/DALLE-pytorch's ``DiscreteVAE`` (MIT):
``F.kl_div(log U, log q, log_target=True)``. The paper anneals ``tau`` from 1 to 1/16 and raises
``beta`` to 6.6; the benchmark runs at the end points. AdamW (lr 1e-4, weight decay 1e-4) as the
paper; it trained with batch 512 over 64 GPUs, 8 per GPU, the default train batch here.

Eval is the release's usage notebook: ``argmax`` of the encoder logits, one-hot, decode,
``sigmoid`` of the locations mapped back to ``[0, 1]``. Images are synthetic, uniform on [0, 1].
Written from the paper and the released architecture; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["DVAEConfig", "DiscreteVAE", "logit_laplace_nll", "map_pixels", "unmap_pixels"]

# Pixels are squeezed into [eps, 1 - eps] so that their logits are finite (paper, appendix A.3).
LOGIT_LAPLACE_EPS = 0.1


@dataclass(frozen=True)
class DVAEConfig:
    vocab_size: int = 8192  # codes per grid position
    n_hid: int = 256  # encoder / decoder base width (the release's n_hid)
    n_init: int = 128  # decoder width after the first 1x1 conv
    group_count: int = 4  # resolution groups (the first three change the resolution by 2)
    n_blk_per_group: int = 2
    image_size: int = 256  # 256 -> 32x32 tokens
    channels: int = 3
    temperature: float = 1 / 16  # Gumbel-softmax tau at the end of the paper's annealing
    kl_weight: float = 6.6  # beta at the end of the paper's warm-up


def _conv(n_in: int, n_out: int, kernel: int) -> nn.Conv2d:
    """The release's Conv2d: 'same' padding, ``w ~ N(0, 1 / (n_in k^2))``, ``b = 0``."""
    conv = nn.Conv2d(n_in, n_out, kernel, padding=(kernel - 1) // 2)
    nn.init.normal_(conv.weight, std=1 / math.sqrt(n_in * kernel**2))
    nn.init.zeros_(conv.bias)
    return conv


class _ResBlock(nn.Module):
    """``id(x) + res(x) / n_layers^2``; ``kernels`` are those of the four convs of ``res``."""

    def __init__(self, n_in: int, n_out: int, n_layers: int, kernels: tuple[int, int, int, int]) -> None:
        super().__init__()
        n_hid = n_out // 4
        self.post_gain = 1 / n_layers**2
        self.id_path = _conv(n_in, n_out, 1) if n_in != n_out else nn.Identity()
        widths = (n_in, n_hid, n_hid, n_hid, n_out)
        self.res_path = nn.Sequential(
            *(m for i, k in enumerate(kernels) for m in (nn.ReLU(), _conv(widths[i], widths[i + 1], k)))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.id_path(x) + self.post_gain * self.res_path(x)


def _group(widths: list[tuple[int, int]], n_layers: int, kernels: tuple[int, ...], resample: nn.Module | None):
    blocks: list[nn.Module] = [_ResBlock(n_in, n_out, n_layers, kernels) for n_in, n_out in widths]
    return nn.Sequential(*blocks, *([resample] if resample is not None else []))


class DVAEEncoder(nn.Module):
    """Images ``(B, 3, S, S)`` in ``[eps, 1 - eps]`` -> logits ``(B, V, S/8, S/8)``."""

    def __init__(self, cfg: DVAEConfig) -> None:
        super().__init__()
        n, g, blocks = cfg.n_hid, cfg.group_count, cfg.n_blk_per_group
        n_layers = g * blocks
        self.input = _conv(cfg.channels, n, 7)
        groups = []
        for i in range(g):  # widths n, 2n, 4n, 8n; pool after all but the last group
            n_in, n_out = n * 2 ** max(i - 1, 0), n * 2**i
            widths = [(n_in if j == 0 else n_out, n_out) for j in range(blocks)]
            groups.append(_group(widths, n_layers, (3, 3, 3, 1), nn.MaxPool2d(2) if i < g - 1 else None))
        self.groups = nn.Sequential(*groups)
        self.output = nn.Sequential(nn.ReLU(), _conv(n * 2 ** (g - 1), cfg.vocab_size, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.groups(self.input(x)))


class DVAEDecoder(nn.Module):
    """Relaxed one-hot codes ``(B, V, T, T)`` -> logit-Laplace statistics ``(B, 6, 8T, 8T)``."""

    def __init__(self, cfg: DVAEConfig) -> None:
        super().__init__()
        n, g, blocks = cfg.n_hid, cfg.group_count, cfg.n_blk_per_group
        n_layers = g * blocks
        self.input = _conv(cfg.vocab_size, cfg.n_init, 1)
        groups = []
        for i in range(g):  # widths 8n, 4n, 2n, n; upsample after all but the last group
            n_out = n * 2 ** (g - 1 - i)
            n_in = cfg.n_init if i == 0 else 2 * n_out
            widths = [(n_in if j == 0 else n_out, n_out) for j in range(blocks)]
            up = nn.Upsample(scale_factor=2, mode="nearest") if i < g - 1 else None
            groups.append(_group(widths, n_layers, (1, 3, 3, 3), up))
        self.groups = nn.Sequential(*groups)
        self.output = nn.Sequential(nn.ReLU(), _conv(n, 2 * cfg.channels, 1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.output(self.groups(self.input(z)))


def map_pixels(x: torch.Tensor) -> torch.Tensor:
    """``[0, 1] -> [eps, 1 - eps]``."""
    return (1 - 2 * LOGIT_LAPLACE_EPS) * x + LOGIT_LAPLACE_EPS


def unmap_pixels(x: torch.Tensor) -> torch.Tensor:
    """``[eps, 1 - eps] -> [0, 1]`` (clamped)."""
    return ((x - LOGIT_LAPLACE_EPS) / (1 - 2 * LOGIT_LAPLACE_EPS)).clamp(0, 1)


def logit_laplace_nll(x: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    """Per-image ``-log p(x)`` ``(B,)`` under ``p(x) = exp(-|logit x - mu| / b) / (2 b x (1 - x))``.

    ``x`` ``(B, C, H, W)`` in ``(0, 1)``; ``stats`` ``(B, 2C, H, W)``: ``mu`` then ``log b``.
    """
    mu, log_b = stats.chunk(2, dim=1)
    nll = math.log(2) + log_b + torch.log(x * (1 - x)) + (torch.logit(x) - mu).abs() * torch.exp(-log_b)
    return nll.flatten(1).sum(1)


class DiscreteVAE(nn.Module):
    """Training forward: ``(decoder statistics, encoder logits)``; :meth:`reconstruct` for eval."""

    def __init__(self, cfg: DVAEConfig) -> None:
        super().__init__()
        self.vocab_size, self.temperature = cfg.vocab_size, cfg.temperature
        self.encoder = DVAEEncoder(cfg)
        self.decoder = DVAEDecoder(cfg)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.encoder(x)  # (B, V, T, T)
        z = F.gumbel_softmax(logits, tau=self.temperature, dim=1)  # relaxed one-hot over the vocabulary
        return self.decoder(z), logits

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T, T)``: the most likely code at each position."""
        return self.encoder(x).argmax(dim=1)

    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T, T)`` -> images ``(B, 3, 8T, 8T)`` in ``[0, 1]``."""
        z = F.one_hot(tokens, self.vocab_size).permute(0, 3, 1, 2).to(self.decoder.input.weight.dtype)
        stats = self.decoder(z)  # (B, 6, 8T, 8T)
        return unmap_pixels(torch.sigmoid(stats[:, : stats.shape[1] // 2]))

    def reconstruct(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.encode(x)
        return tokens, self.decode(tokens)


def negative_elbo(x: torch.Tensor, stats: torch.Tensor, logits: torch.Tensor, kl_weight: float) -> torch.Tensor:
    """Mean over images of ``logit-Laplace NLL + beta KL(q(z | x) || uniform)``."""
    b, vocab = logits.shape[:2]
    log_q = F.log_softmax(logits.float(), dim=1).permute(0, 2, 3, 1).reshape(-1, vocab)  # (B T T, V)
    log_uniform = torch.full_like(log_q, -math.log(vocab))
    # kl_div(input, target) = sum target (log target - input): with log targets, sum q (log q - log U)
    kl = F.kl_div(log_uniform, log_q, reduction="sum", log_target=True) / b
    return logit_laplace_nll(x, stats.float()).mean() + kl_weight * kl


class DVAEWorkload(Workload):
    """Train: negative ELBO with Gumbel-softmax codes; eval: argmax tokens and their decoding."""

    def __init__(self, *args, kl_weight: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.kl_weight = kl_weight

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        (x,) = self.inputs
        return self.module(x) if self.ctx.train else self.module.reconstruct(x)

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        stats, logits = outputs
        return negative_elbo(self.inputs[0], stats, logits, self.kl_weight)


def _create_dalle_dvae(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(vocab_size=32, n_hid=8, n_init=8, image_size=16) if ctx.smoke else {}
    cfg = replace(DVAEConfig(), **{**smoke, **kwargs})
    images = map_pixels(ctx.rand(ctx.batch_size, cfg.channels, cfg.image_size, cfg.image_size))
    model = DiscreteVAE(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4) if ctx.train else None
    return DVAEWorkload(ctx, model, (images,), optimizer=opt, kl_weight=cfg.kl_weight)


@register_model(
    domain="vision",
    task="image_tokenizer",
    batch_size=(8, 8),
    tags=("vae", "generation"),
    source="Ramesh et al., Zero-Shot Text-to-Image Generation (DALL-E), ICML 2021; openai/DALL-E dVAE",
    param_count=97_616_006,  # encoder 53,786,240 + decoder 43,829,766, from the released architecture
    unsupported_precisions=("fp16",),
    notes="Synthetic 256x256 images. Gumbel-softmax temperature 1/16 and KL weight 6.6: the end "
    "points of the paper's annealing schedules. "
    "fp16 unsupported: pure-fp16 training turns the parameters NaN within a few steps (Adam in "
    "fp16, no loss scaling); fp16 eval, bf16 and amp run finite.",
)
def dalle_dvae(ctx: BuildContext, **kwargs) -> Workload:
    """DALL-E dVAE (8192 codes, 32x32 tokens from 256x256), logit-Laplace ELBO with Gumbel-softmax."""
    return _create_dalle_dvae(ctx, **kwargs)
