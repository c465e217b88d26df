"""Video classification with 3-D convolutions: R3D-18 and R(2+1)D-18 (Tran et al., "A Closer Look
at Spatiotemporal Convolutions for Action Recognition", CVPR 2018) and C3D (Tran et al.,
"Learning Spatiotemporal Features with 3D Convolutional Networks", ICCV 2015).

R3D / R(2+1)D follow torchvision's ``models/video/resnet.py`` (BSD-3-Clause) layer for layer:
a ResNet-18 whose convs are 3x3x3 (``r3d_18``) or factorised into a 1x3x3 spatial conv, BN,
ReLU and a 3x1x1 temporal conv with ``M = floor(27 N_in N_out / (9 N_in + 3 N_out))`` channels
between them (``r2plus1d_18``: as many weights as the 3x3x3 conv, one more nonlinearity),
stride 2 in space and time in stages 2-4, a stem that does not downsample time, global average
pooling and a 400-way Kinetics head. Parameter counts equal torchvision's (33,371,472 and
31,505,325). Training as torchvision's ``references/video_classification``: 16-frame 112 x 112
clips, SGD (lr 0.01, momentum 0.9, weight decay 1e-4), cross-entropy, batch 24.

C3D follows the common PyTorch port of the authors' Caffe Sports-1M model
(DavideA/c3d-pytorch ``C3D_model.py``, MIT): eight 3x3x3 convs with bias, five max pools
(the first spatial only, the last padded in space so 7 x 7 becomes 4 x 4), fc6/fc7 of 4096 with
dropout 0.5, a 487-way Sports-1M head and a softmax at inference. Training as the paper sec. 3.2:
SGD on 16 x 112 x 112 crops, mini-batches of 30, lr 0.003; momentum 0.9 is our assumption (the
Caffe default the paper does not state). Written from the papers and the references' layer
lists; no code copied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["C3D", "C3DConfig", "Conv2Plus1D", "VideoBasicBlock", "VideoResNet", "midplanes"]

KINETICS_CLASSES = 400
SPORTS1M_CLASSES = 487


def midplanes(in_planes: int, out_planes: int) -> int:
    """Channels between the spatial and temporal convs of (2+1)D: as many weights as one 3x3x3 conv."""
    return (in_planes * out_planes * 3 * 3 * 3) // (in_planes * 3 * 3 + 3 * out_planes)


def conv3d_simple(in_planes: int, out_planes: int, mid_planes: int, stride: int = 1) -> nn.Module:
    """The full 3x3x3 conv of R3D (``mid_planes`` unused)."""
    return nn.Conv3d(in_planes, out_planes, 3, stride, 1, bias=False)


class Conv2Plus1D(nn.Sequential):
    """1x3x3 spatial conv (stride in H, W) -> BN -> ReLU -> 3x1x1 temporal conv (stride in T)."""

    def __init__(self, in_planes: int, out_planes: int, mid_planes: int, stride: int = 1) -> None:
        super().__init__(
            nn.Conv3d(in_planes, mid_planes, (1, 3, 3), (1, stride, stride), (0, 1, 1), bias=False),
            nn.BatchNorm3d(mid_planes),
            nn.ReLU(inplace=True),
            nn.Conv3d(mid_planes, out_planes, (3, 1, 1), (stride, 1, 1), (1, 0, 0), bias=False),
        )


ConvBuilder = Callable[[int, int, int, int], nn.Module]


class VideoBasicBlock(nn.Module):
    """Two (2+1)D or 3-D convs with BN and an identity (or 1x1x1 strided) shortcut."""

    def __init__(self, in_planes: int, planes: int, conv: ConvBuilder, stride: int = 1) -> None:
        super().__init__()
        mid = midplanes(in_planes, planes)  # both convs use the block's first (in, out) pair, as torchvision
        self.conv1 = nn.Sequential(conv(in_planes, planes, mid, stride), nn.BatchNorm3d(planes), nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(conv(planes, planes, mid, 1), nn.BatchNorm3d(planes))
        self.downsample = None
        if stride != 1 or in_planes != planes:  # stride in T, H and W alike
            self.downsample = nn.Sequential(nn.Conv3d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm3d(planes))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv2(self.conv1(x)) + shortcut)


class VideoResNet(nn.Module):
    """Clips ``(B, 3, T, H, W)`` -> logits ``(B, num_classes)``; output stride (8, 16, 16)."""

    def __init__(
        self,
        conv: ConvBuilder,
        stem: nn.Module,
        *,
        layers: tuple[int, ...] = (2, 2, 2, 2),
        widths: tuple[int, ...] = (64, 128, 256, 512),
        num_classes: int = KINETICS_CLASSES,
    ) -> None:
        super().__init__()
        self.stem = stem  # (B, 64, T, H/2, W/2)
        stages, in_planes = [], widths[0]
        for i, (n, planes) in enumerate(zip(layers, widths)):
            stride = 1 if i == 0 else 2
            blocks = [VideoBasicBlock(in_planes, planes, conv, stride)]
            blocks += [VideoBasicBlock(planes, planes, conv) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            in_planes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages  # (B, 512, T/8, H/16, W/16) after layer4
        self.avgpool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(in_planes, num_classes)
        for m in self.modules():  # torchvision's init
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm3d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        return self.fc(self.avgpool(x).flatten(1))


def r3d_stem(width: int = 64) -> nn.Sequential:
    """3x7x7 conv, stride (1, 2, 2)."""
    return nn.Sequential(
        nn.Conv3d(3, width, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False), nn.BatchNorm3d(width), nn.ReLU(inplace=True)
    )


def r2plus1d_stem(width: int = 64) -> nn.Sequential:
    """1x7x7 spatial conv to 45 channels, stride (1, 2, 2), then a 3x1x1 temporal conv."""
    mid = 45 * width // 64
    return nn.Sequential(
        nn.Conv3d(3, mid, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False), nn.BatchNorm3d(mid), nn.ReLU(inplace=True),
        nn.Conv3d(mid, width, (3, 1, 1), 1, (1, 0, 0), bias=False), nn.BatchNorm3d(width), nn.ReLU(inplace=True),
    )  # fmt: skip


def _create_video_resnet(ctx: BuildContext, factorised: bool, **kwargs) -> Workload:
    widths = kwargs.pop("widths", ctx.pick((64, 128, 256, 512), (8, 16, 16, 32)))
    frames, size = ctx.pick((16, 112), (8, 32))
    stem = (r2plus1d_stem if factorised else r3d_stem)(widths[0])
    model = VideoResNet(Conv2Plus1D if factorised else conv3d_simple, stem, widths=widths, **kwargs)
    clips = ctx.randn(ctx.batch_size, 3, frames, size, size)
    labels = ctx.randint(0, model.fc.out_features, (ctx.batch_size,))
    opt = ctx.optimizer(model.parameters(), "sgd", lr=0.01, momentum=0.9, weight_decay=1e-4) if ctx.train else None
    return Workload(ctx, model, (clips,), labels, loss_fn=F.cross_entropy, optimizer=opt)


@dataclass(frozen=True)
class C3DConfig:
    widths: tuple[int, ...] = (64, 128, 256, 512, 512)  # conv1, conv2, conv3a/b, conv4a/b, conv5a/b
    hidden: int = 4096  # fc6, fc7
    num_classes: int = SPORTS1M_CLASSES
    frames: int = 16  # clip length; 16 -> 1 after the four temporal poolings
    size: int = 112  # crop side


class C3D(nn.Module):
    """Clips ``(B, 3, 16, 112, 112)`` -> logits ``(B, num_classes)``."""

    def __init__(self, cfg: C3DConfig) -> None:
        super().__init__()
        c1, c2, c3, c4, c5 = cfg.widths
        conv = lambda i, o: nn.Conv3d(i, o, 3, padding=1)
        self.conv1, self.conv2 = conv(3, c1), conv(c1, c2)
        self.conv3a, self.conv3b = conv(c2, c3), conv(c3, c3)
        self.conv4a, self.conv4b = conv(c3, c4), conv(c4, c4)
        self.conv5a, self.conv5b = conv(c4, c5), conv(c5, c5)
        self.pool1 = nn.MaxPool3d((1, 2, 2), (1, 2, 2))  # space only: keep early temporal detail
        self.pool = nn.MaxPool3d(2, 2)  # pool2..pool4
        self.pool5 = nn.MaxPool3d(2, 2, padding=(0, 1, 1))  # 7 x 7 -> 4 x 4 at 112 px
        t, s = cfg.frames // 16, (cfg.size // 16 + 2 - 2) // 2 + 1
        self.features = c5 * t * s * s  # 8192 at 16 x 112 x 112
        self.fc6 = nn.Linear(self.features, cfg.hidden)
        self.fc7 = nn.Linear(cfg.hidden, cfg.hidden)
        self.fc8 = nn.Linear(cfg.hidden, cfg.num_classes)
        self.dropout = nn.Dropout(0.5)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.relu(self.conv1(x)))  # (B, 64, 16, 56, 56)
        x = self.pool(self.relu(self.conv2(x)))  # (B, 128, 8, 28, 28)
        x = self.pool(self.relu(self.conv3b(self.relu(self.conv3a(x)))))  # (B, 256, 4, 14, 14)
        x = self.pool(self.relu(self.conv4b(self.relu(self.conv4a(x)))))  # (B, 512, 2, 7, 7)
        x = self.pool5(self.relu(self.conv5b(self.relu(self.conv5a(x)))))  # (B, 512, 1, 4, 4)
        x = x.view(-1, self.features)
        x = self.dropout(self.relu(self.fc6(x)))
        x = self.dropout(self.relu(self.fc7(x)))
        return self.fc8(x)


class C3DWorkload(Workload):
    """Train: cross-entropy on logits; eval: class probabilities (the port's softmax output)."""

    def forward(self) -> torch.Tensor:
        logits = self.module(*self.inputs)
        return logits if self.ctx.train else F.softmax(logits, dim=1)


def _create_c3d(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(widths=(8, 16, 16, 32, 32), hidden=64, size=32) if ctx.smoke else {}
    cfg = replace(C3DConfig(), **{**smoke, **kwargs})
    model = C3D(cfg)
    clips = ctx.randn(ctx.batch_size, 3, cfg.frames, cfg.size, cfg.size)
    labels = ctx.randint(0, cfg.num_classes, (ctx.batch_size,))
    opt = ctx.optimizer(model.parameters(), "sgd", lr=0.003, momentum=0.9) if ctx.train else None
    return C3DWorkload(ctx, model, (clips,), labels, loss_fn=F.cross_entropy, optimizer=opt)


_SOURCE = "Tran et al., A Closer Look at Spatiotemporal Convolutions, CVPR 2018; torchvision models.video"
_NOTES = "Kinetics-400, 16x112x112 clips. Smoke: 8x32x32 clips, widths 8-32."


@register_model(
    domain="vision",
    task="video_classification",
    source=_SOURCE,
    batch_size=(24, 8),
    param_count=33_371_472,
    notes=_NOTES,
)
def r3d_18(ctx: BuildContext, **kwargs) -> Workload:
    """ResNet-18 with 3x3x3 convs on 16-frame 112x112 clips."""
    return _create_video_resnet(ctx, factorised=False, **kwargs)


@register_model(
    domain="vision",
    task="video_classification",
    source=_SOURCE,
    batch_size=(24, 8),
    param_count=31_505_325,
    notes=_NOTES,
)
def r2plus1d_18(ctx: BuildContext, **kwargs) -> Workload:
    """ResNet-18 with (2+1)D factorised convs on 16-frame 112x112 clips."""
    return _create_video_resnet(ctx, factorised=True, **kwargs)


@register_model(
    domain="vision", task="video_classification", batch_size=(30, 8), param_count=79_991_015,
    source="Tran et al., C3D, ICCV 2015; DavideA/c3d-pytorch (Sports-1M)",
    notes="param_count counted from the port's layer list (487-way Sports-1M head). "
          "Smoke: 16x32x32 clips, widths 8-32, fc 64.",
)  # fmt: skip
def c3d(ctx: BuildContext, **kwargs) -> Workload:
    """C3D (8 3x3x3 convs, fc6/fc7 4096) on 16-frame 112x112 Sports-1M clips."""
    return _create_c3d(ctx, **kwargs)
