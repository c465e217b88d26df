"""StarGAN: Choi et al., "StarGAN: Unified Generative Adversarial Networks for Multi-Domain
Image-to-Image Translation", CVPR 2018.

Follows the authors' implementation yunjey/stargan (MIT license), ``model.py`` and
``solver.py``, in its CelebA configuration as TorchBench runs it: 128x128 images, 5 binary
attributes, 64 base filters, 6 residual blocks in G, 6 strided convs in D, WGAN-GP with
lambda_gp=10, lambda_cls=1, lambda_rec=10 and Adam(1e-4, betas=(0.5, 0.999)).

One timed training step is what TorchBench's ``train()`` does: ``Solver.train`` with
``num_iters = 1`` (its ``__init__.py``:51), i.e. iteration ``i = 0`` of the solver's loop, where
the discriminator is updated and the generator is not (``(i + 1) % n_critic`` with
``n_critic = 5``, ``solver.py``:328). Eval is ``G(x, c_target)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ...common.adversarial import AdversarialWorkload

__all__: list[str] = []


@dataclass(frozen=True)
class StarGANConfig:
    num_domains: int = 5  # c_dim: Black_Hair, Blond_Hair, Brown_Hair, Male, Young
    image_size: int = 128  # CelebA 178x178 center crop resized to 128
    gen_filters: int = 64  # g_conv_dim
    disc_filters: int = 64  # d_conv_dim
    gen_blocks: int = 6  # g_repeat_num
    disc_layers: int = 6  # d_repeat_num: 128 / 2**6 = 2x2 final feature map
    lambda_cls: float = 1.0
    lambda_rec: float = 10.0
    lambda_gp: float = 10.0
    n_critic: int = 5  # D updates per G update (main.py --n_critic)
    iteration: int = 0  # the solver iteration a step runs: TorchBench restarts at 0 every call


def _instance_norm(ch: int) -> nn.InstanceNorm2d:
    # StarGAN keeps running statistics, so eval mode normalizes with them.
    return nn.InstanceNorm2d(ch, affine=True, track_running_stats=True)


class ResidualBlock(nn.Module):
    """x + [conv3x3, IN, ReLU, conv3x3, IN](x) with zero padding and no conv bias."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(dim, dim, 3, 1, 1, bias=False),
            _instance_norm(dim),
            nn.ReLU(True),
            nn.Conv2d(dim, dim, 3, 1, 1, bias=False),
            _instance_norm(dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.main(x)


class StarGANGenerator(nn.Module):
    """image ``(B, 3, H, W)`` + target domain labels ``(B, c)`` -> translated image ``(B, 3, H, W)``."""

    def __init__(self, cfg: StarGANConfig) -> None:
        super().__init__()
        f = cfg.gen_filters
        layers: list[nn.Module] = [
            nn.Conv2d(3 + cfg.num_domains, f, 7, 1, 3, bias=False),  # image + label maps in
            _instance_norm(f),
            nn.ReLU(True),
        ]
        for _ in range(2):  # down-sampling to (B, 4f, H/4, W/4)
            layers += [nn.Conv2d(f, f * 2, 4, 2, 1, bias=False), _instance_norm(f * 2), nn.ReLU(True)]
            f *= 2
        layers += [ResidualBlock(f) for _ in range(cfg.gen_blocks)]
        for _ in range(2):  # up-sampling back to (B, f, H, W)
            layers += [nn.ConvTranspose2d(f, f // 2, 4, 2, 1, bias=False), _instance_norm(f // 2), nn.ReLU(True)]
            f //= 2
        layers += [nn.Conv2d(f, 3, 7, 1, 3, bias=False), nn.Tanh()]
        self.main = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        # Labels become constant feature maps: (B, c) -> (B, c, H, W), stacked on the image.
        c = c.view(c.size(0), c.size(1), 1, 1).expand(-1, -1, x.size(2), x.size(3))
        return self.main(torch.cat([x, c], dim=1))


class StarGANDiscriminator(nn.Module):
    """image ``(B, 3, H, W)`` -> (real/fake map ``(B, 1, H/64, W/64)``, domain logits ``(B, c)``)."""

    def __init__(self, cfg: StarGANConfig) -> None:
        super().__init__()
        f = cfg.disc_filters
        layers: list[nn.Module] = [nn.Conv2d(3, f, 4, 2, 1), nn.LeakyReLU(0.01)]
        for _ in range(1, cfg.disc_layers):
            layers += [nn.Conv2d(f, f * 2, 4, 2, 1), nn.LeakyReLU(0.01)]
            f *= 2
        self.main = nn.Sequential(*layers)
        self.src = nn.Conv2d(f, 1, 3, 1, 1, bias=False)  # PatchGAN-style critic output
        # The classifier's kernel covers the whole final map: image_size / 2**layers.
        self.cls = nn.Conv2d(f, cfg.num_domains, cfg.image_size // 2**cfg.disc_layers, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.main(x)
        return self.src(h), self.cls(h).view(h.size(0), -1)


def gradient_penalty(critic_out: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """WGAN-GP term mean((||d critic / d x_hat||_2 - 1)^2) over the batch (Gulrajani et al., 2017)."""
    (grad,) = torch.autograd.grad(critic_out, x_hat, torch.ones_like(critic_out), create_graph=True)
    return ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()


def _domain_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    # CelebA attributes are multi-label: summed BCE per image, averaged over the batch.
    return nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / logits.size(0)


class StarGANWorkload(AdversarialWorkload):
    """Train: solver iteration ``cfg.iteration`` (a WGAN-GP critic update; a generator update
    when ``(iteration + 1) % n_critic == 0``); eval: G(x, c_target)."""

    def train_step(self) -> torch.Tensor:
        x_real, label_trg = self.inputs
        label_org, alpha = self.targets  # alpha (B, 1, 1, 1): interpolation weights of the penalty
        cfg, gen, disc = self.cfg, self.generator, self.discriminator
        # (1) D: Wasserstein critic + domain classification of real images + gradient penalty.
        with self.autocast():
            out_src, out_cls = disc(x_real)
            x_fake = gen(x_real, label_trg)  # the solver keeps G's graph here and detaches for D
            loss_d = -out_src.mean() + disc(x_fake.detach())[0].mean()
            loss_d = loss_d + cfg.lambda_cls * _domain_loss(out_cls, label_org)
            x_hat = (alpha * x_real + (1 - alpha) * x_fake.detach()).requires_grad_(True)
            loss_d = loss_d + cfg.lambda_gp * gradient_penalty(disc(x_hat)[0], x_hat)
        self.update(self.optimizer_d, loss_d)
        if (cfg.iteration + 1) % cfg.n_critic != 0:
            return loss_d.detach()
        # (2) G: fool the critic, hit the target domain, and reconstruct the input (cycle).
        with self.autocast():
            x_fake = gen(x_real, label_trg)
            out_src, out_cls = disc(x_fake)
            x_rec = gen(x_fake, label_org)
            loss_g = -out_src.mean() + cfg.lambda_cls * _domain_loss(out_cls, label_trg)
            loss_g = loss_g + cfg.lambda_rec * (x_real - x_rec).abs().mean()
        self.update(self.optimizer_g, loss_g)
        return (loss_d + loss_g).detach()


def _create_stargan(ctx: BuildContext, **kwargs: Any) -> Workload:
    cfg = replace(StarGANConfig(), **kwargs)
    # Smoke: 64x64 is the smallest image D's six stride-2 convs accept; an eighth of the width
    # keeps the same layers while D's 33.5 M-weight last conv and G's convolutions (the step's
    # cost at a quarter: 2.9 ms per conv backward) no longer dominate a CPU step.
    smoke_cfg = replace(cfg, image_size=64, gen_filters=cfg.gen_filters // 8, disc_filters=cfg.disc_filters // 8)
    cfg = ctx.pick(cfg, smoke_cfg)
    b, c, s = ctx.batch_size, cfg.num_domains, cfg.image_size
    x_real = ctx.rand(b, 3, s, s) * 2 - 1
    label_trg = ctx.randint(0, 2, (b, c)).float()
    targets = (ctx.randint(0, 2, (b, c)).float(), ctx.rand(b, 1, 1, 1)) if ctx.train else None
    return StarGANWorkload(
        ctx,
        StarGANGenerator(cfg),
        StarGANDiscriminator(cfg),
        (x_real, label_trg),
        targets,
        cfg=cfg,
        lr=1e-4,
        betas=(0.5, 0.999),
    )


@register_model(
    domain="vision",
    task="image_to_image",
    source="Choi et al., StarGAN, CVPR 2018; yunjey/stargan",
    batch_size=(16, 16),
    tags=("gan",),
    param_count=53_192_576,  # G 8,430,528 + D 44,762,048
    notes="Train is TorchBench's one solver iteration: a D update only (G updates every n_critic=5 "
    "iterations; iteration=4 adds it). Smoke size is 64x64 at an eighth of the width (same layers).",
)
def pytorch_stargan(ctx: BuildContext, **kwargs: Any) -> Workload:
    """StarGAN G (6 residual blocks) + D (source and class heads), CelebA 128x128, 5 domains."""
    return _create_stargan(ctx, **kwargs)
