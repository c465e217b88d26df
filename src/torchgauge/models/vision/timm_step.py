"""TorchBench's step for its timm classifiers: hard random labels, cross-entropy, timm's SGD.

TorchBench's ``TimmModel`` (``torchbenchmark/util/framework/timm/model_factory.py`` and
``timm_config.py``) builds ``timm.create_model(name, num_classes=None, drop_rate=0.0, ...)``
(None arguments are dropped, so 1000 classes; classifier dropout off) and feeds
``randn(B, *default_cfg["input_size"])`` images. A training step is forward ->
``CrossEntropyLoss`` against random class indices -> backward -> the optimizer that
``timm.optim.create_optimizer`` makes for ``opt="sgd", lr=1e-4, weight_decay=1e-4,
momentum=0.9``: ``torch.optim.SGD`` with Nesterov momentum, and no weight decay on biases,
1-d parameters (norm affines) or the names the model lists in ``no_weight_decay()`` (a
ViT's position embedding and class token). Eval is one forward. Written from that
description; no code copied. One difference: TorchBench draws the B class indices inside
every training step; here they are drawn once, with the images, so the loss is reproducible
(the per-step draw is one B-element kernel).
"""

from __future__ import annotations

import fnmatch

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.workload import BuildContext, Workload

__all__ = ["TIMM_LR", "TIMM_MOMENTUM", "TIMM_WEIGHT_DECAY", "timm_classification", "timm_sgd"]

# TorchBench's OptimizerOption for every timm model (util/framework/timm/timm_config.py).
TIMM_LR = 1e-4
TIMM_WEIGHT_DECAY = 1e-4
TIMM_MOMENTUM = 0.9


def timm_sgd(module: nn.Module) -> torch.optim.SGD:
    """``timm.optim.create_optimizer(opt="sgd", ...)`` as TorchBench configures it: Nesterov SGD, two groups.

    Example:
        >>> opt = timm_sgd(nn.Sequential(nn.Linear(4, 2), nn.LayerNorm(2)))
        >>> [len(g["params"]) for g in opt.param_groups], [g["weight_decay"] for g in opt.param_groups]
        ([3, 1], [0.0, 0.0001])
    """
    skip = getattr(module, "no_weight_decay", lambda: set())()
    decay, no_decay = [], []
    for name, param in module.named_parameters():
        if not param.requires_grad:
            continue
        excluded = param.ndim <= 1 or name.endswith(".bias") or any(fnmatch.fnmatch(name, p) for p in skip)
        (no_decay if excluded else decay).append(param)
    groups = [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": TIMM_WEIGHT_DECAY}]
    return torch.optim.SGD([g for g in groups if g["params"]], lr=TIMM_LR, momentum=TIMM_MOMENTUM, nesterov=True)


def timm_classification(ctx: BuildContext, module: nn.Module, *, image_size: int, num_classes: int = 1000) -> Workload:
    """TorchBench's timm workload: ``randn(B, 3, S, S)`` images, class-index targets, :func:`timm_sgd`."""
    images = ctx.randn(ctx.batch_size, 3, image_size, image_size)
    labels = ctx.randint(0, num_classes, (ctx.batch_size,))
    optimizer = timm_sgd(module) if ctx.train else None
    return Workload(ctx, module, (images,), labels, loss_fn=F.cross_entropy, optimizer=optimizer)
