"""MAML (Finn et al., "Model-Agnostic Meta-Learning for Fast Adaptation of Deep Networks", 2017).

One meta-update over a batch of tasks: each task adapts a copy of the parameters with a few
SGD steps on its support set, the adapted parameters are scored on its query set, and the
meta-gradient of the query loss flows back through the adaptation (second order). Eval
adapts the same way (first order, nothing to train through) and returns query predictions,
so it runs with grad enabled. Batch size = tasks per meta-batch.

* ``maml_sinusoid``: Finn et al.'s sine-wave regression: amplitude in [0.1, 5], phase in [0, pi],
  x in [-5, 5], K = 10 shots, a 1-40-40-1 ReLU MLP, one inner step of lr 0.01 (ten at
  test time), 25 tasks, Adam(1e-3) as the meta-optimizer.
* ``maml_omniglot``: the facebookresearch/higher ``maml-omniglot`` example (Apache-2.0) as
  TorchBench runs it: 5-way 5-shot, 15 queries, 28x28 images, three Conv-BN-ReLU-MaxPool
  blocks of 64 filters and a linear classifier, five inner steps of lr 0.1, Adam(1e-3).
  The tasks run in a Python loop; each adaptation step is ``torch.autograd.grad`` with
  ``create_graph=True``.
* ``functorch_maml_omniglot``: TorchBench's functorch port of the same example
  (``torchbenchmark/models/functorch_maml_omniglot/__init__.py``): ``torch.func.grad`` for the
  inner steps and ``vmap`` over a meta-batch of 5 tasks fixed inside the model (TorchBench
  declares batch 1 and does not let it change; ``samples_per_step`` says a step processes 5
  tasks), the summed query losses back-propagated into an Adam(1e-3) made afresh every step.
  Its eval is one forward of the network (eval mode) on the first task's 25 support images.

``functional_call`` only substitutes the adapted parameters into the module in all three.
BatchNorm keeps no running statistics (as in the functorch example), so it always
normalises with the batch's statistics and stays a pure function under vmap. On torch 2.13 the
functorch variant's second-order meta-gradients through BatchNorm differ from the loop's (which
match finite differences): the batch_norm backward batching rule, pytorch/functorch#534.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["FunctorchMAMLWorkload", "OmniglotNet", "SineNet", "adapt"]

Params = dict[str, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class MAMLConfig:
    inner_steps: int  # SGD steps of task adaptation in training
    eval_inner_steps: int  # ... at test time
    inner_lr: float
    shots: int  # support examples per class (regression: per task)
    queries: int  # query examples per class (regression: per task)
    ways: int = 1  # classes per task; 1 for regression
    image_size: int = 28  # Omniglot characters, downsampled
    meta_lr: float = 1e-3  # Adam


def _conv_block(in_ch: int, out_ch: int) -> list[nn.Module]:
    # 3x3 valid conv, BN on batch statistics, ReLU, 2x2 max-pool: H -> (H - 2) // 2
    return [
        nn.Conv2d(in_ch, out_ch, 3),
        nn.BatchNorm2d(out_ch, track_running_stats=False),
        nn.ReLU(),
        nn.MaxPool2d(2, 2),
    ]


class OmniglotNet(nn.Sequential):
    """Images ``(N, 1, 28, 28)`` -> logits ``(N, ways)``: 28 -> 13 -> 5 -> 1 spatially."""

    def __init__(self, ways: int = 5, filters: int = 64) -> None:
        super().__init__(
            *_conv_block(1, filters),
            *_conv_block(filters, filters),
            *_conv_block(filters, filters),
            nn.Flatten(),
            nn.Linear(filters, ways),
        )


class SineNet(nn.Sequential):
    """``(N, 1) -> (N, 1)``: Finn et al.'s regressor, two hidden ReLU layers of 40."""

    def __init__(self, hidden: int = 40) -> None:
        super().__init__(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def adapt(
    module: nn.Module,
    params: Params,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    steps: int,
    lr: float,
    create_graph: bool,
) -> Params:
    """``steps`` SGD steps on ``loss_fn(module(x), y)`` from ``params``, by ``torch.autograd.grad``.

    With ``create_graph`` the returned parameters stay differentiable w.r.t. ``params`` (second-order MAML).
    """
    for _ in range(steps):
        loss = loss_fn(functional_call(module, params, (x,)), y)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=create_graph)
        params = {name: p - lr * g for (name, p), g in zip(params.items(), grads)}
    return params


