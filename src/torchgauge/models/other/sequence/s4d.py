"""S4D: a stack of diagonal state-space layers classifying sequential CIFAR.

Gu, Gupta, Goel and Ré, "On the Parameterization and Initialization of Diagonal State Space
Models", NeurIPS 2022; the reference is the minimal ``models/s4/s4d.py`` and ``example.py``
of github.com/state-spaces/s4 (Apache-2.0). Each S4D layer holds, per channel ``h``, a
diagonal complex ``A`` with S4D-Lin initialisation ``A_n = -1/2 + i pi n`` (stored as
``log(-Re A)`` and ``Im A``), a complex ``C`` ``(H, N/2)`` (stored as real pairs), a step
``dt`` log-uniform in ``[1e-3, 1e-1]`` and a skip ``D``. The zero-order-hold discretisation
gives the convolution kernel as a Vandermonde product
``K[h, l] = 2 Re sum_n C_n (exp(dt A_n) - 1) / A_n exp(dt A_n l)`` (the conjugate pairs
give the factor 2), applied to the input by an FFT convolution of length ``2L``
(``rfft``/``irfft``, no wrap-around), then ``+ D u``, GELU, tied dropout and
``Conv1d(H, 2H, 1) + GLU``. The model is ``example.py``'s ``S4Model``: a linear encoder of
the pixels, four post-norm residual S4D layers (dropout 0.1, LayerNorm), mean pooling over
the sequence and a linear decoder; cross-entropy, AdamW (lr 0.01, weight decay 0.01) with the
SSM parameters ``log_dt``, ``log_A_real``, ``A_imag`` in a second group (lr 0.001, no weight
decay), the reference's ``setup_optimizer``. Batch 64 of 1024-pixel RGB sequences (CIFAR-10
read row by row), d_model 128, d_state 64.

Data are synthetic and seeded (normal pixels, random labels). The cosine schedule of the
reference steps once per epoch, so it is not part of a step. Written from the paper and the
description above; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["S4D", "S4DConfig", "S4DKernel", "S4Model", "fft_convolution"]


@dataclass(frozen=True)
class S4DConfig:
    d_input: int = 3  # RGB pixels (example.py without --grayscale)
    d_output: int = 10  # CIFAR-10 classes
    d_model: int = 128
    n_layers: int = 4
    d_state: int = 64  # N: N/2 complex conjugate pairs are stored
    seq_len: int = 1024  # 32 x 32 pixels
    dropout: float = 0.1
    dt_min: float = 1e-3
    dt_max: float = 1e-1
    lr: float = 0.01
    weight_decay: float = 0.01
    ssm_lr: float = 0.001  # min(0.001, lr): the reference's learning rate for dt and A


class S4DKernel(nn.Module):
    """Diagonal SSM kernel generator: ``L -> K (H, L)``."""

    def __init__(self, d_model: int, n: int, dt_min: float, dt_max: float, ssm_lr: float | None = None) -> None:
        super().__init__()
        h = d_model
        log_dt = torch.rand(h) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)  # (H,)
        c = torch.randn(h, n // 2, dtype=torch.cfloat)
        self.C = nn.Parameter(torch.view_as_real(c))  # (H, N/2, 2)
        self._register("log_dt", log_dt, ssm_lr)
        self._register("log_A_real", torch.log(0.5 * torch.ones(h, n // 2)), ssm_lr)  # Re A = -1/2
        self._register("A_imag", math.pi * torch.arange(n // 2).float().expand(h, -1).clone(), ssm_lr)  # Im A = pi n

    def _register(self, name: str, tensor: torch.Tensor, lr: float | None) -> None:
        """A parameter tagged with its own optimizer settings (``_optim``), or a buffer when ``lr == 0``."""
        if lr == 0.0:
            self.register_buffer(name, tensor)
            return
        self.register_parameter(name, nn.Parameter(tensor))
        optim = {"weight_decay": 0.0}
        if lr is not None:
            optim["lr"] = lr
        getattr(self, name)._optim = optim

    def forward(self, length: int) -> torch.Tensor:
        dt = torch.exp(self.log_dt)  # (H,)
        c = torch.view_as_complex(self.C)  # (H, N/2)
        a = -torch.exp(self.log_A_real) + 1j * self.A_imag  # (H, N/2)
        dt_a = a * dt.unsqueeze(-1)  # (H, N/2)
        vandermonde = dt_a.unsqueeze(-1) * torch.arange(length, device=a.device)  # (H, N/2, L)
        c = c * (torch.exp(dt_a) - 1.0) / a  # ZOH: B_bar = (exp(dt A) - 1) / A with B = 1
        return 2 * torch.einsum("hn,hnl->hl", c, torch.exp(vandermonde)).real  # (H, L)


def fft_convolution(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal convolution ``y[l] = sum_{j <= l} k[j] u[l - j]`` of ``u`` ``(B, H, L)`` with ``k`` ``(H, L)``.

    Zero-padded to ``2L`` so the circular FFT product does not wrap around.
    """
    length = u.shape[-1]
    k_f = torch.fft.rfft(k, n=2 * length)  # (H, L + 1)
    u_f = torch.fft.rfft(u, n=2 * length)  # (B, H, L + 1)
    return torch.fft.irfft(u_f * k_f, n=2 * length)[..., :length]  # (B, H, L)


