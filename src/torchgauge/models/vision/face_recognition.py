"""Face recognition by metric learning: ArcFace on an IResNet-50, FaceNet with batch-hard triplets.

**ArcFace** (Deng, Guo, Xue and Zafeiriou, "ArcFace: Additive Angular Margin Loss for Deep Face
Recognition", CVPR 2019); reference implementation ``recognition/arcface_torch`` of
github.com/deepinsight/insightface (MIT): ``backbones/iresnet.py`` (``iresnet50``), ``partial_fc_v2.py``
and ``losses.py`` (``CombinedMarginLoss``), ``train_v2.py``. The backbone is the "improved" ResNet:
pre-activation basic blocks ``BN -> conv3x3 -> BN -> PReLU -> conv3x3(stride) -> BN`` plus the
(optionally downsampled) identity, stage layout (3, 4, 14, 3), a stride-1 3x3 stem with PReLU, and the
BN-Dropout-FC-BN embedding head (512-d; the last BN's scale frozen at 1) on 112x112 crops. Training
is ``PartialFC_V2`` with sample rate 1 on one device: the normalised embeddings times the normalised
class centres, cosines clamped to [-1, 1], then ``CombinedMarginLoss(s=64, m=(1.0, 0.5, 0.0))``, whose
ArcFace path takes ``arccos`` in place under ``no_grad``, adds the margin to the target angle and takes
``cos`` again before scaling by ``s`` (the gradient is that of ``s cos theta``: the reference's own
straight-through shortcut), then cross-entropy; SGD lr 0.1, momentum 0.9, weight decay 5e-4 over
backbone and centres; the backbone's gradient norm clipped to 5 before the step. Evaluation is the
reference's verification path: embeddings of the image and of its horizontal flip are summed and
L2-normalised; a pair's score is the cosine of its two embeddings (the reference thresholds the
squared distance ``2 - 2 cos``, the same ranking). Classes: 10,572 (CASIA-WebFace).
Differences: one device, so ``DistCrossEntropy`` is plain ``F.cross_entropy`` (same value) and the
class centres are not sharded; no learning-rate schedule.

**FaceNet** (Schroff, Kalenichenko and Philbin, "FaceNet: A Unified Embedding for Face Recognition
and Clustering", CVPR 2015) with the InceptionResnetV1 of github.com/timesler/facenet-pytorch
(``models/inception_resnet_v1.py``, MIT): the Inception-ResNet-v1 stem, 5 x Block35 (residual scale
0.17), Mixed_6a, 10 x Block17 (0.10), Mixed_7a, 5 x Block8 (0.20) and a final Block8 without ReLU,
average pooling, dropout 0.6, a bias-free ``Linear(1792, 512)``, BatchNorm1d and L2 normalisation, on
160x160 crops; every conv is ``conv (no bias) -> BN(eps 1e-3) -> ReLU``. facenet-pytorch ships no
triplet trainer; the step here is online batch-hard mining (Hermans, Beyer and Leibe, "In Defense of
the Triplet Loss", 2017) on a batch of P identities x K images: pairwise distances of the batch's
embeddings, for every anchor its farthest positive and nearest negative, then
``nn.TripletMarginLoss(margin=0.2)`` on the mined triplets; Adam lr 1e-3 (facenet-pytorch's fine-tuning
example). Differences from the paper: batch-hard instead of semi-hard mining over ~1,800-image batches,
Euclidean instead of squared distances (``TripletMarginLoss``), Adam instead of AdaGrad. Evaluation:
embeddings of both images of each pair and their Euclidean distance (facenet-pytorch's README).

Inputs are synthetic and seeded; weights random. Written from the papers and the descriptions above;
no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = [
    "ArcFaceConfig",
    "ArcFaceHead",
    "FaceNetConfig",
    "IResNet",
    "InceptionResnetV1",
    "arcface_logits",
    "batch_hard_triplets",
]


# -- ArcFace: IResNet backbone and the additive angular margin ------------------------------------
@dataclass(frozen=True)
class ArcFaceConfig:
    layers: tuple[int, ...] = (3, 4, 14, 3)  # iresnet50
    widths: tuple[int, ...] = (64, 128, 256, 512)  # per stage; each stage halves the resolution
    image_size: int = 112  # aligned face crops; 112 / 2^4 = 7 -> the head's 7x7 "fc_scale"
    embedding: int = 512  # num_features
    num_classes: int = 10_572  # CASIA-WebFace identities
    dropout: float = 0.0  # arcface_torch's default for iresnet
    s: float = 64.0  # logit scale
    margin: float = 0.5  # additive angular margin m2 (radians)


class IBasicBlock(nn.Module):
    """``(B, Cin, H, W) -> (B, C, H / stride, W / stride)``: BN-conv-BN-PReLU-conv-BN + identity."""

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(inplanes, eps=1e-5)
        self.conv1 = nn.Conv2d(inplanes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, eps=1e-5)
        self.prelu = nn.PReLU(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)  # the stride sits on the second conv
        self.bn3 = nn.BatchNorm2d(planes, eps=1e-5)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes, eps=1e-5)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        identity = x if self.downsample is None else self.downsample(x)
        return out + identity


class IResNet(nn.Module):
    """Aligned faces ``(B, 3, S, S)`` -> embeddings ``(B, E)`` (not normalised)."""

    def __init__(self, cfg: ArcFaceConfig) -> None:
        super().__init__()
        c0 = cfg.widths[0]
        self.stem = nn.Sequential(nn.Conv2d(3, c0, 3, 1, 1, bias=False), nn.BatchNorm2d(c0, eps=1e-5), nn.PReLU(c0))
        stages, inplanes = [], c0
        for planes, blocks in zip(cfg.widths, cfg.layers):
            stages.append(
                nn.Sequential(
                    IBasicBlock(inplanes, planes, 2), *(IBasicBlock(planes, planes, 1) for _ in range(blocks - 1))
                )
            )
            inplanes = planes
        self.stages = nn.Sequential(*stages)
        side = cfg.image_size // 2 ** len(cfg.layers)  # 7 at 112 px
        self.bn2 = nn.BatchNorm2d(inplanes, eps=1e-5)
        self.dropout = nn.Dropout(cfg.dropout, inplace=True)
        self.fc = nn.Linear(inplanes * side * side, cfg.embedding)
        self.features = nn.BatchNorm1d(cfg.embedding, eps=1e-5)
        for m in self.modules():  # the reference's init
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0, 0.1)
        nn.init.constant_(self.features.weight, 1.0)
        self.features.weight.requires_grad = False  # the embedding BN has a fixed unit scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))  # (B, 512, 7, 7)
        x = self.dropout(torch.flatten(self.bn2(x), 1))  # (B, 512 * 49)
        return self.features(self.fc(x))  # (B, E)


def arcface_logits(cos: torch.Tensor, labels: torch.Tensor, s: float, margin: float) -> torch.Tensor:
    """``s cos(theta_j + m [j = y])`` from clamped cosines ``(B, N)``; labels ``-1`` get no margin.

    CombinedMarginLoss's ArcFace path: the angles are changed in place under ``no_grad``, so the
    backward pass sees ``s * cos`` (``cos`` itself must not be needed by an earlier backward).
    """
    index = torch.where(labels != -1)[0]
    target = cos[index, labels[index].view(-1)]  # (B',) a copy (advanced indexing)
    with torch.no_grad():
        target.arccos_()  # theta_y
        cos.arccos_()  # theta_j for every class
        cos[index, labels[index].view(-1)] = target + margin
        cos.cos_()
    return cos * s


class ArcFaceHead(nn.Module):
    """PartialFC_V2 at sample rate 1: class centres ``(N, E)`` and the margin cross-entropy."""

    def __init__(self, cfg: ArcFaceConfig) -> None:
        super().__init__()
        self.s, self.margin = cfg.s, cfg.margin
        self.weight = nn.Parameter(torch.normal(0, 0.01, (cfg.num_classes, cfg.embedding)))

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cos = F.linear(F.normalize(embeddings), F.normalize(self.weight)).clamp(-1, 1)  # (B, N)
        return F.cross_entropy(arcface_logits(cos, labels, self.s, self.margin), labels)


class ArcFaceModel(nn.Module):
    """Backbone plus (in training) the class-centre head, so ``parameters()`` covers both."""

    def __init__(self, cfg: ArcFaceConfig, with_head: bool) -> None:
        super().__init__()
        self.backbone = IResNet(cfg)
        self.head = ArcFaceHead(cfg) if with_head else None

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.backbone(images)


class ArcFaceWorkload(Workload):
    """Train: margin loss on ``(images, labels)``. Eval: flip-summed embeddings of pairs and their cosine."""

    max_grad_norm = 5.0  # train_v2.py clips the backbone only

    def clipped_parameters(self):
        return self.module.backbone.parameters()

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        (images,) = self.inputs
        if self.ctx.train:
            return self.module(images)
        flat = images.flatten(0, 1)  # (2B, 3, S, S): the two faces of each pair, interleaved
        emb = F.normalize(self.module(flat) + self.module(torch.flip(flat, dims=[3])))  # (2B, E)
        emb = emb.view(images.shape[0], 2, -1)
        return emb, (emb[:, 0] * emb[:, 1]).sum(-1)  # (B, 2, E), cosine score (B,)

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return self.module.head(outputs, self.targets)


def _create_arcface(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(layers=(1, 1, 1, 1), widths=(8, 8, 16, 16), image_size=32, embedding=32, num_classes=16)
    cfg = replace(ArcFaceConfig(), **{**(smoke if ctx.smoke else {}), **kwargs})
    model = ArcFaceModel(cfg, with_head=ctx.train)
    b, s = ctx.batch_size, cfg.image_size
    if not ctx.train:  # B verification pairs
        return ArcFaceWorkload(ctx, model, (ctx.randn(b, 2, 3, s, s),))
    images, labels = ctx.randn(b, 3, s, s), ctx.randint(0, cfg.num_classes, (b,))
    opt = torch.optim.SGD(
        [{"params": model.backbone.parameters()}, {"params": model.head.parameters()}],
        lr=0.1,
        momentum=0.9,
        weight_decay=5e-4,
    )
    return ArcFaceWorkload(ctx, model, (images,), labels, optimizer=opt)


# -- FaceNet: InceptionResnetV1 and batch-hard triplets -------------------------------------------
@dataclass(frozen=True)
class FaceNetConfig:
    divisor: int = 1  # every channel count is divided by this (smoke only; the layout is unchanged)
    repeats: tuple[int, int, int] = (5, 10, 5)  # Block35, Block17, Block8 counts
    image_size: int = 160  # the unpadded stride-2 stem needs >= 75 px
    embedding: int = 512
    dropout: float = 0.6  # facenet-pytorch's dropout_prob
    margin: float = 0.2  # triplet margin (FaceNet's alpha)
    k: int = 4  # images per identity in a batch (P = B / K identities)


class BasicConv2d(nn.Sequential):
    """conv (no bias) -> BN(eps 1e-3) -> ReLU."""

    def __init__(self, cin: int, cout: int, kernel, stride: int = 1, padding=0) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
            nn.BatchNorm2d(cout, eps=0.001, momentum=0.1),
            nn.ReLU(),
        )


class _Residual(nn.Module):
    """Inception-ResNet block: ``relu(x + scale * conv1x1(cat(branches(x))))`` (relu optional)."""

    def __init__(self, branches: list[nn.Module], cat: int, channels: int, scale: float, relu: bool = True) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)
        self.conv2d = nn.Conv2d(cat, channels, 1)  # with bias, as the reference
        self.scale = scale
        self.relu = nn.ReLU() if relu else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv2d(torch.cat([branch(x) for branch in self.branches], 1)) * self.scale + x
        return out if self.relu is None else self.relu(out)


def _block35(c: int, d: int) -> _Residual:  # 35x35 grid in the 299-px original; here 17x17
    return _Residual(
        [
            BasicConv2d(c, 32 // d, 1),
            nn.Sequential(BasicConv2d(c, 32 // d, 1), BasicConv2d(32 // d, 32 // d, 3, 1, 1)),
            nn.Sequential(
                BasicConv2d(c, 32 // d, 1),
                BasicConv2d(32 // d, 32 // d, 3, 1, 1),
                BasicConv2d(32 // d, 32 // d, 3, 1, 1),
            ),
        ],
        96 // d,
        c,
        0.17,
    )


def _block17(c: int, d: int) -> _Residual:
    return _Residual(
        [
            BasicConv2d(c, 128 // d, 1),
            nn.Sequential(
                BasicConv2d(c, 128 // d, 1),
                BasicConv2d(128 // d, 128 // d, (1, 7), 1, (0, 3)),
                BasicConv2d(128 // d, 128 // d, (7, 1), 1, (3, 0)),
            ),
        ],
        256 // d,
        c,
        0.10,
    )


def _block8(c: int, d: int, scale: float = 0.20, relu: bool = True) -> _Residual:
    return _Residual(
        [
            BasicConv2d(c, 192 // d, 1),
            nn.Sequential(
                BasicConv2d(c, 192 // d, 1),
                BasicConv2d(192 // d, 192 // d, (1, 3), 1, (0, 1)),
                BasicConv2d(192 // d, 192 // d, (3, 1), 1, (1, 0)),
            ),
        ],
        384 // d,
        c,
        scale,
        relu,
    )


class _Mixed(nn.Module):
    """Grid reduction: branches concatenated on channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], 1)


