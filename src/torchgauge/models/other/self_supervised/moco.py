"""MoCo: momentum contrast for self-supervised visual representations, v1 and v2.

He et al., "Momentum Contrast for Unsupervised Visual Representation Learning", 2020 (v1)
and Chen et al., "Improved Baselines with Momentum Contrastive Learning", 2020 (v2: MLP
head, temperature 0.2), following the reference ``moco/builder.py`` of
facebookresearch/moco (CC-BY-NC 4.0) that TorchBench's ``moco`` runs; written anew here.

A query encoder (trained by SGD) and a key encoder (an exponential moving average of it,
m = 0.999) embed two views of each image; the InfoNCE loss classifies each query's own key
against a queue of K = 65536 keys from earlier batches, and the new keys replace the oldest
ones. Both encoders are ResNet-50s whose classifier becomes the 128-d projection. The
reference's "shuffle BN" only matters across GPUs and is a no-op on one device, so it is
left out. Smoke size uses ResNet-18 encoders on 32x32 images with a 256-key queue.

``moco`` is TorchBench's configuration: K = 32000 and, per step, its loader's two batches of
(query, key) images (``randn(B, 3, 224, 224)`` each): training runs two SGD iterations, eval
two forwards. ``moco_v2`` keeps the paper's K = 65536 and one pair per step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ...common.resnet import SMOKE_WIDTH_MULT, resnet

__all__ = ["MoCo"]


@dataclass(frozen=True)
class MoCoConfig:
    depth: int = 50  # ResNet depth of both encoders
    dim: int = 128  # embedding size
    queue_size: int = 65536  # K: negatives kept from earlier batches
    momentum: float = 0.999  # key encoder EMA
    temperature: float = 0.07  # v1; v2 uses 0.2
    mlp: bool = False  # v2: a 2-layer MLP projection head
    image_size: int = 224
    width_mult: float = 1.0  # ResNet stage widths (smoke: SMOKE_WIDTH_MULT; depth and blocks kept)


def _encoder(cfg: MoCoConfig) -> nn.Module:
    net = resnet(cfg.depth, num_classes=cfg.dim, width_mult=cfg.width_mult)
    if cfg.mlp:  # v2: fc -> Linear(C, C), ReLU, fc
        fc = net.head.fc
        net.head.fc = nn.Sequential(nn.Linear(fc.in_features, fc.in_features), nn.ReLU(inplace=True), fc)
    return net


class MoCo(nn.Module):
    """Two views ``(B, 3, H, W)`` -> contrastive logits ``(B, 1 + K)``; the positive key is column 0."""

    def __init__(self, cfg: MoCoConfig) -> None:
        super().__init__()
        self.momentum, self.temperature = cfg.momentum, cfg.temperature
        self.encoder_q = _encoder(cfg)
        self.encoder_k = _encoder(cfg)
        self.encoder_k.load_state_dict(self.encoder_q.state_dict())
        self.encoder_k.requires_grad_(False)  # updated by the moving average only
        self.register_buffer("queue", F.normalize(torch.randn(cfg.dim, cfg.queue_size), dim=0))  # (dim, K)
        self.register_buffer("queue_ptr", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def _momentum_update(self) -> None:
        for p_k, p_q in zip(self.encoder_k.parameters(), self.encoder_q.parameters()):
            p_k.lerp_(p_q.detach(), 1.0 - self.momentum)  # p_k = m p_k + (1 - m) p_q

    @torch.no_grad()
    def _enqueue(self, keys: torch.Tensor) -> None:
        # Overwrite the oldest B columns, wrapping around (the reference asserts K % B == 0).
        size = self.queue.shape[1]
        cols = (self.queue_ptr + torch.arange(keys.shape[0], device=keys.device)) % size
        self.queue[:, cols] = keys.T
        self.queue_ptr.copy_((self.queue_ptr + keys.shape[0]) % size)

    def forward(self, im_q: torch.Tensor, im_k: torch.Tensor) -> torch.Tensor:
        q = F.normalize(self.encoder_q(im_q), dim=1)  # (B, dim)
        with torch.no_grad():
            if self.training:
                self._momentum_update()
            k = F.normalize(self.encoder_k(im_k), dim=1)  # (B, dim)
        l_pos = (q * k).sum(dim=1, keepdim=True)  # (B, 1)
        l_neg = q @ self.queue.clone().detach()  # (B, K); cloned: the queue changes in place below
        logits = torch.cat([l_pos, l_neg], dim=1) / self.temperature
        if self.training:
            self._enqueue(k)
        return logits


class MoCoPairsWorkload(Workload):
    """One step over every (query, key) pair among the inputs: an SGD iteration each (train)
    or a forward each (eval)."""

    def _pairs(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(zip(self.inputs[0::2], self.inputs[1::2]))

    def forward(self) -> torch.Tensor:
        for im_q, im_k in self._pairs():
            logits = self.module(im_q, im_k)
        return logits

    def train_step(self) -> torch.Tensor:
        for im_q, im_k in self._pairs():
            self.optimizer.zero_grad(set_to_none=True)
            with self.autocast():
                loss = F.cross_entropy(self.module(im_q, im_k), self.targets)
            self.backward_and_step(loss)
        return loss.detach()


def _create_moco(ctx: BuildContext, pairs: int = 1, **kwargs) -> Workload:
    smoke = dict(depth=18, queue_size=256, image_size=32, width_mult=SMOKE_WIDTH_MULT) if ctx.smoke else {}
    cfg = replace(MoCoConfig(), **{**smoke, **kwargs})
    model = MoCo(cfg)
    # (query, key) views, pair after pair
    images = tuple(ctx.randn(ctx.batch_size, 3, cfg.image_size, cfg.image_size) for _ in range(2 * pairs))
    positives = torch.zeros(ctx.batch_size, dtype=torch.long, device=ctx.device)  # the key of column 0
    opt = None
    if ctx.train:
        opt = torch.optim.SGD(model.encoder_q.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
    return MoCoPairsWorkload(ctx, model, images, positives, optimizer=opt)


_SOURCE = "He et al., MoCo, 2020; Chen et al., MoCo v2, 2020; facebookresearch/moco"


@register_model(
    domain="other",
    task="self_supervised_learning",
    source=_SOURCE,
    batch_size=(32, 32),
    tags=("contrastive",),
    param_count=47_540_608,
)  # 2 x ResNet-50 with a 128-d fc
def moco(ctx: BuildContext, **kwargs) -> Workload:
    """MoCo v1 as TorchBench: ResNet-50 query/key encoders, 128-d, K=32000, m=0.999, T=0.07, two pairs per step."""
    full_size = {} if ctx.smoke else {"queue_size": 32000}  # smoke keeps its 256-key queue
    return _create_moco(ctx, **{"pairs": 2, **full_size, **kwargs})


@register_model(
    domain="other",
    task="self_supervised_learning",
    source=_SOURCE,
    batch_size=(32, 32),
    tags=("contrastive",),
    param_count=55_933_312,
)  # 2 x (ResNet-50 + 2048-2048-128 MLP head)
def moco_v2(ctx: BuildContext, **kwargs) -> Workload:
    """MoCo v2: v1 with an MLP projection head and T=0.2."""
    return _create_moco(ctx, **{"mlp": True, "temperature": 0.2, **kwargs})