class DropoutNd(nn.Module):
    """Dropout with one mask per (batch, channel) tied across the sequence, as the reference's."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        mask = torch.rand(*x.shape[:2], *(1,) * (x.ndim - 2), device=x.device) < 1.0 - self.p
        return x * mask * (1.0 / (1 - self.p))


class S4D(nn.Module):
    """One S4D layer on ``(B, H, L)`` (channels first, ``transposed=True`` in the reference)."""

    def __init__(
        self, d_model: int, d_state: int, dropout: float, dt_min: float, dt_max: float, ssm_lr: float | None
    ) -> None:
        super().__init__()
        self.D = nn.Parameter(torch.randn(d_model))
        self.kernel = S4DKernel(d_model, d_state, dt_min, dt_max, ssm_lr)
        self.activation = nn.GELU()
        self.dropout = DropoutNd(dropout) if dropout > 0.0 else nn.Identity()
        self.output_linear = nn.Sequential(nn.Conv1d(d_model, 2 * d_model, kernel_size=1), nn.GLU(dim=-2))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        k = self.kernel(u.shape[-1])  # (H, L)
        y = fft_convolution(u, k) + u * self.D.unsqueeze(-1)  # (B, H, L)
        return self.output_linear(self.dropout(self.activation(y)))


class S4Model(nn.Module):
    """Sequences ``(B, L, d_input)`` -> logits ``(B, d_output)``."""

    def __init__(self, cfg: S4DConfig) -> None:
        super().__init__()
        self.encoder = nn.Linear(cfg.d_input, cfg.d_model)
        self.s4_layers = nn.ModuleList(
            S4D(cfg.d_model, cfg.d_state, cfg.dropout, cfg.dt_min, cfg.dt_max, cfg.ssm_lr) for _ in range(cfg.n_layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in range(cfg.n_layers))
        self.dropouts = nn.ModuleList(nn.Dropout1d(cfg.dropout) for _ in range(cfg.n_layers))
        self.decoder = nn.Linear(cfg.d_model, cfg.d_output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder(x).transpose(-1, -2)  # (B, H, L)
        for layer, norm, dropout in zip(self.s4_layers, self.norms, self.dropouts):
            x = dropout(layer(x)) + x
            x = norm(x.transpose(-1, -2)).transpose(-1, -2)  # post-norm over channels
        return self.decoder(x.transpose(-1, -2).mean(dim=1))  # (B, d_output)


def setup_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over plain parameters plus one group per distinct ``_optim`` setting (the reference's)."""
    params = list(model.parameters())
    optimizer = torch.optim.AdamW([p for p in params if not hasattr(p, "_optim")], lr=lr, weight_decay=weight_decay)
    settings = sorted(dict.fromkeys(frozenset(p._optim.items()) for p in params if hasattr(p, "_optim")), key=sorted)
    for setting in settings:
        hp = dict(setting)
        optimizer.add_param_group({"params": [p for p in params if getattr(p, "_optim", None) == hp], **hp})
    return optimizer


def _create_s4d(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(d_model=8, n_layers=2, d_state=8, seq_len=64) if ctx.smoke else {}
    cfg = replace(S4DConfig(), **{**smoke, **kwargs})
    pixels = ctx.randn(ctx.batch_size, cfg.seq_len, cfg.d_input)
    labels = ctx.randint(0, cfg.d_output, (ctx.batch_size,))
    model = S4Model(cfg)
    opt = setup_optimizer(model, cfg.lr, cfg.weight_decay) if ctx.train else None
    return Workload(ctx, model, (pixels,), labels, loss_fn=nn.functional.cross_entropy, optimizer=opt)


@register_model(
    domain="other",
    task="sequence_classification",
    batch_size=(64, 64),
    tags=("ssm", "fft", "complex"),
    source="Gu et al., S4D (diagonal state spaces), NeurIPS 2022; state-spaces/s4 models/s4/s4d.py, example.py",
    param_count=201_482,  # example.py S4Model(d_input=3, d_model=128, n_layers=4), summed over layer shapes
    unsupported_precisions=("fp16", "bf16"),
    notes="Synthetic sequential CIFAR (1024 RGB pixels, random labels). fp16/bf16 unsupported: the "
    "kernel is complex (no complex bfloat16; no complex-half exp on CPU); amp runs it in fp32.",
)
def s4d_scifar(ctx: BuildContext, **kwargs) -> Workload:
    """S4D stack (d_model 128, 4 layers, d_state 64) on 1024-step sequential CIFAR."""
    return _create_s4d(ctx, **kwargs)
