"""VQ-VAE with an exponential-moving-average codebook, on 32x32 images.

van den Oord, Vinyals and Kavukcuoglu, "Neural Discrete Representation Learning", NeurIPS 2017.
The reference implementation is DeepMind Sonnet's ``VectorQuantizerEMA`` and its VQ-VAE example
notebook (deepmind/sonnet ``examples/vqvae_example.ipynb``, Apache-2.0), as ported to PyTorch by
zalandoresearch/pytorch-vq-vae (MIT):

- encoder: ``Conv 4x4/2 (64) -> ReLU -> Conv 4x4/2 (128) -> ReLU -> Conv 3x3 (128)``, a residual
  stack (2 x ``ReLU -> Conv 3x3 (32) -> ReLU -> Conv 1x1 (128)`` added to the input, final ReLU),
  then a 1x1 "pre-VQ" conv to the 64-d embedding space: ``(B, 3, 32, 32) -> (B, 64, 8, 8)``;
- quantiser: squared distances ``|z|^2 - 2 z e + |e|^2`` to the 512 codes, ``argmin``, an embedding
  lookup, the commitment loss ``0.25 |z - sg(e)|^2`` and the straight-through estimator
  ``z + sg(e - z)``; in training the codebook is not learned by gradients but set to EMA averages
  (decay 0.99) of the assigned encoder outputs divided by Laplace-smoothed (eps 1e-5) EMA cluster
  sizes, with Sonnet 2's zero-debiased moving averages;
- decoder: ``Conv 3x3 (128)``, the same residual stack, ``ConvT 4x4/2 (64) -> ReLU -> ConvT 4x4/2 (3)``;
- loss: ``mean((x_hat - x)^2) / data_variance`` plus the commitment loss; Adam, lr 3e-4, batch 32.

Images are synthetic, uniform in [-0.5, 0.5] as the notebook's scaled CIFAR-10; ``data_variance``
is their exact variance 1/12 (the notebook measures it on the training set). Eval is
encode + quantise + decode with the codebook frozen. Written from the paper and the Sonnet
description; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["VQVAE", "VQVAEConfig", "VectorQuantizerEMA"]

# Variance of the synthetic pixels, uniform on [-0.5, 0.5]: 1/12 (the notebook's data_variance).
DATA_VARIANCE = 1 / 12


@dataclass(frozen=True)
class VQVAEConfig:
    num_hiddens: int = 128  # channels of the encoder / decoder trunk
    num_residual_hiddens: int = 32  # bottleneck of each residual layer
    num_residual_layers: int = 2
    embedding_dim: int = 64  # D: width of each code
    num_embeddings: int = 512  # K: codebook size
    commitment_cost: float = 0.25  # beta of the paper
    decay: float = 0.99  # EMA decay of the codebook statistics
    epsilon: float = 1e-5  # Laplace smoothing of the cluster sizes
    image_size: int = 32  # CIFAR-10
    channels: int = 3


class ResidualStack(nn.Sequential):
    """``num_layers`` x ``x + Conv1x1(ReLU(Conv3x3(ReLU(x))))``, then ReLU; shape-preserving."""

    def __init__(self, channels: int, hidden: int, num_layers: int) -> None:
        super().__init__(
            *(
                nn.Sequential(
                    nn.ReLU(), nn.Conv2d(channels, hidden, 3, padding=1), nn.ReLU(), nn.Conv2d(hidden, channels, 1)
                )
                for _ in range(num_layers)
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = x + layer(x)
        return F.relu(x)


class VectorQuantizerEMA(nn.Module):
    """``(B, D, H, W)`` -> quantised ``(B, D, H, W)``, commitment loss, code ids ``(B, H, W)``.

    The codebook ``embeddings`` ``(K, D)`` is a buffer: gradients never reach it. In training mode
    every forward updates it: ``N <- EMA(counts)``, ``m <- EMA(sum of assigned z)``, then
    ``e_k = m_k / N~_k`` with ``N~ = (N + eps) / (n + K eps) n`` (Laplace smoothing, ``n = sum N``).
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, commitment_cost: float, decay: float, epsilon: float
    ) -> None:
        super().__init__()
        self.commitment_cost, self.decay, self.epsilon = commitment_cost, decay, epsilon
        # Sonnet's initializer: VarianceScaling(distribution="uniform"), fan-in D: U(-sqrt(3/D), sqrt(3/D))
        limit = (3 / embedding_dim) ** 0.5
        self.register_buffer("embeddings", torch.empty(num_embeddings, embedding_dim).uniform_(-limit, limit))
        # Sonnet 2 ExponentialMovingAverage: a zero-initialised "hidden" average, debiased by 1 - decay^t
        self.register_buffer("hidden_cluster_size", torch.zeros(num_embeddings))
        self.register_buffer("hidden_dw", torch.zeros(num_embeddings, embedding_dim))
        self.register_buffer("counter", torch.zeros((), dtype=torch.long))

    def distances(self, flat: torch.Tensor) -> torch.Tensor:
        """Squared Euclidean distances ``(N, D), (K, D) -> (N, K)``."""
        e = self.embeddings
        return flat.pow(2).sum(1, keepdim=True) - 2 * flat @ e.T + e.pow(2).sum(1)

    @torch.no_grad()
    def _ema_update(self, flat: torch.Tensor, indices: torch.Tensor) -> None:
        # statistics in the codebook's dtype, outside autocast (as Sonnet keeps them in fp32)
        flat = flat.to(self.embeddings.dtype)
        encodings = F.one_hot(indices, self.embeddings.shape[0]).to(flat.dtype)  # (B H W, K)
        self.counter += 1
        debias = 1 - self.decay**self.counter  # a tensor: no host sync
        # hidden <- hidden - (hidden - value) (1 - decay), average = hidden / (1 - decay^t)
        self.hidden_cluster_size.lerp_(encodings.sum(0), 1 - self.decay)
        with torch.autocast(flat.device.type, enabled=False):
            dw = encodings.T @ flat  # (K, D) sums of the inputs assigned to each code
        self.hidden_dw.lerp_(dw, 1 - self.decay)
        cluster_size = self.hidden_cluster_size / debias
        n = cluster_size.sum()
        cluster_size = (cluster_size + self.epsilon) / (n + self.epsilon * cluster_size.numel()) * n
        self.embeddings.copy_(self.hidden_dw / debias / cluster_size.unsqueeze(1))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, d, h, w = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, d)  # (B H W, D) channels last
        indices = self.distances(flat).argmin(1)  # (B H W,) nearest code
        quantized = F.embedding(indices, self.embeddings)  # (B H W, D)
        if self.training:
            self._ema_update(flat.detach(), indices)
        # only the encoder is pulled towards its codes; the codebook follows by EMA
        loss = self.commitment_cost * F.mse_loss(flat, quantized.detach())
        quantized = flat + (quantized - flat).detach()  # straight-through: gradient of the identity
        quantized = quantized.view(b, h, w, d).permute(0, 3, 1, 2)
        return quantized, loss, indices.view(b, h, w)


