"""expRNN: an RNN whose recurrent matrix is the exponential of a skew-symmetric matrix.

Lezcano-Casado and Martinez-Rubio, "Cheap Orthogonal Constraints in Neural Networks: A
Simple Parametrization of the Orthogonal and Unitary Group", ICML 2019; reference
implementation github.com/Lezcano/expRNN (MIT), task ``2_mnist.py`` (pixel-by-pixel MNIST,
permuted): the 784 pixels of an image enter one at a time, ``h_t = modReLU(W_in x_t + B h_{t-1})``
with ``B = exp(A)``, ``A`` skew-symmetric, and a linear classifier reads ``h_784``.

As the reference: hidden size 170 (its smallest pMNIST model), the input kernel
``Linear(1, 170, bias=False)`` with Kaiming-normal init, modReLU
``sign(z) relu(|z| + b)`` with ``b ~ U(-0.01, 0.01)``, the Cayley initialisation of ``A``
(2x2 blocks ``[[0, s], [-s, 0]]``, ``s = -sqrt((1 - cos t) / (1 + cos t))``,
``t ~ U(0, pi / 2)``) with the base fixed at the identity ("static" trivialization), zero
initial state, batch 128, cross-entropy, and two RMSprop optimizers: lr 7e-4 for the
non-orthogonal parameters and 7e-5 for ``A`` (the README's n=170 MNIST command).

The orthogonal map is PyTorch's ``nn.utils.parametrizations.orthogonal`` with
``orthogonal_map="matrix_exp"`` (written by the same author after expRNN; it stores an
unconstrained square whose lower triangle defines ``A``, as the reference stores its
upper triangle), evaluated once per sequence under ``parametrize.cached()`` as the
reference computes ``B`` once per forward. Differences: ``nn.Linear`` applies ``h B^T``
where the reference applies ``h B`` (the transpose of an orthogonal exponential is the
exponential of ``-A``: the same family); data are random pixels with a fixed random
permutation. Written from the paper and the description above; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrizations, parametrize

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["ExpRNN", "ExpRNNCell", "ExpRNNConfig", "ModReLU", "cayley_init_", "henaff_init_"]


@dataclass(frozen=True)
class ExpRNNConfig:
    hidden_size: int = 170  # the reference's smallest pMNIST model
    seq_len: int = 784  # 28 x 28 pixels, one per step
    num_classes: int = 10
    lr: float = 7e-4  # RMSprop lr of the non-orthogonal parameters
    lr_orth: float = 7e-5  # RMSprop lr of the skew-symmetric parameter


def _block_skew(n: int, s: torch.Tensor) -> torch.Tensor:
    """``(n, n)`` skew matrix with 2x2 blocks ``[[0, s_k], [-s_k, 0]]`` on the diagonal."""
    upper = torch.zeros(n - 1, dtype=s.dtype)
    upper[::2] = s
    a = torch.diag(upper, diagonal=1)
    return a - a.T


def henaff_init_(a: torch.Tensor) -> torch.Tensor:
    """Henaff et al. 2016: block angles ``s ~ U(-pi, pi)``; fills ``a`` in place."""
    s = torch.empty(a.shape[0] // 2).uniform_(-math.pi, math.pi)
    with torch.no_grad():
        return a.copy_(_block_skew(a.shape[0], s))


def cayley_init_(a: torch.Tensor) -> torch.Tensor:
    """Helfrich et al. 2018: ``s = -sqrt((1 - cos t) / (1 + cos t))``, ``t ~ U(0, pi/2)``; fills ``a``."""
    t = torch.empty(a.shape[0] // 2).uniform_(0, math.pi / 2)
    s = -torch.sqrt((1 - torch.cos(t)) / (1 + torch.cos(t)))
    with torch.no_grad():
        return a.copy_(_block_skew(a.shape[0], s))


class ModReLU(nn.Module):
    """``sign(z) relu(|z| + b)`` (Arjovsky et al. 2016), one bias per feature."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.empty(features).uniform_(-0.01, 0.01))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sign(z) * F.relu(z.abs() + self.b)


