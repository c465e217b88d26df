"""The model contract: a module, inputs already on the device, and ``step()`` = one iteration.

Only the compute part of a model is benchmarked (TorchBench paper, sec. 2.2): inputs are
synthetic, seeded and created on the device before timing; ``step()`` runs exactly one
iteration. For training that is zero_grad + forward + loss + backward + optimizer step;
for inference it is forward under ``torch.inference_mode()`` (or ``no_grad`` /
``enable_grad`` where a model needs it). Models with their own loops (GANs, RL,
meta-learning) subclass :class:`Workload` and override ``train_step`` / ``eval_step``.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torch.utils import _pytree as pytree

if TYPE_CHECKING:  # pragma: no cover
    from .backends import CompileProbe

__all__ = [
    "SMOKE_BATCH_SIZE",
    "BuildContext",
    "UnsupportedError",
    "Workload",
    "image_classification",
    "language_modeling",
    "seed_everything",
]

# Batch size used at size="smoke" unless the caller sets one: small enough for a 2-core
# CPU, but > 1 so that BatchNorm in training has more than one value per channel.
SMOKE_BATCH_SIZE = 2


class UnsupportedError(RuntimeError):
    """The model cannot run in the requested configuration; becomes status ``unsupported``."""


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy (if installed) and torch RNGs."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is optional
        return
    np.random.seed(seed % 2**32)


@dataclass(frozen=True)
class BuildContext:
    """What a builder needs to know to build one workload; passed as the first argument."""

    name: str  # registered model name
    mode: str  # "train" or "eval"
    device: torch.device  # where inputs and module live
    batch_size: int  # the model default for this mode unless the caller overrode it
    size: str  # "full" or "smoke"
    seed: int = 0
    batch_size_given: bool = False  # True when the caller chose batch_size explicitly
    # The model's domain, copied from its registry entry by ``create`` (the one lookup):
    # ``measure`` records it; "" for a context built by hand.
    domain: str = ""

    def __post_init__(self) -> None:
        if self.size == "smoke" and not self.batch_size_given:
            object.__setattr__(self, "batch_size", min(self.batch_size, SMOKE_BATCH_SIZE))
        # One CPU generator per context: inputs are identical on every device for a seed.
        digest = hashlib.sha256(f"{self.name}:{self.seed}".encode()).digest()
        gen = torch.Generator(device="cpu")
        gen.manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
        object.__setattr__(self, "_gen", gen)

    @property
    def smoke(self) -> bool:
        return self.size == "smoke"

    @property
    def train(self) -> bool:
        return self.mode == "train"

    def pick(self, full: Any, smoke: Any) -> Any:
        """``smoke`` at size="smoke", else ``full``."""
        return smoke if self.smoke else full

    # -- synthetic, seeded inputs made on the device -------------------------------------
    def randn(self, *shape: int, dtype: torch.dtype = torch.float32, std: float = 1.0) -> torch.Tensor:
        """Standard normal tensor on the device (deterministic for the seed)."""
        t = torch.randn(*shape, generator=self._gen, dtype=dtype) * std
        return t.to(self.device)

    def rand(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Uniform [0, 1) tensor on the device."""
        return torch.rand(*shape, generator=self._gen, dtype=dtype).to(self.device)

    def randint(self, low: int, high: int, shape: tuple[int, ...], dtype: torch.dtype = torch.long) -> torch.Tensor:
        """Integers in [low, high) on the device."""
        return torch.randint(low, high, shape, generator=self._gen, dtype=dtype).to(self.device)

    def generator(self) -> torch.Generator:
        """The context's CPU generator, for builders that sample more complex structures."""
        return self._gen

    def optimizer(self, params: Any, kind: str = "sgd", lr: float = 1e-3, **kwargs: Any) -> torch.optim.Optimizer:
        """An optimizer over ``params``; ``kind`` is ``sgd`` (momentum 0.9), ``adam`` or ``adamw``."""
        if kind == "sgd":
            return torch.optim.SGD(params, lr=lr, momentum=kwargs.pop("momentum", 0.9), **kwargs)
        if kind == "adam":
            return torch.optim.Adam(params, lr=lr, **kwargs)
        if kind == "adamw":
            return torch.optim.AdamW(params, lr=lr, **kwargs)
        raise ValueError(f"unknown optimizer {kind!r}; accepted: sgd, adam, adamw")

    def finish(self, workload: Workload) -> Workload:
        """Validate what a builder returned and put it in its mode on the device."""
        if not isinstance(workload, Workload):
            raise TypeError(f"builder of {self.name} returned {type(workload).__name__}, expected a Workload")
        workload.module.to(self.device)
        workload.module.train(self.train)
        if self.train and workload.optimizer is None and workload.needs_optimizer:
            workload.optimizer = self.optimizer(workload.module.parameters())
        return workload


