"""DP-SGD on CIFAR-10: per-sample gradients, per-sample clipping and Gaussian noise (Abadi et al., 2016).

Two ways to the same step, as TorchBench's ``functorch_dp_cifar10`` and ``opacus_cifar10``:

* by hand with ``torch.func``: ``vmap(grad_and_value(loss))`` over ``functional_call`` gives
  every sample's gradient at once; each is clipped to ``max_grad_norm`` (global L2 norm over
  all parameters), the clipped sum gets ``N(0, (noise_multiplier * max_grad_norm)^2)`` noise
  and is divided by the batch size before the optimizer step;
* through Opacus (Apache-2.0; https://github.com/pytorch/opacus): ``GradSampleModule`` hooks
  compute per-sample gradients and ``DPOptimizer`` clips and noises them. Opacus is an
  optional extra (``pip install opacus``), imported only when that model is built.

Both train a ResNet-18 whose BatchNorm layers are GroupNorm(min(32, C)) (Opacus' fix, since
BatchNorm mixes samples), 10 classes, 32x32 images, Adam(1e-3), noise multiplier 1.0 and
max_grad_norm 1.0 as TorchBench. Eval is a plain forward pass. The noise comes from a
generator seeded with the build's seed, so steps are deterministic.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, UnsupportedError, Workload

from ...common.resnet import SMOKE_WIDTH_MULT, group_norm, resnet

__all__ = ["per_sample_gradients", "privatize_gradients"]

_IMAGE_SIZE, _NUM_CLASSES = 32, 10  # CIFAR-10
_SOURCE = "Abadi et al., Deep Learning with Differential Privacy, 2016; TorchBench {}"


def per_sample_gradients(
    module: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Cross-entropy gradient of every sample separately.

    Args:
        module: a model without cross-sample layers (no BatchNorm in training).
        inputs: ``(B, ...)``; targets: ``(B,)`` class indices.

    Returns:
        ``{name: (B, *param.shape)}`` for the trainable parameters, and the losses ``(B,)``.
    """
    params = {k: p.detach() for k, p in module.named_parameters() if p.requires_grad}
    buffers = dict(module.named_buffers())

    def sample_loss(params, x, y):  # one sample as a batch of one
        logits = functional_call(module, (params, buffers), (x.unsqueeze(0),))
        return F.cross_entropy(logits, y.unsqueeze(0))

    return vmap(grad_and_value(sample_loss), in_dims=(None, 0, 0))(params, inputs, targets)


def privatize_gradients(
    sample_grads: dict[str, torch.Tensor],
    max_grad_norm: float,
    noise_multiplier: float,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Clip each sample's gradient to ``max_grad_norm``, sum, add Gaussian noise, average over the batch."""
    batch = next(iter(sample_grads.values())).shape[0]
    norms = torch.stack([g.reshape(batch, -1).norm(dim=1) for g in sample_grads.values()]).norm(dim=0)  # (B,)
    scale = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    std = noise_multiplier * max_grad_norm
    out = {}
    for name, g in sample_grads.items():
        clipped = torch.tensordot(scale, g, dims=1)  # sum_b scale[b] * g[b]
        noise = torch.randn(clipped.shape, generator=generator, device=g.device, dtype=g.dtype)
        out[name] = (clipped + std * noise) / batch
    return out


class FunctorchDPWorkload(Workload):
    """Train: per-sample gradients by vmap, clip + noise by hand, optimizer step; eval: logits."""

    def __init__(self, *args, max_grad_norm: float, noise_multiplier: float, generator: torch.Generator, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_grad_norm = max_grad_norm
        self.noise_multiplier = noise_multiplier
        self.generator = generator

    def train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        (images,) = self.inputs
        with self.autocast():
            sample_grads, losses = per_sample_gradients(self.module, images, self.targets)
        grads = privatize_gradients(sample_grads, self.max_grad_norm, self.noise_multiplier, self.generator)
        for name, p in self.module.named_parameters():
            if name in grads:
                p.grad = grads[name]
        self.optimizer.step()
        return losses.mean().detach()


def _noise_generator(ctx: BuildContext) -> torch.Generator:
    gen = torch.Generator(device=ctx.device)
    gen.manual_seed(ctx.seed)
    return gen


def _create_dp_resnet(
    ctx: BuildContext,
    *,
    engine: str,
    noise_multiplier: float = 1.0,
    max_grad_norm: float = 1.0,
    lr: float = 1e-3,
    num_classes: int = _NUM_CLASSES,
) -> Workload:
    # Labels are CIFAR-10's 10 classes; the head may be wider (TorchBench's functorch_dp_cifar10
    # keeps torchvision resnet18's 1000-way head).
    model = resnet(18, num_classes=num_classes, norm_layer=group_norm, width_mult=ctx.pick(1.0, SMOKE_WIDTH_MULT))
    images = ctx.randn(ctx.batch_size, 3, _IMAGE_SIZE, _IMAGE_SIZE)
    labels = ctx.randint(0, _NUM_CLASSES, (ctx.batch_size,))
    if engine == "functorch":
        opt = torch.optim.Adam(model.parameters(), lr=lr) if ctx.train else None
        return FunctorchDPWorkload(
            ctx,
            model,
            (images,),
            labels,
            optimizer=opt,
            max_grad_norm=max_grad_norm,
            noise_multiplier=noise_multiplier,
            generator=_noise_generator(ctx),
        )
    try:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer
    except ImportError:
        raise UnsupportedError("opacus not installed (pip install opacus)") from None
    for m in model.modules():  # Opacus' backward hooks forbid in-place ops on hooked outputs
        if isinstance(m, nn.ReLU):
            m.inplace = False
    module = GradSampleModule(model.to(ctx.device))
    opt = None
    if ctx.train:
        opt = DPOptimizer(
            torch.optim.Adam(module.parameters(), lr=lr),
            noise_multiplier=noise_multiplier,
            max_grad_norm=max_grad_norm,
            expected_batch_size=ctx.batch_size,
            generator=_noise_generator(ctx),
        )
    return Workload(ctx, module, (images,), labels, loss_fn=F.cross_entropy, optimizer=opt)


@register_model(
    domain="other",
    task="private_image_classification",
    source=_SOURCE.format("functorch_dp_cifar10"),
    batch_size=(64, 64),
    tags=("differential_privacy", "functorch"),
    param_count=11_689_512,
    notes="1000-way head as TorchBench (torchvision resnet18 default) on CIFAR-10's 10 labels",
)
def functorch_dp_cifar10(ctx: BuildContext, **kwargs) -> Workload:
    """DP-SGD by hand (torch.func vmap per-sample gradients) on a GroupNorm ResNet-18 (1000-way head), CIFAR-10."""
    return _create_dp_resnet(ctx, engine="functorch", **{"num_classes": 1000, **kwargs})


@register_model(
    domain="other",
    task="private_image_classification",
    source=_SOURCE.format("opacus_cifar10"),
    batch_size=(64, 64),
    tags=("differential_privacy", "opacus"),
    param_count=11_181_642,
    notes="Needs the optional opacus package (pip install opacus); unsupported without it.",
)
def opacus_cifar10(ctx: BuildContext, **kwargs) -> Workload:
    """DP-SGD through Opacus (GradSampleModule + DPOptimizer) on a GroupNorm ResNet-18, CIFAR-10."""
    return _create_dp_resnet(ctx, engine="opacus", **kwargs)