class InceptionResnetV1(nn.Module):
    """Faces ``(B, 3, 160, 160)`` -> L2-normalised embeddings ``(B, 512)``."""

    def __init__(self, cfg: FaceNetConfig) -> None:
        super().__init__()
        d = cfg.divisor
        c35, c17, c8 = 256 // d, 896 // d, 1792 // d
        self.stem = nn.Sequential(
            BasicConv2d(3, 32 // d, 3, 2),  # (B, 32, 79, 79)
            BasicConv2d(32 // d, 32 // d, 3),  # 77
            BasicConv2d(32 // d, 64 // d, 3, 1, 1),
            nn.MaxPool2d(3, 2),  # 38
            BasicConv2d(64 // d, 80 // d, 1),
            BasicConv2d(80 // d, 192 // d, 3),  # 36
            BasicConv2d(192 // d, c35, 3, 2),  # (B, 256, 17, 17)
        )
        self.repeat_1 = nn.Sequential(*(_block35(c35, d) for _ in range(cfg.repeats[0])))
        self.mixed_6a = _Mixed(
            BasicConv2d(c35, 384 // d, 3, 2),
            nn.Sequential(
                BasicConv2d(c35, 192 // d, 1),
                BasicConv2d(192 // d, 192 // d, 3, 1, 1),
                BasicConv2d(192 // d, 256 // d, 3, 2),
            ),
            nn.MaxPool2d(3, 2),
        )  # (B, 384 + 256 + 256 = 896, 8, 8)
        self.repeat_2 = nn.Sequential(*(_block17(c17, d) for _ in range(cfg.repeats[1])))
        self.mixed_7a = _Mixed(
            nn.Sequential(BasicConv2d(c17, 256 // d, 1), BasicConv2d(256 // d, 384 // d, 3, 2)),
            nn.Sequential(BasicConv2d(c17, 256 // d, 1), BasicConv2d(256 // d, 256 // d, 3, 2)),
            nn.Sequential(
                BasicConv2d(c17, 256 // d, 1),
                BasicConv2d(256 // d, 256 // d, 3, 1, 1),
                BasicConv2d(256 // d, 256 // d, 3, 2),
            ),
            nn.MaxPool2d(3, 2),
        )  # (B, 384 + 256 + 256 + 896 = 1792, 3, 3)
        self.repeat_3 = nn.Sequential(*(_block8(c8, d) for _ in range(cfg.repeats[2])))
        self.block8 = _block8(c8, d, scale=1.0, relu=False)
        self.avgpool_1a = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(cfg.dropout)
        self.last_linear = nn.Linear(c8, cfg.embedding, bias=False)
        self.last_bn = nn.BatchNorm1d(cfg.embedding, eps=0.001, momentum=0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.repeat_1(self.stem(x))
        x = self.repeat_2(self.mixed_6a(x))
        x = self.block8(self.repeat_3(self.mixed_7a(x)))  # (B, 1792, 3, 3)
        x = self.dropout(self.avgpool_1a(x))
        x = self.last_bn(self.last_linear(x.view(x.shape[0], -1)))  # (B, 512)
        return F.normalize(x, p=2, dim=1)


def batch_hard_triplets(embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices ``(B,)`` of each anchor's farthest same-label and nearest other-label sample.

    An anchor alone in its identity gets itself as positive (distance 0); one whose identity fills
    the batch gets itself as negative too (the triplet then costs exactly the margin).
    """
    with torch.no_grad():
        # (B, B) Euclidean; in at least fp32, as CPU cdist has no half kernels (only indices leave here)
        e = embeddings.to(torch.promote_types(embeddings.dtype, torch.float32))
        dist = torch.cdist(e, e)
        same = labels[:, None] == labels[None, :]  # includes the diagonal
        positive = dist.masked_fill(~same, -1.0).argmax(1)
        negative = dist.masked_fill(same, math.inf).argmin(1)
        negative = torch.where(same.all(1), torch.arange(len(labels), device=labels.device), negative)
    return positive, negative


class FaceNetWorkload(Workload):
    """Train: mined triplet loss on a P x K batch. Eval: embeddings of pairs and their distance."""

    def __init__(self, *args, margin: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.criterion = nn.TripletMarginLoss(margin=margin)

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        (images,) = self.inputs
        if self.ctx.train:
            return self.module(images)  # (B, 512)
        emb = self.module(images.flatten(0, 1)).view(images.shape[0], 2, -1)  # (B, 2, 512)
        return emb, (emb[:, 0] - emb[:, 1]).norm(dim=-1)

    def compute_loss(self, emb: torch.Tensor) -> torch.Tensor:
        positive, negative = batch_hard_triplets(emb, self.targets)
        return self.criterion(emb, emb[positive], emb[negative])


# Smallest smoke training batch with two identities of two images each (batch-hard needs both).
SMOKE_TRIPLET_BATCH = 4


def _create_facenet(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(divisor=16, repeats=(1, 1, 1), image_size=80, embedding=16, k=2)
    cfg = replace(FaceNetConfig(), **{**(smoke if ctx.smoke else {}), **kwargs})
    model, s = InceptionResnetV1(cfg), cfg.image_size
    if not ctx.train:  # B verification pairs
        return FaceNetWorkload(ctx, model, (ctx.randn(ctx.batch_size, 2, 3, s, s),), margin=cfg.margin)
    b = SMOKE_TRIPLET_BATCH if ctx.smoke and not ctx.batch_size_given else ctx.batch_size
    labels = torch.arange(b, device=ctx.device) // cfg.k  # P identities x K images
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return FaceNetWorkload(ctx, model, (ctx.randn(b, 3, s, s),), labels, optimizer=opt, margin=cfg.margin)


_ARCFACE = "Deng et al., ArcFace, CVPR 2019; deepinsight/insightface recognition/arcface_torch (iresnet50)"
_FACENET = "Schroff et al., FaceNet, CVPR 2015; timesler/facenet-pytorch InceptionResnetV1"


@register_model(
    domain="vision",
    task="face_recognition",
    source=_ARCFACE,
    batch_size=(128, 64),
    tags=("metric_learning",),
    param_count=43_590_848,  # backbone + embedding head (arcface_torch: ~43.6M for r50)
    notes="Eval batch = verification pairs (4 forwards each: both faces and their flips). "
    "Training adds the 10,572 x 512 class-centre matrix (5,412,864 parameters), "
    "not in param_count.",
)
def arcface_iresnet50(ctx: BuildContext, **kwargs) -> Workload:
    """IResNet-50 on 112x112 faces, ArcFace (s=64, m=0.5) over 10,572 identities, SGD."""
    return _create_arcface(ctx, **kwargs)


@register_model(
    domain="vision",
    task="face_recognition",
    source=_FACENET,
    batch_size=(32, 64),
    tags=("metric_learning",),
    param_count=23_482_624,  # InceptionResnetV1 without its logits layer, counted from its shapes
    unsupported_precisions=("fp16",),
    notes="Train batch = 8 identities x 4 images, batch-hard triplets (distances for the mining in "
    "fp32: CPU cdist has no half kernels). Eval batch = verification pairs. fp16 unsupported: "
    "pure-fp16 training turns the parameters NaN within a few steps (Adam in fp16, no loss "
    "scaling); fp16 eval, bf16 and amp run.",
)
def facenet_triplet(ctx: BuildContext, **kwargs) -> Workload:
    """InceptionResnetV1 on 160x160 faces, 512-d embeddings, batch-hard triplet loss (margin 0.2), Adam."""
    return _create_facenet(ctx, **kwargs)