class MAMLWorkload(Workload):
    """Inputs ``(x_support, y_support, x_query)`` with a leading task dim; targets ``y_query``.

    ``forward`` returns the adapted query predictions ``(tasks, queries, ...)``; the default
    train step then back-propagates the query loss through the adaptation into the meta-optimizer.
    """

    eval_grad_mode = "enable_grad"  # adaptation differentiates even at test time

    def __init__(self, *args, cfg: MAMLConfig, task_loss: LossFn, vectorized: bool, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cfg = cfg
        self.task_loss = task_loss
        self.vectorized = vectorized  # torch.func (grad + vmap) instead of autograd.grad in a loop

    def forward(self) -> torch.Tensor:
        x_spt, y_spt, x_qry = self.inputs
        steps = self.cfg.inner_steps if self.ctx.train else self.cfg.eval_inner_steps
        params = dict(self.module.named_parameters())
        if self.vectorized:
            return vmap(self._adapted_query_functional(params, steps))(x_spt, y_spt, x_qry)
        outputs = []
        for task in range(x_spt.shape[0]):
            adapted = adapt(
                self.module,
                params,
                x_spt[task],
                y_spt[task],
                self.task_loss,
                steps,
                self.cfg.inner_lr,
                create_graph=self.ctx.train,
            )
            outputs.append(functional_call(self.module, adapted, (x_qry[task],)))
        return torch.stack(outputs)

    def _adapted_query_functional(self, params: Params, steps: int) -> Callable[..., torch.Tensor]:
        def support_loss(p: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.task_loss(functional_call(self.module, p, (x,)), y)

        def adapted_query(x_spt: torch.Tensor, y_spt: torch.Tensor, x_qry: torch.Tensor) -> torch.Tensor:
            p = params
            for _ in range(steps):
                grads = grad(support_loss)(p, x_spt, y_spt)
                p = {name: p[name] - self.cfg.inner_lr * grads[name] for name in p}
            return functional_call(self.module, p, (x_qry,))

        return adapted_query

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        # Mean over tasks of the mean query loss (all tasks have the same number of queries).
        return self.task_loss(outputs.flatten(0, 1), self.targets.flatten(0, 1))


class FunctorchMAMLWorkload(MAMLWorkload):
    """TorchBench's functorch_maml_omniglot step.

    Train: a fresh Adam over the meta-parameters (TorchBench builds one in every ``train()``),
    the vmapped adaptation, the per-task query losses summed and back-propagated, one step.
    Eval: the network alone on its input, the first task's support images (no adaptation).
    """

    eval_grad_mode = "inference"  # eval is a plain forward

    def train_step(self) -> torch.Tensor:
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=self.cfg.meta_lr)
        return super().train_step()

    def forward(self) -> torch.Tensor:
        return super().forward() if self.ctx.train else self.module(*self.inputs)

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        # sum over tasks of each task's mean query loss
        return self.task_loss(outputs.flatten(0, 1), self.targets.flatten(0, 1)) * outputs.shape[0]


def _few_shot_images(
    ctx: BuildContext, cfg: MAMLConfig, per_class: int, tasks: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic N-way tasks: images ``(tasks, ways * per_class, 1, H, W)``, labels ``(tasks, ways * per_class)``."""
    images = ctx.rand(tasks, cfg.ways * per_class, 1, cfg.image_size, cfg.image_size)
    labels = torch.arange(cfg.ways, device=ctx.device).repeat_interleave(per_class).expand(tasks, -1)
    return images, labels.contiguous()


# TorchBench's functorch_maml_omniglot meta-batch: 5 tasks, whatever its (fixed) batch size of 1.
FUNCTORCH_META_BATCH_TASKS = 5


def _create_maml_omniglot(ctx: BuildContext, *, vectorized: bool, **kwargs) -> Workload:
    # smoke: one support and one query image per class at 22x22, the smallest size that the
    # three blocks still reduce to 1x1 (22 -> 10 -> 4 -> 1)
    defaults = MAMLConfig(
        inner_steps=5,
        eval_inner_steps=5,
        inner_lr=0.1,
        shots=ctx.pick(5, 1),
        queries=ctx.pick(15, 1),
        ways=5,
        image_size=ctx.pick(28, 22),
    )
    cfg = replace(defaults, **kwargs)
    # the functorch port's tasks are fixed; the loop's batch is its tasks
    tasks = FUNCTORCH_META_BATCH_TASKS if vectorized else ctx.batch_size
    x_spt, y_spt = _few_shot_images(ctx, cfg, cfg.shots, tasks)
    x_qry, y_qry = _few_shot_images(ctx, cfg, cfg.queries, tasks)
    net = OmniglotNet(cfg.ways)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.meta_lr) if ctx.train else None
    if not vectorized:
        return MAMLWorkload(
            ctx, net, (x_spt, y_spt, x_qry), y_qry, optimizer=opt, cfg=cfg, task_loss=F.cross_entropy, vectorized=False
        )
    # TorchBench's eval input: the first task's support images, example_inputs = (x_spt[0],)
    inputs, targets = ((x_spt, y_spt, x_qry), y_qry) if ctx.train else ((x_spt[0],), None)
    return FunctorchMAMLWorkload(
        ctx, net, inputs, targets, optimizer=opt, cfg=cfg, task_loss=F.cross_entropy, vectorized=True
    )


def _create_maml_sine(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(MAMLConfig(inner_steps=1, eval_inner_steps=10, inner_lr=0.01, shots=10, queries=10), **kwargs)
    tasks = ctx.batch_size
    amplitude = ctx.rand(tasks, 1, 1) * 4.9 + 0.1
    phase = ctx.rand(tasks, 1, 1) * math.pi
    x_spt, x_qry = (ctx.rand(tasks, n, 1) * 10 - 5 for n in (cfg.shots, cfg.queries))  # (tasks, K, 1)
    y_spt, y_qry = (amplitude * torch.sin(x - phase) for x in (x_spt, x_qry))
    net = SineNet()
    opt = torch.optim.Adam(net.parameters(), lr=cfg.meta_lr) if ctx.train else None
    return MAMLWorkload(
        ctx, net, (x_spt, y_spt, x_qry), y_qry, optimizer=opt, cfg=cfg, task_loss=F.mse_loss, vectorized=False
    )


_OMNIGLOT_SOURCE = "Finn et al., MAML, 2017; facebookresearch/higher maml-omniglot example"


@register_model(
    domain="other",
    task="meta_learning",
    source="Finn et al., MAML, 2017 (sine-wave regression)",
    batch_size=(25, 25),
    tags=("meta_learning", "double_backward"),
    param_count=1_761,
)
def maml_sinusoid(ctx: BuildContext, **kwargs) -> Workload:
    """Sine-wave regression MAML: 1-40-40-1 MLP, 10 shots, 25 tasks, one inner step
    (TorchBench's maml: maml_strided_conv)."""
    return _create_maml_sine(ctx, **kwargs)


@register_model(
    domain="other",
    task="meta_learning",
    source=_OMNIGLOT_SOURCE,
    batch_size=(5, 5),
    tags=("meta_learning", "double_backward"),
    param_count=75_205,
)
def maml_omniglot(ctx: BuildContext, **kwargs) -> Workload:
    """5-way 5-shot Omniglot MAML, second order via autograd.grad(create_graph=True), tasks in a loop."""
    return _create_maml_omniglot(ctx, vectorized=False, **kwargs)


@register_model(
    domain="other",
    task="meta_learning",
    source=_OMNIGLOT_SOURCE + " (functorch port, as TorchBench's functorch_maml_omniglot)",
    batch_size=(1, 1),
    samples_per_step=(FUNCTORCH_META_BATCH_TASKS, None),
    tags=("meta_learning", "functorch"),
    param_count=75_205,
    notes="TorchBench's batch 1; a training step adapts to a fixed meta-batch of 5 tasks (samples_per_step 5); "
    "eval is a forward on one task's 25 support images",
)
def functorch_maml_omniglot(ctx: BuildContext, **kwargs) -> Workload:
    """5-way 5-shot Omniglot MAML with torch.func over 5 tasks (grad to adapt, vmap over tasks); eval: one forward."""
    return _create_maml_omniglot(ctx, vectorized=True, **kwargs)
