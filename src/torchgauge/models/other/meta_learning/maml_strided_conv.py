"""TorchBench's ``maml``: dragen1860/MAML-Pytorch (MIT) on synthetic 5-way 1-shot Omniglot tasks.

Finn et al., "Model-Agnostic Meta-Learning for Fast Adaptation of Deep Networks", 2017, as
the MAML-Pytorch ``Meta`` learner that TorchBench runs (``torchbenchmark/models/maml``):

* the learner is four stride-2 / stride-1 convolutions of 64 filters, each followed by ReLU
  and then BatchNorm (batch statistics, running statistics updated), and a linear 5-way
  classifier: 91,781 parameters;
* a batch holds 32 tasks of 5 support images (one per class) and 75 query images, 28x28;
* one step is ``Meta.forward`` in training mode, which TorchBench times as its *eval* (its
  ``train`` raises; eval runs with grad enabled): for every task, five inner SGD steps of
  lr 0.4 whose gradients are *not* differentiated through (``autograd.grad`` without
  ``create_graph``, i.e. first-order MAML), query losses after every step with the accuracy
  read back to the host, then one Adam(1e-3) meta-step on the mean last query loss.

Written from that description; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["FirstOrderMAMLWorkload", "StridedConvLearner"]


@dataclass(frozen=True)
class StridedMAMLConfig:
    tasks: int = 32  # task_num: tasks per meta-batch
    ways: int = 5  # n_way
    shots: int = 1  # k_spt: support images per class
    queries: int = 15  # k_qry: query images per class
    image_size: int = 28
    inner_lr: float = 0.4  # update_lr
    inner_steps: int = 5  # update_step
    meta_lr: float = 1e-3


class StridedConvLearner(nn.Module):
    """Images ``(N, 1, 28, 28)`` -> logits ``(N, ways)``: 28 -> 13 -> 6 -> 2 -> 1 spatially."""

    def __init__(self, ways: int = 5, filters: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 1
        for kernel, stride in ((3, 2), (3, 2), (3, 2), (2, 1)):
            # ReLU before BatchNorm, as the reference's layer list orders them
            layers += [nn.Conv2d(in_ch, filters, kernel, stride), nn.ReLU(inplace=True), nn.BatchNorm2d(filters)]
            in_ch = filters
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.classifier = nn.Linear(filters, ways)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class FirstOrderMAMLWorkload(Workload):
    """TorchBench's ``maml`` step: first-order adaptation per task, then one meta-update (an eval-mode step)."""

    eval_grad_mode = "enable_grad"  # TorchBench's USE_GRAD_IN_INFERENCE = ["maml"]
    needs_optimizer = False

    def __init__(self, ctx: BuildContext, module: nn.Module, inputs: tuple, *, cfg: StridedMAMLConfig) -> None:
        super().__init__(ctx, module, inputs)
        self.cfg = cfg
        self.meta_optimizer = torch.optim.Adam(module.parameters(), lr=cfg.meta_lr)

    def _adapted(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        loss = F.cross_entropy(functional_call(self.module, params, (x,)), y)
        grads = torch.autograd.grad(loss, list(params.values()))  # not differentiated through: first order
        return {name: p - self.cfg.inner_lr * g for (name, p), g in zip(params.items(), grads)}

    def forward(self) -> torch.Tensor:
        x_spt, y_spt, x_qry, y_qry = self.inputs
        self.module.train()  # the reference adapts with batch statistics
        total = x_spt.new_zeros(())
        for i in range(x_spt.size(0)):
            weights = dict(self.module.named_parameters())
            with torch.no_grad():  # the reference's accuracy before adaptation
                (self.module(x_qry[i]).argmax(1) == y_qry[i]).sum().item()
            weights = self._adapted(weights, x_spt[i], y_spt[i])
            with torch.no_grad():
                (functional_call(self.module, weights, (x_qry[i],)).argmax(1) == y_qry[i]).sum().item()
            for _ in range(1, self.cfg.inner_steps):
                weights = self._adapted(weights, x_spt[i], y_spt[i])
                logits_q = functional_call(self.module, weights, (x_qry[i],))
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                with torch.no_grad():
                    (logits_q.argmax(1) == y_qry[i]).sum().item()
            total = total + loss_q
        meta_loss = total / x_spt.size(0)
        self.meta_optimizer.zero_grad()
        meta_loss.backward()
        self.meta_optimizer.step()
        return meta_loss.detach()


def _create_maml_strided(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(tasks=2, queries=1, inner_steps=2) if ctx.smoke else {}
    cfg = replace(StridedMAMLConfig(), **{**smoke, **kwargs})
    if cfg.inner_steps < 2:
        raise ValueError(f"inner_steps must be >= 2 (the query loss follows steps 2..n), got {cfg.inner_steps}")
    t, s = cfg.image_size, cfg.ways
    inputs = (
        ctx.randn(cfg.tasks, s * cfg.shots, 1, t, t),  # support images
        ctx.randint(0, s, (cfg.tasks, s * cfg.shots)),  # support labels
        ctx.randn(cfg.tasks, s * cfg.queries, 1, t, t),  # query images
        ctx.randint(0, s, (cfg.tasks, s * cfg.queries)),  # query labels
    )
    return FirstOrderMAMLWorkload(ctx, StridedConvLearner(cfg.ways), inputs, cfg=cfg)


@register_model(
    domain="other",
    task="meta_learning",
    source="Finn et al., MAML, 2017; dragen1860/MAML-Pytorch as TorchBench's maml",
    batch_size=1,
    modes=("eval",),
    tags=("meta_learning",),
    param_count=91_781,
    notes="eval only as TorchBench, whose eval step is Meta.forward in training mode: 32 tasks, 5-way 1-shot, "
    "5 first-order inner steps, one Adam meta-step; the batch size is TorchBench's 1 (tasks are fixed at 32)",
)
def maml(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's maml: first-order MAML of a strided 4-conv learner over 32 synthetic 5-way 1-shot tasks."""
    return _create_maml_strided(ctx, **kwargs)
