"""Neural style transfer: optimise an image so its VGG-19 features match a content image and
its feature Gram matrices match a style image.

Gatys, Ecker and Bethge, "Image Style Transfer Using Convolutional Neural Networks", CVPR
2016. Follows the PyTorch tutorial "Neural Transfer Using PyTorch" (pytorch/tutorials,
``advanced_source/neural_style_tutorial.py``, BSD-3-Clause) with the paper's (and
jcjohnson/neural-style's) layer choice:

- VGG-19 features (the ``VGG`` of :mod:`torchgauge.models.vision.vgg` with the 19-layer
  configuration; its classifier is unused, as the tutorial's ``vgg19().features``), ReLUs made
  out-of-place and the network cut after the last loss layer, as the tutorial does; input
  normalised with the ImageNet mean and std.
- Content loss: MSE between the features at conv4_2 and the content image's. Style loss: MSE
  between Gram matrices ``F F^T / (b c h w)`` at conv1_1, conv2_1, conv3_1, conv4_1, conv5_1
  and the style image's. Total = 1e6 * style + 1 * content (the tutorial's weights).
- The optimised variable is the image itself (initialised from the content image, the
  tutorial's choice), ``torch.optim.LBFGS([image])`` with default settings; the closure clamps
  the image to [0, 1] under ``no_grad`` before every evaluation.

``step()`` is one ``optimizer.step(closure)`` of the tutorial's loop, i.e. LBFGS with its
default ``max_iter=20`` (up to 20 closure evaluations; 4 at smoke size); the tutorial runs
300 closures.

Differences: random VGG weights (the method needs ImageNet-trained ones for pretty results;
the compute is the same); synthetic seeded content and style images; the tutorial's layer
names ``conv_4`` (actually conv2_2) and ``conv_1..conv_5`` are replaced by the paper's
conv4_2 / conv1_1..conv5_1 (the tutorial attaches losses to conv outputs; jcjohnson to the
following ReLUs). No eval mode: the method has no inference path, the image *is* the result
of the optimisation. Written from the paper and the tutorial's description; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..vgg import VGG

__all__ = ["ContentLoss", "NeuralStyle", "NeuralStyleConfig", "StyleLoss", "gram_matrix", "vgg19_layers"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
STYLE_WEIGHT = 1_000_000.0  # the tutorial's style_weight
CONTENT_WEIGHT = 1.0  # the tutorial's content_weight


@dataclass(frozen=True)
class NeuralStyleConfig:
    image_size: int = 512  # the tutorial's imsize on GPU
    widths: tuple[int, ...] = (64, 128, 256, 512, 512)  # VGG-19 conv widths per stage
    content_layers: tuple[str, ...] = ("conv4_2",)  # Gatys et al., sec. 3
    style_layers: tuple[str, ...] = ("conv1_1", "conv2_1", "conv3_1", "conv4_1", "conv5_1")
    max_iter: int = 20  # LBFGS default, as the tutorial's optim.LBFGS([input_img])


def vgg19_layers(widths: tuple[int, ...] = (64, 128, 256, 512, 512)) -> tuple[int | str, ...]:
    """VGG-19 (the paper's column E): 2, 2, 4, 4, 4 convs per stage, "M" = max pool."""
    layers: list[int | str] = []
    for width, convs in zip(widths, (2, 2, 4, 4, 4)):
        layers += [width] * convs + ["M"]
    return tuple(layers)


def gram_matrix(x: torch.Tensor) -> torch.Tensor:
    """``(B, C, H, W)`` -> ``(B C, B C)`` Gram matrix normalised by the number of elements."""
    b, c, h, w = x.shape
    features = x.view(b * c, h * w)
    return torch.mm(features, features.t()).div(b * c * h * w)


class ContentLoss(nn.Module):
    """Transparent layer: stores the MSE to the content features in ``self.loss``."""

    def __init__(self, target: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("target", target.detach())
        self.loss = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.loss = F.mse_loss(x, self.target)
        return x


class StyleLoss(nn.Module):
    """Transparent layer: stores the MSE between Gram matrices in ``self.loss``."""

    def __init__(self, target_features: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("target", gram_matrix(target_features).detach())
        self.loss = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.loss = F.mse_loss(gram_matrix(x), self.target)
        return x


class NeuralStyle(nn.Module):
    """Frozen VGG-19 with loss layers, plus the image being optimised (the only parameter).

    ``forward()`` -> ``(style_score, content_score)`` of ``self.image`` ``(B, 3, S, S)``.
    """

    def __init__(self, cfg: NeuralStyleConfig, content: torch.Tensor, style: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(-1, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(-1, 1, 1))
        # Only the features are used; a 1-unit classifier avoids allocating the unused 120M FC weights.
        cnn = VGG(vgg19_layers(cfg.widths), num_classes=1, hidden_dim=1).features.eval()
        cnn.requires_grad_(False)
        content, style = content.to(self.mean), style.to(self.mean)
        self.net = nn.Sequential()
        self.content_losses: list[ContentLoss] = []
        self.style_losses: list[StyleLoss] = []
        last = len(set(cfg.content_layers) | set(cfg.style_layers))  # loss layers still to place
        stage, conv = 1, 0
        for layer in cnn.children():
            if isinstance(layer, nn.Conv2d):
                conv += 1
                name = f"conv{stage}_{conv}"
            elif isinstance(layer, nn.ReLU):
                name = f"relu{stage}_{conv}"
                layer = nn.ReLU(inplace=False)  # in-place would overwrite what the loss layers saw
            else:
                name = f"pool{stage}"
                stage, conv = stage + 1, 0
            self.net.add_module(name, layer)
            if name in cfg.content_layers:
                loss = ContentLoss(self.net((content - self.mean) / self.std))
                self.net.add_module(f"content_loss_{name}", loss)
                self.content_losses.append(loss)
            if name in cfg.style_layers:
                loss = StyleLoss(self.net((style - self.mean) / self.std))
                self.net.add_module(f"style_loss_{name}", loss)
                self.style_losses.append(loss)
            last -= name in cfg.content_layers or name in cfg.style_layers
            if last == 0:
                break  # the tutorial trims the layers after the last loss
        self.image = nn.Parameter(content.clone())  # input_img = content_img.clone()

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.net((self.image - self.mean) / self.std)
        style_score = sum(sl.loss for sl in self.style_losses)
        content_score = sum(cl.loss for cl in self.content_losses)
        return style_score, content_score


class NeuralStyleWorkload(Workload):
    """``train_step`` = one ``LBFGS.step(closure)`` of the tutorial's ``run_style_transfer`` loop."""

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        style_score, content_score = outputs
        return STYLE_WEIGHT * style_score + CONTENT_WEIGHT * content_score

    def train_step(self) -> torch.Tensor:
        image = self.module.image

        def closure() -> torch.Tensor:
            with torch.no_grad():
                image.clamp_(0, 1)  # keep pixels a valid image, as the tutorial
            self.optimizer.zero_grad()
            with self.autocast():
                loss = self.compute_loss(self.forward())
            loss.backward()
            return loss

        return self.optimizer.step(closure).detach()  # the loss of the first closure evaluation


def _create_neural_style(ctx: BuildContext, **kwargs) -> Workload:
    # smoke: 4 LBFGS iterations, not 20, to stay well under 0.1 s a step
    smoke = dict(image_size=16, widths=(4, 4, 8, 8, 8), max_iter=4) if ctx.smoke else {}
    cfg = replace(NeuralStyleConfig(), **{**smoke, **kwargs})
    s = cfg.image_size
    content = ctx.rand(ctx.batch_size, 3, s, s)  # images in [0, 1], as the tutorial's loader gives
    style = ctx.rand(ctx.batch_size, 3, s, s)
    model = NeuralStyle(cfg, content, style)
    opt = torch.optim.LBFGS([model.image], max_iter=cfg.max_iter)
    return NeuralStyleWorkload(ctx, model, optimizer=opt)


_SOURCE = (
    "Gatys, Ecker & Bethge, Image Style Transfer Using CNNs, CVPR 2016; "
    "PyTorch Neural Transfer tutorial; jcjohnson/neural-style"
)


@register_model(
    domain="vision",
    task="style_transfer",
    source=_SOURCE,
    batch_size=1,
    modes=("train",),
    tags=("generation", "lbfgs"),
    # torchvision vgg19.features (20,024,384) less conv5_2..conv5_4 (3 x 2,359,808),
    # plus the 3 x 512 x 512 optimised pixels.
    param_count=13_731_392,
    unsupported_precisions=("fp16",),
    notes="Random VGG-19 weights, synthetic content/style images. One step = one LBFGS step "
    "(max_iter 20, up to 20 forward/backward passes). Train only: the method has no "
    "inference path. fp16: the 1e6-weighted style loss overflows fp16 (NaN at the first "
    "step). amp: autocast without loss scaling (GradScaler cannot drive a closure-based "
    "LBFGS); the optimised image stays fp32.",
)
def neural_style(ctx: BuildContext, **kwargs) -> Workload:
    """Gatys style transfer, 512x512, VGG-19 conv4_2 content / conv1_1..conv5_1 style, LBFGS."""
    return _create_neural_style(ctx, **kwargs)
