"""What the GAN workloads share: one container for both networks and a two-optimizer workload.

Used by the image GANs of ``vision.generation`` and by ``speech.hifigan`` (a GAN vocoder).
DCGAN, pix2pix and StarGAN each train a generator and a discriminator with their own Adam
optimizers, alternating a discriminator update and a generator update in one iteration
(PyTorch DCGAN example, BSD-3-Clause; pytorch-CycleGAN-and-pix2pix, BSD; StarGAN, MIT).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchgauge.workload import BuildContext, Workload

__all__ = ["GeneratorDiscriminator", "AdversarialWorkload", "normal_init_"]


def normal_init_(module: nn.Module, std: float = 0.02) -> None:
    """DCGAN/pix2pix init: conv weights ~ N(0, std), norm scales ~ N(1, std), biases 0."""
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, std)
            nn.init.zeros_(m.bias)


class GeneratorDiscriminator(nn.Module):
    """Container so that ``parameters()`` covers both networks of a GAN."""

    def __init__(self, generator: nn.Module, discriminator: nn.Module) -> None:
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator

    def forward(self, *inputs: torch.Tensor) -> Any:
        return self.generator(*inputs)


class AdversarialWorkload(Workload):
    """A GAN: eval runs the generator; subclasses write ``train_step`` from D and G updates.

    ``inputs`` are the generator's inputs (eval and train); ``targets`` holds whatever else
    training needs (real images, labels, interpolation weights); ``cfg`` is the model's config
    dataclass, read by ``train_step`` for loss weights.
    """

    needs_optimizer = False

    def __init__(
        self,
        ctx: BuildContext,
        generator: nn.Module,
        discriminator: nn.Module,
        inputs: tuple,
        targets: Any = None,
        *,
        cfg: Any,
        lr: float,
        betas: tuple[float, float],
    ) -> None:
        super().__init__(ctx, GeneratorDiscriminator(generator, discriminator), inputs, targets)
        self.cfg = cfg
        self.optimizer_g: torch.optim.Optimizer | None = None
        self.optimizer_d: torch.optim.Optimizer | None = None
        if ctx.train:
            self.optimizer_g = ctx.optimizer(generator.parameters(), "adam", lr=lr, betas=betas)
            self.optimizer_d = ctx.optimizer(discriminator.parameters(), "adam", lr=lr, betas=betas)

    @property
    def generator(self) -> nn.Module:
        return self.module.generator

    @property
    def discriminator(self) -> nn.Module:
        return self.module.discriminator

    @staticmethod
    def update(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """zero_grad + backward + step of one network."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
