"""Super SloMo: Jiang et al., "Super SloMo: High Quality Estimation of Multiple Intermediate
Frames for Video Interpolation", CVPR 2018.

Follows avinashpaliwal/Super-SloMo (MIT license), ``model.py`` and ``train.py``, as TorchBench's
``Super_SloMo`` runs it: a flow-computation U-Net (6 -> 4 channels: F_0->1, F_1->0) and an
arbitrary-time flow-interpolation U-Net (20 -> 5 channels: flow residuals + visibility),
backward warping by bilinear ``grid_sample``, 352x352 Adobe-240fps crops, one of 7
intermediate frames per sample, Adam(1e-4). As TorchBench's ``model_wrapper.Model`` the
module takes (frame index, I0, I1, IFrame) and returns (Ft_p, loss) in both modes: the loss is
204 x reconstruction L1 + 102 x warping L1 + 0.005 x perceptual MSE + smoothness, the
perceptual term on VGG16's conv1_1 ... conv4_3 (``features[:22]``, frozen; TorchBench loads
ImageNet weights, here they are random and seeded). TorchBench's eval runs the same forward
(loss included) under no_grad (its ``__init__.py``:73-75).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..vgg import VGG, VGG16_LAYERS

__all__ = ["backward_warp", "SloMoUNet"]

_NUM_INTERMEDIATE = 7  # frames between I0 and I1 in the Adobe-240fps training clips


def _lrelu(x: torch.Tensor) -> torch.Tensor:
    return F.leaky_relu(x, negative_slope=0.1)


class _Down(nn.Module):
    """avg-pool /2 then two k x k convs with LeakyReLU(0.1)."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, kernel, padding=kernel // 2)
        self.conv2 = nn.Conv2d(out_ch, out_ch, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _lrelu(self.conv2(_lrelu(self.conv1(F.avg_pool2d(x, 2)))))


class _Up(nn.Module):
    """bilinear x2, conv3x3, concatenate the skip, conv3x3 (LeakyReLU(0.1) after each conv)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.conv2 = nn.Conv2d(2 * out_ch, out_ch, 3, padding=1)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = _lrelu(self.conv1(F.interpolate(x, scale_factor=2, mode="bilinear")))
        return _lrelu(self.conv2(torch.cat([x, skip], dim=1)))


class SloMoUNet(nn.Module):
    """``(B, in, H, W)`` -> ``(B, out, H, W)``; H and W divisible by 32 (five /2 levels)."""

    def __init__(self, in_channels: int, out_channels: int, width: int = 32) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 7, padding=3)
        self.conv2 = nn.Conv2d(width, width, 7, padding=3)
        widths = tuple(width * m for m in (1, 2, 4, 8, 16, 16))  # 32 ... 512 in the reference
        kernels = (5, 3, 3, 3, 3)
        self.downs = nn.ModuleList(_Down(i, o, k) for i, o, k in zip(widths, widths[1:], kernels))
        self.ups = nn.ModuleList(_Up(i, o) for i, o in zip(widths[::-1], widths[-2::-1]))
        self.conv3 = nn.Conv2d(width, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _lrelu(self.conv2(_lrelu(self.conv1(x))))  # (B, 32, H, W)
        skips = []
        for down in self.downs:  # (B, 64, H/2) ... (B, 512, H/32)
            skips.append(x)
            x = down(x)
        for up in self.ups:  # back to (B, 32, H, W)
            x = up(x, skips.pop())
        return _lrelu(self.conv3(x))


def backward_warp(image: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """Sample ``image`` ``(B, C, H, W)`` at ``p + flow(p)`` for every pixel p (bilinear, zeros outside).

    ``flow`` is ``(B, 2, H, W)`` in pixels, x then y. Unlike the reference (which maps pixel i
    to ``2i/W - 1`` and so shifts by half a pixel under ``align_corners=False``), pixel
    centres map exactly to themselves: zero flow returns the image.
    """
    _, _, h, w = image.shape
    ys, xs = torch.meshgrid(
        torch.arange(h, device=flow.device, dtype=flow.dtype),
        torch.arange(w, device=flow.device, dtype=flow.dtype),
        indexing="ij",
    )
    x = (xs + flow[:, 0]) * (2 / max(w - 1, 1)) - 1  # (B, H, W) in [-1, 1]
    y = (ys + flow[:, 1]) * (2 / max(h - 1, 1)) - 1
    return F.grid_sample(image, torch.stack([x, y], dim=3), mode="bilinear", align_corners=True)


def _time(frame_index: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    # Intermediate frame k in 0..6 sits at t = (k + 1) / 8; shaped (B, 1, 1, 1) to broadcast.
    return ((frame_index.to(like.dtype) + 1) / (_NUM_INTERMEDIATE + 1)).view(-1, 1, 1, 1)


def _smoothness(flow: torch.Tensor) -> torch.Tensor:
    return (flow[..., :-1] - flow[..., 1:]).abs().mean() + (flow[..., :-1, :] - flow[..., 1:, :]).abs().mean()


def vgg16_conv4_3(width_mult: float = 1.0) -> nn.Sequential:
    """VGG16 ``features[:22]``: conv1_1 ... conv4_3 (before its ReLU), frozen (7,635,264 weights)."""
    layers = VGG16_LAYERS[: VGG16_LAYERS.index(512) + 3]  # through the third 512-channel conv
    features = VGG(layers, num_classes=1, hidden_dim=1, width_mult=width_mult).features[:22]
    return features.requires_grad_(False)


class SuperSloMo(nn.Module):
    """(frame index, I0, I1, IFrame) -> (the frame at t, training loss), as TorchBench's ModelWrapper."""

    def __init__(self, width: int = 32, vgg_width_mult: float = 1.0) -> None:
        super().__init__()
        self.flow_comp = SloMoUNet(6, 4, width)  # I0, I1 -> F_0->1, F_1->0
        # I0, I1, F_0->1, F_1->0, F_t->1, F_t->0, g(I1, F_t->1), g(I0, F_t->0) -> dF_t->0, dF_t->1, V_t->0
        self.arb_time_flow = SloMoUNet(20, 5, width)
        self.vgg16_conv_4_3 = vgg16_conv4_3(vgg_width_mult)  # perceptual loss features

    def forward(
        self, frame_index: torch.Tensor, frame0: torch.Tensor, frame1: torch.Tensor, frame_gt: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        flow = self.flow_comp(torch.cat([frame0, frame1], 1))
        f01, f10 = flow[:, :2], flow[:, 2:]
        t = _time(frame_index, frame0)
        # Eq. 4: intermediate flows approximated from the bidirectional ones.
        ft0 = -(1 - t) * t * f01 + t * t * f10
        ft1 = (1 - t) * (1 - t) * f01 - t * (1 - t) * f10
        warp0, warp1 = backward_warp(frame0, ft0), backward_warp(frame1, ft1)
        out = self.arb_time_flow(torch.cat([frame0, frame1, f01, f10, ft1, ft0, warp1, warp0], 1))
        ft0_refined, ft1_refined = out[:, :2] + ft0, out[:, 2:4] + ft1
        vis0 = torch.sigmoid(out[:, 4:5])  # visibility of I0 at t; I1's is its complement
        vis1 = 1 - vis0
        # Eq. 1: visibility- and time-weighted fusion of the two warped frames.
        num = (1 - t) * vis0 * backward_warp(frame0, ft0_refined) + t * vis1 * backward_warp(frame1, ft1_refined)
        frame_t = num / ((1 - t) * vis0 + t * vis1)
        l1 = F.l1_loss
        reconstruction = l1(frame_t, frame_gt)
        perceptual = F.mse_loss(self.vgg16_conv_4_3(frame_t), self.vgg16_conv_4_3(frame_gt))
        warping = (
            l1(warp0, frame_gt)
            + l1(warp1, frame_gt)
            + l1(backward_warp(frame0, f10), frame1)
            + l1(backward_warp(frame1, f01), frame0)
        )
        # 204 and 102 are the paper's 0.8 and 0.4 rescaled for [0, 1] pixels instead of [0, 255].
        loss = 204 * reconstruction + 102 * warping + 0.005 * perceptual + _smoothness(f10) + _smoothness(f01)
        return frame_t, loss


class SuperSloMoWorkload(Workload):
    """Train: backward of the module's own loss and an Adam step; eval: the same forward."""

    def compute_loss(self, out: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return out[1]


def _create_super_slomo(ctx: BuildContext, *, image_size: int = 352, width: int = 32) -> Workload:
    # Smoke: 32x32 is the smallest frame for five /2 levels; a quarter of the width (and of
    # VGG's channels) keeps the layers while the Adam update of 39.6 M weights no longer
    # dominates a CPU step.
    module = SuperSloMo(ctx.pick(width, width // 4), ctx.pick(1.0, 0.125))
    b, s = ctx.batch_size, ctx.pick(image_size, 32)
    mean = torch.tensor([0.429, 0.431, 0.397], device=ctx.device).view(1, 3, 1, 1)  # the loader's normalization
    frame0, frame_gt, frame1 = (ctx.rand(b, 3, s, s) - mean for _ in range(3))
    frame_index = ctx.randint(0, _NUM_INTERMEDIATE, (b,))
    trainable = [p for p in module.parameters() if p.requires_grad]
    opt = ctx.optimizer(trainable, "adam", lr=1e-4) if ctx.train else None
    return SuperSloMoWorkload(ctx, module, (frame_index, frame0, frame1, frame_gt), optimizer=opt)


@register_model(
    domain="vision",
    task="video_interpolation",
    source="Jiang et al., Super SloMo, CVPR 2018; avinashpaliwal/Super-SloMo",
    batch_size=(6, 6),  # TorchBench Super_SloMo DEFAULT_TRAIN_BSIZE / DEFAULT_EVAL_BSIZE
    # flow U-Net 19,794,116 + interpolation U-Net 19,816,357 + frozen VGG16 conv1_1..conv4_3 7,635,264
    param_count=47_245_737,
    notes="VGG16 perceptual features are random (TorchBench loads ImageNet weights); smoke is 32x32 at 1/4 width.",
)
def Super_SloMo(ctx: BuildContext, **kwargs: Any) -> Workload:  # TorchBench's name
    """Flow and arbitrary-time interpolation U-Nets with backward warping, 352x352 frames."""
    return _create_super_slomo(ctx, **kwargs)
