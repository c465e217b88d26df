"""Decorrelated Batch Normalization (DBN): ZCA whitening of mini-batch activations in groups.

Huang, Yang, Lang and Deng, "Decorrelated Batch Normalization", CVPR 2018; reference
implementation github.com/princeton-vl/DecorrelatedBN (Lua Torch, BSD-2-Clause), its
PyTorch port in huangleiBuaa/IterNorm-pytorch. The channels are split into groups of 16;
in training each group ``X (c, m)`` (``m = B H W``) is centred and whitened by
``Sigma^-1/2 = D diag(lambda + eps)^-1/2 D^T`` from the eigendecomposition of its covariance
``Sigma = D Lambda D^T`` (Algorithm 1 of the paper; back-propagated through the
eigendecomposition), then scaled and shifted per channel. Running averages (momentum 0.1)
of the mean and of the whitening matrix replace them in eval.

The network is the paper's CIFAR-10 experiment: ResNet-56 with the BatchNorm after the
first convolution replaced by DBN ("DBN-L1"), SGD lr 0.1, momentum 0.9, weight decay 1e-4,
batch 128. The ResNet is :class:`~torchgauge.models.vision.cifar_resnet.CifarResNet` with
nine blocks per stage, not a copy: its strided shortcuts are 1x1 convolutions with bias
where fb.resnet.torch (which the reference trains) uses a 1x1 convolution plus BatchNorm.
The reference computes the eigendecomposition with Torch's ``svd`` of the covariance
(symmetric positive definite, so its singular and eigen decompositions agree); here it is
``torch.linalg.eigh``. Written from the paper; no code copied.
"""

from __future__ import annotations

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .cifar_resnet import CifarResNet

__all__ = ["DecorrelatedBatchNorm2d"]


class DecorrelatedBatchNorm2d(nn.Module):
    """Group ZCA whitening ``(B, C, H, W) -> (B, C, H, W)``; ``C`` a multiple of ``group_size``."""

    def __init__(
        self, num_features: int, group_size: int = 16, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True
    ) -> None:
        super().__init__()
        if num_features % group_size:
            raise ValueError(f"num_features {num_features} is not a multiple of group_size {group_size}")
        self.groups, self.group_size = num_features // group_size, group_size
        self.eps, self.momentum = eps, momentum
        g, c = self.groups, group_size
        self.register_buffer("running_mean", torch.zeros(g, c, 1))
        self.register_buffer("running_whitening", torch.eye(c).expand(g, c, c).clone())
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if affine else None

    def whitening_matrix(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean ``(G, c, 1)`` and ZCA matrix ``Sigma^-1/2`` ``(G, c, c)`` of grouped samples ``(G, c, m)``."""
        mean = x.mean(-1, keepdim=True)
        xc = x - mean
        eye = torch.eye(self.group_size, dtype=x.dtype, device=x.device)
        sigma = xc @ xc.transpose(1, 2) / x.shape[-1] + self.eps * eye  # (G, c, c)
        eigvals, eigvecs = torch.linalg.eigh(sigma)  # Sigma = D diag(lambda) D^T
        return mean, eigvecs @ torch.diag_embed(eigvals.rsqrt()) @ eigvecs.transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, ch, h, w = x.shape
        g, c = self.groups, self.group_size
        xg = x.view(b, g, c, h * w).permute(1, 2, 0, 3).reshape(g, c, b * h * w)  # (G, c, m)
        if self.training:
            mean, wm = self.whitening_matrix(xg)
            with torch.no_grad():  # under autocast mean and wm may be in half precision
                self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
                self.running_whitening.lerp_(wm.to(self.running_whitening.dtype), self.momentum)
        else:
            mean, wm = self.running_mean, self.running_whitening
        y = (wm @ (xg - mean)).view(g, c, b, h * w).permute(2, 0, 1, 3).reshape(b, ch, h, w)
        if self.weight is not None:
            y = y * self.weight.view(1, ch, 1, 1) + self.bias.view(1, ch, 1, 1)
        return y


def _create_dbn_resnet(ctx: BuildContext, num_blocks: tuple[int, ...], group_size: int = 16, **kwargs) -> Workload:
    model = CifarResNet(num_blocks=num_blocks, **kwargs)
    stem_norm = model.stem[1]
    model.stem[1] = DecorrelatedBatchNorm2d(stem_norm.num_features, group_size=group_size)  # DBN-L1
    num_classes = model.head.fc.out_features
    size = ctx.pick(32, 16)
    images = ctx.randn(ctx.batch_size, 3, size, size)
    labels = ctx.randint(0, num_classes, (ctx.batch_size,))
    opt = ctx.optimizer(model.parameters(), "sgd", lr=0.1, weight_decay=1e-4) if ctx.train else None
    return Workload(ctx, model, (images,), labels, loss_fn=nn.functional.cross_entropy, optimizer=opt)


@register_model(
    domain="vision",
    task="classification",
    batch_size=(128, 128),
    tags=("linalg",),
    source="Huang et al., Decorrelated Batch Normalization, CVPR 2018 (princeton-vl/DecorrelatedBN), "
    "ResNet-56 with DBN after the first convolution on CIFAR-10",
    unsupported_precisions=("fp16", "bf16"),
    notes="fp16/bf16 unsupported: torch.linalg.eigh has no half-precision kernel (amp runs it in fp32).",
)
def dbn_resnet56(ctx: BuildContext, **kwargs) -> Workload:
    """CIFAR ResNet-56 whose first norm is group-16 DBN; SGD 0.1 (smoke: ResNet-8 on 16 px)."""
    return _create_dbn_resnet(ctx, num_blocks=ctx.pick((9, 9, 9), (1, 1, 1)), **kwargs)