def _grad_context(mode: str) -> contextlib.AbstractContextManager:
    if mode == "inference":
        return torch.inference_mode()
    if mode == "no_grad":
        return torch.no_grad()
    if mode == "enable_grad":
        return torch.enable_grad()
    raise ValueError(f"invalid eval_grad_mode {mode!r}; accepted: inference, no_grad, enable_grad")


class Workload:
    """One model, in one mode, on one device, with its inputs ready.

    Attributes:
        module: the ``nn.Module`` being benchmarked (for multi-network models, a container
            holding all of them, so ``module.parameters()`` covers every weight).
        inputs: positional args (tuple) or keyword args (dict) for ``module``.
        targets: whatever ``loss_fn`` compares the outputs with (pytree of tensors).
        optimizer: used by ``train_step``; created by the context if left None.
        loss_fn: ``loss_fn(outputs, targets) -> scalar``.
        autocast: a zero-argument context-manager factory wrapped around forward and loss
            only; precision configuration replaces it (AMP).
        grad_scaler: loss scaler for fp16 AMP training (None otherwise); ``train_step``
            scales the loss and unscales before the optimizer step when it is set.
        compile_probe: attached by :func:`torchgauge.backends.apply_backend` for a compiling
            backend, or by a builder whose model compiles part of itself (sam_fast), None
            otherwise; ``measure`` reads the compile cost through it.

    A compiling backend may also replace ``forward`` (or ``step``, or the module) on the
    instance with its compiled form; nothing else is attached to a workload after it is built.
    """

    # How eval runs: "inference" (default), "no_grad" for models that break under
    # inference tensors, "enable_grad" for models that differentiate in eval (forces).
    eval_grad_mode: ClassVar[str] = "inference"
    # Set False in subclasses that build their own optimizers (GANs, RL).
    needs_optimizer: ClassVar[bool] = True
    # False where the reference's training step leaves the weights as they are (it stops at
    # backward, or accumulates gradients without stepping): tests then check for gradients.
    updates_parameters: bool = True
    # Gradient-norm clipping between backward and the optimizer step, as many references do
    # (after unscaling under fp16 AMP, so the true gradients are clipped); None: no clipping.
    max_grad_norm: float | None = None

    def __init__(
        self,
        ctx: BuildContext,
        module: nn.Module,
        inputs: tuple | dict = (),
        targets: Any = None,
        *,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        self.ctx = ctx
        self.module = module
        self.inputs = inputs
        self.targets = targets
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
        # Set by fp16 AMP training (torchgauge.precision): train_step scales the loss.
        self.grad_scaler: torch.amp.GradScaler | None = None
        # Set by torchgauge.backends.apply_backend: the compile-cost probe of a compiled
        # backend, marked after warm-up and read after the timed pass by measure().
        self.compile_probe: CompileProbe | None = None

    # -- configuration read-outs -----------------------------------------------------------
    @property
    def name(self) -> str:
        return self.ctx.name

    @property
    def mode(self) -> str:
        return self.ctx.mode

    @property
    def device(self) -> torch.device:
        return self.ctx.device

    @property
    def batch_size(self) -> int:
        return self.ctx.batch_size

    # -- one iteration -----------------------------------------------------------------------
    def forward(self) -> Any:
        """Run the module on the inputs (override for models with several entry points)."""
        if isinstance(self.inputs, dict):
            return self.module(**self.inputs)
        return self.module(*self.inputs)

    def compute_loss(self, outputs: Any) -> torch.Tensor:
        """Scalar training loss from the outputs."""
        if self.loss_fn is None:
            raise NotImplementedError(f"{self.name}: no loss_fn given and compute_loss not overridden")
        return self.loss_fn(outputs, self.targets)

    def clipped_parameters(self) -> Iterator[nn.Parameter]:
        """The parameters whose gradient norm ``max_grad_norm`` bounds (all, unless overridden)."""
        return self.module.parameters()

    def train_step(self) -> torch.Tensor:
        """zero_grad + forward + loss + backward (+ clipping) + optimizer step; returns the detached loss."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.compute_loss(self.forward())
        self.backward_and_step(loss)
        return loss.detach()

    def backward_and_step(self, loss: torch.Tensor) -> None:
        """Backward (loss-scaled under fp16 AMP), gradient clipping, optimizer step: for custom steps too."""
        scaler = self.grad_scaler
        (loss if scaler is None else scaler.scale(loss)).backward()
        if self.max_grad_norm is not None:
            if scaler is not None:
                scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.clipped_parameters(), self.max_grad_norm)
        if scaler is None:
            self.optimizer.step()
        else:
            scaler.step(self.optimizer)
            scaler.update()

    def eval_step(self) -> Any:
        """Forward pass under the model's eval grad mode; returns the outputs."""
        with _grad_context(self.eval_grad_mode), self.autocast():
            return self.forward()

    def step(self) -> Any:
        """Exactly one iteration of the compute part in this workload's mode."""
        return self.train_step() if self.ctx.mode == "train" else self.eval_step()

    # -- helpers for harness, precision and tests ------------------------------------------
    def input_tensors(self) -> Iterator[torch.Tensor]:
        """Every tensor among the inputs and targets."""
        for leaf in pytree.tree_leaves((self.inputs, self.targets)):
            if isinstance(leaf, torch.Tensor):
                yield leaf

    def map_inputs(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace every input and target tensor ``t`` by ``fn(t)`` (e.g. a dtype cast)."""
        apply = lambda x: fn(x) if isinstance(x, torch.Tensor) else x
        self.inputs = pytree.tree_map(apply, self.inputs)
        self.targets = pytree.tree_map(apply, self.targets)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name}, mode={self.mode}, device={self.device}, batch_size={self.batch_size})"
        )


# -- reusable task helpers: a model declaration stays a few lines ------------------------------
def image_classification(
    ctx: BuildContext,
    module: nn.Module,
    *,
    image_size: int | tuple[int, int] = 224,
    num_classes: int = 1000,
    channels: int = 3,
    optimizer: str = "sgd",
    lr: float = 1e-3,
) -> Workload:
    """Images ``(B, C, H, W)`` and class labels ``(B,)`` with cross-entropy loss."""
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    images = ctx.randn(ctx.batch_size, channels, h, w)
    labels = ctx.randint(0, num_classes, (ctx.batch_size,))
    opt = ctx.optimizer(module.parameters(), optimizer, lr=lr) if ctx.train else None
    return Workload(ctx, module, (images,), labels, loss_fn=nn.functional.cross_entropy, optimizer=opt)


def language_modeling(
    ctx: BuildContext,
    module: nn.Module,
    *,
    vocab_size: int,
    seq_len: int,
    optimizer: str = "adamw",
    lr: float = 1e-4,
) -> Workload:
    """Token ids ``(B, T)`` into a module returning logits ``(B, T, V)``; next-token loss."""
    ids = ctx.randint(0, vocab_size, (ctx.batch_size, seq_len + 1))
    opt = ctx.optimizer(module.parameters(), optimizer, lr=lr) if ctx.train else None

    def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    return Workload(
        ctx, module, (ids[:, :-1].contiguous(),), ids[:, 1:].contiguous(), loss_fn=next_token_loss, optimizer=opt
    )