class VQVAE(nn.Module):
    """Images ``(B, C, S, S)`` -> ``(reconstruction, commitment loss, code ids (B, S/4, S/4))``."""

    def __init__(self, cfg: VQVAEConfig) -> None:
        super().__init__()
        h, rh, layers = cfg.num_hiddens, cfg.num_residual_hiddens, cfg.num_residual_layers
        self.encoder = nn.Sequential(
            nn.Conv2d(cfg.channels, h // 2, 4, stride=2, padding=1),
            nn.ReLU(),  # (B, h/2, S/2, S/2)
            nn.Conv2d(h // 2, h, 4, stride=2, padding=1),
            nn.ReLU(),  # (B, h, S/4, S/4)
            nn.Conv2d(h, h, 3, padding=1),
            ResidualStack(h, rh, layers),
        )
        self.pre_vq = nn.Conv2d(h, cfg.embedding_dim, 1)  # (B, D, S/4, S/4)
        self.quantizer = VectorQuantizerEMA(
            cfg.num_embeddings, cfg.embedding_dim, cfg.commitment_cost, cfg.decay, cfg.epsilon
        )
        self.decoder = nn.Sequential(
            nn.Conv2d(cfg.embedding_dim, h, 3, padding=1),
            ResidualStack(h, rh, layers),
            nn.ConvTranspose2d(h, h // 2, 4, stride=2, padding=1),
            nn.ReLU(),  # (B, h/2, S/2, S/2)
            nn.ConvTranspose2d(h // 2, cfg.channels, 4, stride=2, padding=1),  # (B, C, S, S)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        quantized, vq_loss, indices = self.quantizer(self.pre_vq(self.encoder(x)))
        return self.decoder(quantized), vq_loss, indices


class VQVAEWorkload(Workload):
    """Train: reconstruction / data variance + commitment loss; eval: encode, quantise, decode."""

    def compute_loss(self, outputs: tuple) -> torch.Tensor:
        x_hat, vq_loss, _ = outputs
        (x,) = self.inputs
        return F.mse_loss(x_hat, x) / DATA_VARIANCE + vq_loss


def _create_vq_vae(ctx: BuildContext, **kwargs) -> Workload:
    smoke = (
        dict(num_hiddens=16, num_residual_hiddens=8, embedding_dim=8, num_embeddings=32, image_size=16)
        if ctx.smoke
        else {}
    )
    cfg = replace(VQVAEConfig(), **{**smoke, **kwargs})
    images = ctx.rand(ctx.batch_size, cfg.channels, cfg.image_size, cfg.image_size) - 0.5  # [-0.5, 0.5)
    model = VQVAE(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4) if ctx.train else None
    return VQVAEWorkload(ctx, model, (images,), optimizer=opt)


@register_model(
    domain="vision",
    task="image_generation",
    batch_size=(32, 32),
    tags=("vae", "vector_quantization"),
    source="van den Oord et al., Neural Discrete Representation Learning (VQ-VAE), NeurIPS 2017; "
    "deepmind/sonnet vqvae_example (VectorQuantizerEMA)",
    # encoder 364,160 + pre-VQ 8,256 + decoder 290,307; the 512 x 64 codebook is an EMA buffer
    param_count=662_723,
    unsupported_precisions=("fp16",),
    notes="Synthetic 32x32 images in [-0.5, 0.5]. The codebook is updated by EMA inside the "
    "training forward, not by the optimizer. "
    "fp16 unsupported: pure-fp16 training turns the parameters NaN within a few steps (Adam in "
    "fp16, no loss scaling); fp16 eval, bf16 and amp run finite.",
)
def vq_vae(ctx: BuildContext, **kwargs) -> Workload:
    """VQ-VAE (128 hiddens, 512 x 64 EMA codebook) on 32x32 images, as Sonnet's example."""
    return _create_vq_vae(ctx, **kwargs)