class ExpRNNCell(nn.Module):
    """``h' = modReLU(W_in x + B h)``, ``B = exp(A)`` orthogonal: ``(B, I), (B, H) -> (B, H)``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_kernel = nn.Linear(input_size, hidden_size, bias=False)
        nn.init.kaiming_normal_(self.input_kernel.weight, nonlinearity="relu")
        recurrent = nn.Linear(hidden_size, hidden_size, bias=False)
        nn.init.eye_(recurrent.weight)  # registering an orthogonal weight makes it the (fixed) base
        self.recurrent_kernel = parametrizations.orthogonal(recurrent, orthogonal_map="matrix_exp")
        # The trainable square X defines A = tril(X) - tril(X)^T: start it at the Cayley skew matrix.
        cayley_init_(self.skew_parameter)
        self.nonlinearity = ModReLU(hidden_size)

    @property
    def skew_parameter(self) -> nn.Parameter:
        """The unconstrained ``(H, H)`` parameter of ``A`` (the one with its own learning rate)."""
        return self.recurrent_kernel.parametrizations.weight.original

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.nonlinearity(self.input_kernel(x) + self.recurrent_kernel(h))


class ExpRNN(nn.Module):
    """Pixel sequences ``(B, T)`` -> logits ``(B, num_classes)``; pixels permuted by a fixed permutation."""

    def __init__(self, cfg: ExpRNNConfig) -> None:
        super().__init__()
        self.hidden_size = cfg.hidden_size
        self.rnn = ExpRNNCell(1, cfg.hidden_size)
        self.lin = nn.Linear(cfg.hidden_size, cfg.num_classes)
        self.register_buffer("permutation", torch.randperm(cfg.seq_len))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        pixels = pixels[:, self.permutation]
        h = pixels.new_zeros(pixels.shape[0], self.hidden_size)
        with parametrize.cached():  # B = exp(A) once per sequence, not once per step
            for x_t in torch.unbind(pixels, dim=1):
                h = self.rnn(x_t.unsqueeze(1), h)
        return self.lin(h)


class ExpRNNWorkload(Workload):
    """Two RMSprop optimizers stepped together, as the reference's training loop."""

    def __init__(self, *args, orth_optimizer: torch.optim.Optimizer | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.orth_optimizer = orth_optimizer

    def train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        self.orth_optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.compute_loss(self.forward())
        if self.grad_scaler is None:
            loss.backward()
            self.optimizer.step()
            self.orth_optimizer.step()
        else:
            self.grad_scaler.scale(loss).backward()
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.step(self.orth_optimizer)
            self.grad_scaler.update()
        return loss.detach()


def _create_exprnn(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(ExpRNNConfig(), **kwargs)
    if ctx.smoke:
        cfg = replace(cfg, hidden_size=16, seq_len=16)
    model = ExpRNN(cfg)
    pixels = ctx.rand(ctx.batch_size, cfg.seq_len)
    labels = ctx.randint(0, cfg.num_classes, (ctx.batch_size,))
    opt = opt_orth = None
    if ctx.train:
        orth = model.rnn.skew_parameter
        opt = torch.optim.RMSprop([p for p in model.parameters() if p is not orth], lr=cfg.lr)
        opt_orth = torch.optim.RMSprop([orth], lr=cfg.lr_orth)
    return ExpRNNWorkload(
        ctx, model, (pixels,), labels, loss_fn=F.cross_entropy, optimizer=opt, orth_optimizer=opt_orth
    )


@register_model(
    domain="other",
    task="sequence_classification",
    batch_size=(128, 128),
    tags=("rnn", "linalg"),
    source="Lezcano-Casado & Martinez-Rubio, Cheap Orthogonal Constraints in Neural Networks, ICML 2019 "
    "(github.com/Lezcano/expRNN, permuted pixel MNIST)",
    unsupported_precisions=("fp16", "bf16"),
    notes="fp16/bf16 unsupported: torch.matrix_exp has no half-precision kernel. amp runs it in fp32. "
    "No param_count: the paper's ~16K counts the free entries of the skew matrix, numel counts "
    "the full 170x170 square the reference stores.",
)
def exprnn_pmnist(ctx: BuildContext, **kwargs) -> Workload:
    """expRNN (hidden 170, Cayley init) on 784-step permuted pixel MNIST, RMSprop 7e-4 / 7e-5."""
    return _create_exprnn(ctx, **kwargs)
