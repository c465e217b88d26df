"""Spatial transformer network: Jaderberg, Simonyan, Zisserman and Kavukcuoglu, "Spatial
Transformer Networks", NeurIPS 2015.

The model of the PyTorch tutorial "Spatial Transformer Networks Tutorial"
(pytorch/tutorials ``intermediate_source/spatial_transformer_tutorial.py``, BSD-3-Clause) on
28 x 28 MNIST digits. A localisation network (conv 7x7 -> pool -> ReLU -> conv 5x5 -> pool ->
ReLU -> two linears) regresses the six numbers of an affine map ``theta`` (2 x 3), initialised
to the identity; ``F.affine_grid`` turns ``theta`` into a sampling grid over the output and
``F.grid_sample`` resamples the input there (bilinear, zero padding); a LeNet-style classifier
(conv -> pool -> ReLU, conv -> Dropout2d -> pool -> ReLU, linear 320 -> 50 -> 10, dropout)
returns log-probabilities. Training as the tutorial: SGD lr 0.01, batch 64, ``F.nll_loss``.

Differences: ``align_corners=False`` is passed explicitly to ``affine_grid``/``grid_sample``; the
tutorial relies on it being the default (and gets a warning). Written from the tutorial's
description; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["SpatialTransformerNet", "STNConfig"]


@dataclass(frozen=True)
class STNConfig:
    image_size: int = 28  # MNIST; the linear layers' sizes below hold only at 28
    num_classes: int = 10
    loc_channels: tuple[int, int] = (8, 10)  # localisation convs
    loc_hidden: int = 32  # localisation regressor's hidden width
    channels: tuple[int, int] = (10, 20)  # classifier convs
    hidden: int = 50  # classifier's hidden width


class SpatialTransformerNet(nn.Module):
    """Images ``(B, 1, 28, 28)`` -> log-probabilities ``(B, num_classes)``."""

    def __init__(self, cfg: STNConfig) -> None:
        super().__init__()
        c1, c2 = cfg.loc_channels
        self.localization = nn.Sequential(
            nn.Conv2d(1, c1, 7), nn.MaxPool2d(2, 2), nn.ReLU(True),  # (B, 8, 11, 11)
            nn.Conv2d(c1, c2, 5), nn.MaxPool2d(2, 2), nn.ReLU(True),  # (B, 10, 3, 3)
        )  # fmt: skip
        loc_side = ((cfg.image_size - 6) // 2 - 4) // 2
        self.loc_features = c2 * loc_side * loc_side
        self.fc_loc = nn.Sequential(
            nn.Linear(self.loc_features, cfg.loc_hidden), nn.ReLU(True), nn.Linear(cfg.loc_hidden, 3 * 2)
        )
        # Start at the identity transform: zero weights, bias = [[1, 0, 0], [0, 1, 0]].
        nn.init.zeros_(self.fc_loc[2].weight)
        with torch.no_grad():
            self.fc_loc[2].bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]))

        k1, k2 = cfg.channels
        self.conv1 = nn.Conv2d(1, k1, 5)
        self.conv2 = nn.Conv2d(k1, k2, 5)
        self.conv2_drop = nn.Dropout2d()
        side = ((cfg.image_size - 4) // 2 - 4) // 2
        self.features = k2 * side * side  # 320 at 28 x 28
        self.fc1 = nn.Linear(self.features, cfg.hidden)
        self.fc2 = nn.Linear(cfg.hidden, cfg.num_classes)

    def theta(self, x: torch.Tensor) -> torch.Tensor:
        """The localisation network: ``(B, 1, H, W) -> (B, 2, 3)`` affine maps of output to input coordinates."""
        xs = self.localization(x).view(-1, self.loc_features)
        return self.fc_loc(xs).view(-1, 2, 3)

    def stn(self, x: torch.Tensor) -> torch.Tensor:
        """Resample ``x`` at ``theta`` applied to the output's normalised [-1, 1] coordinates."""
        grid = F.affine_grid(self.theta(x), x.size(), align_corners=False)  # (B, H, W, 2)
        return F.grid_sample(x, grid, align_corners=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))  # (B, 10, 12, 12)
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))  # (B, 20, 4, 4)
        x = F.relu(self.fc1(x.view(-1, self.features)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def _create_stn(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(STNConfig(), **kwargs)
    images = ctx.rand(ctx.batch_size, 1, cfg.image_size, cfg.image_size)
    labels = ctx.randint(0, cfg.num_classes, (ctx.batch_size,))
    model = SpatialTransformerNet(cfg)
    opt = ctx.optimizer(model.parameters(), "sgd", lr=0.01, momentum=0.0) if ctx.train else None
    return Workload(ctx, model, (images,), labels, loss_fn=F.nll_loss, optimizer=opt)


@register_model(
    domain="vision", task="classification", batch_size=(64, 64), param_count=27_360,
    source="Jaderberg et al., Spatial Transformer Networks, 2015; PyTorch spatial_transformer_tutorial",
    notes="param_count counted from the tutorial's layer list. Smoke size is the full model (batch 2).",
)  # fmt: skip
def stn_classifier(ctx: BuildContext, **kwargs) -> Workload:
    """The PyTorch tutorial's spatial transformer + LeNet classifier on 28x28 digits."""
    return _create_stn(ctx, **kwargs)
