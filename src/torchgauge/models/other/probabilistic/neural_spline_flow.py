"""Neural spline flow: rational-quadratic spline coupling layers, trained by maximum likelihood.

Durkan, Bekasov, Murray and Papamakarios, "Neural Spline Flows", NeurIPS 2019; the reference
is the authors' nflows library (github.com/bayesiains/nflows, MIT) and its experiment script
``experiments/uci.py`` of github.com/bayesiains/nsf with ``--base_transform_type rq-coupling``:
ten steps of ``[RandomPermutation, LULinear(identity_init), PiecewiseRationalQuadratic
CouplingTransform]`` and a final permutation + LU layer, over a standard-normal base. A
coupling layer keeps alternating features (``create_alternating_binary_mask``), feeds them
through a ``ResidualNet`` (256 hidden, 2 pre-activation residual blocks, ReLU) that outputs
per transformed feature 8 bin widths, 8 heights (both divided by ``sqrt(256)``) and 7 interior
derivatives; the identity features get an unconditional spline of their own
(``apply_unconditional_transform``). Splines: softmax widths/heights with minimum bin size
1e-3, softplus derivatives (+1e-3), bins found by counting knots below the input (nflows'
``searchsorted``), identity (linear) tails outside ``[-3, 3]``; the inverse solves the
quadratic for the bin fraction. Training: ``-mean log p(x)``, Adam, per-step cosine annealing,
gradient norm clipped at 5, with the paper's POWER settings (batch 512, lr 5e-4, no
dropout, 400k steps). Eval samples the flow: standard-normal noise through the inverse.

Data: 6-D synthetic stand-in for POWER (the UCI household power data, standardised): a
seeded mixture of 8 random Gaussians, standardised per feature. Differences from nflows: no
caching and no context (conditional) inputs; transforms return ``(outputs, logabsdet)`` as
nflows' do. Written from the paper and the descriptions above; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = [
    "LULinear",
    "NeuralSplineFlow",
    "NSFConfig",
    "RQSCoupling",
    "rational_quadratic_spline",
    "unconstrained_rational_quadratic_spline",
]

MIN_BIN_WIDTH = MIN_BIN_HEIGHT = MIN_DERIVATIVE = 1e-3  # nflows' defaults
SEARCH_EPS = 1e-6  # added to the last knot so an input equal to the right edge falls in the last bin
MIXTURE_COMPONENTS = 8  # of the synthetic POWER-like data
DATA_POOL = 20_000  # points drawn to standardise the data


@dataclass(frozen=True)
class NSFConfig:
    features: int = 6  # POWER's dimension
    num_flow_steps: int = 10
    hidden_features: int = 256
    num_transform_blocks: int = 2  # residual blocks per coupling net
    num_bins: int = 8
    tail_bound: float = 3.0  # splines on [-B, B], identity outside
    dropout: float = 0.0  # paper's POWER setting (uci.py's default is 0.25)
    lr: float = 5e-4
    num_training_steps: int = 400_000  # cosine annealing horizon
    grad_norm_clip: float = 5.0


# -- splines -------------------------------------------------------------------------------------
def _searchsorted(bin_locations: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Bin index of each input: knots ``<=`` it, minus one (nflows' comparison count, not a binary search)."""
    bin_locations[..., -1] += SEARCH_EPS
    return torch.sum(inputs[..., None] >= bin_locations, dim=-1) - 1


def _knots(unnormalized: torch.Tensor, low: float, high: float, min_size: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax bin sizes (at least ``min_size`` of the range) -> knot positions ``(..., K+1)`` and sizes
    ``(..., K)``."""
    num_bins = unnormalized.shape[-1]
    sizes = min_size + (1 - min_size * num_bins) * F.softmax(unnormalized, dim=-1)
    knots = F.pad(torch.cumsum(sizes, dim=-1), pad=(1, 0), mode="constant", value=0.0)
    knots = (high - low) * knots + low
    knots[..., 0] = low  # exact ends despite rounding in the cumulative sum
    knots[..., -1] = high
    return knots, knots[..., 1:] - knots[..., :-1]


def rational_quadratic_spline(
    inputs: torch.Tensor,
    unnormalized_widths: torch.Tensor,
    unnormalized_heights: torch.Tensor,
    unnormalized_derivatives: torch.Tensor,
    inverse: bool = False,
    left: float = 0.0,
    right: float = 1.0,
    bottom: float = 0.0,
    top: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Monotone rational-quadratic spline on ``[left, right] -> [bottom, top]`` (Gregory & Delbourgo).

    ``inputs`` ``(M,)``; widths and heights ``(M, K)``; derivatives at the ``K + 1`` knots ``(M, K + 1)``.
    Returns outputs and ``log |d out / d in|`` (of the inverse when ``inverse``), both ``(M,)``.
    """
    if torch.min(inputs) < left or torch.max(inputs) > right:
        raise ValueError("spline input outside its domain")
    cumwidths, widths = _knots(unnormalized_widths, left, right, MIN_BIN_WIDTH)
    cumheights, heights = _knots(unnormalized_heights, bottom, top, MIN_BIN_HEIGHT)
    derivatives = MIN_DERIVATIVE + F.softplus(unnormalized_derivatives)

    bin_idx = _searchsorted(cumheights if inverse else cumwidths, inputs)[..., None]  # (M, 1)
    x_k = cumwidths.gather(-1, bin_idx)[..., 0]
    w_k = widths.gather(-1, bin_idx)[..., 0]
    y_k = cumheights.gather(-1, bin_idx)[..., 0]
    h_k = heights.gather(-1, bin_idx)[..., 0]
    s_k = (heights / widths).gather(-1, bin_idx)[..., 0]  # bin slope
    d_k = derivatives.gather(-1, bin_idx)[..., 0]
    d_k1 = derivatives[..., 1:].gather(-1, bin_idx)[..., 0]
    curvature = d_k + d_k1 - 2 * s_k

    if inverse:
        # y = y_k + h (s t^2 + d_k t(1-t)) / (s + curvature t(1-t)) is a quadratic a t^2 + b t + c = 0 in t.
        dy = inputs - y_k
        a = dy * curvature + h_k * (s_k - d_k)
        b = h_k * d_k - dy * curvature
        c = -s_k * dy
        discriminant = b.pow(2) - 4 * a * c
        root = (2 * c) / (-b - torch.sqrt(discriminant))  # the root in [0, 1], in the stable form
        outputs = root * w_k + x_k
        t = root
    else:
        t = (inputs - x_k) / w_k
        outputs = y_k + h_k * (s_k * t.pow(2) + d_k * t * (1 - t)) / (s_k + curvature * t * (1 - t))
    t_one_minus_t = t * (1 - t)
    denominator = s_k + curvature * t_one_minus_t
    derivative_numerator = s_k.pow(2) * (d_k1 * t.pow(2) + 2 * s_k * t_one_minus_t + d_k * (1 - t).pow(2))
    logabsdet = torch.log(derivative_numerator) - 2 * torch.log(denominator)
    return outputs, -logabsdet if inverse else logabsdet


def unconstrained_rational_quadratic_spline(
    inputs: torch.Tensor,
    unnormalized_widths: torch.Tensor,
    unnormalized_heights: torch.Tensor,
    unnormalized_derivatives: torch.Tensor,
    inverse: bool = False,
    tail_bound: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The spline on ``[-B, B]`` with identity (linear) tails: ``(...)`` inputs, ``(..., K - 1)`` interior derivatives.

    The boundary derivatives are fixed to 1 so the spline joins the tails smoothly.
    """
    inside = (inputs >= -tail_bound) & (inputs <= tail_bound)
    outside = ~inside
    outputs, logabsdet = torch.zeros_like(inputs), torch.zeros_like(inputs)
    unnormalized_derivatives = F.pad(unnormalized_derivatives, pad=(1, 1))
    one = math.log(math.exp(1 - MIN_DERIVATIVE) - 1)  # softplus^-1(1 - min_derivative): derivative 1
    unnormalized_derivatives[..., 0] = one
    unnormalized_derivatives[..., -1] = one
    outputs[outside] = inputs[outside]
    logabsdet[outside] = 0
    if torch.any(inside):
        outputs[inside], logabsdet[inside] = rational_quadratic_spline(
            inputs[inside],
            unnormalized_widths[inside, :],
            unnormalized_heights[inside, :],
            unnormalized_derivatives[inside, :],
            inverse=inverse,
            left=-tail_bound,
            right=tail_bound,
            bottom=-tail_bound,
            top=tail_bound,
        )
    return outputs, logabsdet


# -- transforms: each maps (B, D) -> ((B, D), logabsdet (B,)) -------------------------------------
class RandomPermutation(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.register_buffer("permutation", torch.randperm(features))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.index_select(x, 1, self.permutation), x.new_zeros(x.shape[0])

    def inverse(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.index_select(x, 1, torch.argsort(self.permutation)), x.new_zeros(x.shape[0])


class LULinear(nn.Module):
    """``y = L U x + b``: unit lower ``L``, upper ``U`` with diagonal ``softplus(u) + eps``; starts at the identity."""

    def __init__(self, features: int, eps: float = 1e-3) -> None:
        super().__init__()
        self.features, self.eps = features, eps
        n = (features - 1) * features // 2
        self.register_buffer("lower_indices", torch.tril_indices(features, features, -1), persistent=False)
        self.register_buffer("upper_indices", torch.triu_indices(features, features, 1), persistent=False)
        self.lower_entries = nn.Parameter(torch.zeros(n))
        self.upper_entries = nn.Parameter(torch.zeros(n))
        self.unconstrained_upper_diag = nn.Parameter(torch.full((features,), math.log(math.exp(1 - eps) - 1)))
        self.bias = nn.Parameter(torch.zeros(features))

    @property
    def upper_diag(self) -> torch.Tensor:
        return F.softplus(self.unconstrained_upper_diag) + self.eps

    def _lower_upper(self) -> tuple[torch.Tensor, torch.Tensor]:
        diag = torch.arange(self.features, device=self.bias.device)
        lower = self.lower_entries.new_zeros(self.features, self.features)
        lower[self.lower_indices[0], self.lower_indices[1]] = self.lower_entries
        lower[diag, diag] = 1.0
        upper = self.upper_entries.new_zeros(self.features, self.features)
        upper[self.upper_indices[0], self.upper_indices[1]] = self.upper_entries
        upper[diag, diag] = self.upper_diag
        return lower, upper

    def logabsdet(self) -> torch.Tensor:
        return torch.sum(torch.log(self.upper_diag))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lower, upper = self._lower_upper()
        y = F.linear(F.linear(x, upper), lower, self.bias)
        return y, self.logabsdet() * x.new_ones(x.shape[0])

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lower, upper = self._lower_upper()
        x = torch.linalg.solve_triangular(lower, (y - self.bias).t(), upper=False, unitriangular=True)
        x = torch.linalg.solve_triangular(upper, x, upper=True, unitriangular=False)  # (D, B)
        return x.t(), -self.logabsdet() * y.new_ones(y.shape[0])


class ResidualBlock(nn.Module):
    """Pre-activation ``x + Linear(Dropout(relu(Linear(relu(x)))))``, the last layer near zero."""

    def __init__(self, features: int, dropout: float) -> None:
        super().__init__()
        self.linear_layers = nn.ModuleList(nn.Linear(features, features) for _ in range(2))
        self.dropout = nn.Dropout(p=dropout)
        nn.init.uniform_(self.linear_layers[-1].weight, -1e-3, 1e-3)
        nn.init.uniform_(self.linear_layers[-1].bias, -1e-3, 1e-3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear_layers[0](F.relu(x))
        h = self.linear_layers[1](self.dropout(F.relu(h)))
        return x + h


class ResidualNet(nn.Module):
    def __init__(
        self, in_features: int, out_features: int, hidden_features: int, num_blocks: int, dropout: float
    ) -> None:
        super().__init__()
        self.hidden_features = hidden_features
        self.initial_layer = nn.Linear(in_features, hidden_features)
        self.blocks = nn.ModuleList(ResidualBlock(hidden_features, dropout) for _ in range(num_blocks))
        self.final_layer = nn.Linear(hidden_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.initial_layer(x)
        for block in self.blocks:
            h = block(h)
        return self.final_layer(h)


class RationalQuadraticCDF(nn.Module):
    """An unconditional elementwise spline with its own parameters ``(D, K)`` (nflows'
    PiecewiseRationalQuadraticCDF)."""

    def __init__(self, features: int, num_bins: int, tail_bound: float) -> None:
        super().__init__()
        self.tail_bound = tail_bound
        self.unnormalized_widths = nn.Parameter(torch.rand(features, num_bins))
        self.unnormalized_heights = nn.Parameter(torch.rand(features, num_bins))
        self.unnormalized_derivatives = nn.Parameter(torch.rand(features, num_bins - 1))

    def _spline(self, x: torch.Tensor, inverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
        shared = lambda p: p[None].expand(x.shape[0], *p.shape)  # same spline for every row
        y, logabsdet = unconstrained_rational_quadratic_spline(
            x,
            shared(self.unnormalized_widths),
            shared(self.unnormalized_heights),
            shared(self.unnormalized_derivatives),
            inverse=inverse,
            tail_bound=self.tail_bound,
        )
        return y, logabsdet.sum(-1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._spline(x, inverse=False)

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._spline(y, inverse=True)


class RQSCoupling(nn.Module):
    """Coupling layer: features with ``mask > 0`` pass through splines whose parameters the others predict."""

    def __init__(self, mask: torch.Tensor, cfg: NSFConfig) -> None:
        super().__init__()
        features = torch.arange(mask.numel())
        self.register_buffer("identity_features", features[mask <= 0])
        self.register_buffer("transform_features", features[mask > 0])
        self.num_bins, self.tail_bound = cfg.num_bins, cfg.tail_bound
        n_id, n_tr = self.identity_features.numel(), self.transform_features.numel()
        self.transform_net = ResidualNet(
            n_id, n_tr * (3 * cfg.num_bins - 1), cfg.hidden_features, cfg.num_transform_blocks, cfg.dropout
        )
        self.unconditional_transform = RationalQuadraticCDF(n_id, cfg.num_bins, cfg.tail_bound)

    def _coupling(self, x: torch.Tensor, params: torch.Tensor, inverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
        b, d = x.shape
        params = params.reshape(b, d, 3 * self.num_bins - 1)
        scale = math.sqrt(self.transform_net.hidden_features)  # keeps the initial splines near uniform bins
        widths = params[..., : self.num_bins] / scale
        heights = params[..., self.num_bins : 2 * self.num_bins] / scale
        derivatives = params[..., 2 * self.num_bins :]
        y, logabsdet = unconstrained_rational_quadratic_spline(
            x, widths, heights, derivatives, inverse=inverse, tail_bound=self.tail_bound
        )
        return y, logabsdet.sum(-1)

    def _merge(self, like: torch.Tensor, identity: torch.Tensor, transformed: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(like)
        out[:, self.identity_features] = identity
        out[:, self.transform_features] = transformed
        return out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x_id, x_tr = x[:, self.identity_features], x[:, self.transform_features]
        y_tr, logabsdet = self._coupling(x_tr, self.transform_net(x_id), inverse=False)
        y_id, logabsdet_id = self.unconditional_transform(x_id)
        return self._merge(x, y_id, y_tr), logabsdet + logabsdet_id

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y_id, y_tr = y[:, self.identity_features], y[:, self.transform_features]
        x_id, logabsdet = self.unconditional_transform.inverse(y_id)
        x_tr, logabsdet_tr = self._coupling(y_tr, self.transform_net(x_id), inverse=True)
        return self._merge(y, x_id, x_tr), logabsdet + logabsdet_tr


def alternating_mask(features: int, even: bool) -> torch.Tensor:
    """1 on features ``0, 2, 4, ...`` (even) or ``1, 3, 5, ...``: the ones the coupling transforms."""
    mask = torch.zeros(features, dtype=torch.uint8)
    mask[0 if even else 1 :: 2] = 1
    return mask


class NeuralSplineFlow(nn.Module):
    """Data ``(B, D)`` <-> standard-normal noise; ``forward`` gives ``log p(x)`` ``(B,)``."""

    def __init__(self, cfg: NSFConfig) -> None:
        super().__init__()
        self.features = cfg.features
        layers: list[nn.Module] = []
        for i in range(cfg.num_flow_steps):
            layers += [
                RandomPermutation(cfg.features),
                LULinear(cfg.features),
                RQSCoupling(alternating_mask(cfg.features, even=i % 2 == 0), cfg),
            ]
        layers += [RandomPermutation(cfg.features), LULinear(cfg.features)]
        self.transforms = nn.ModuleList(layers)

    def transform_to_noise(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        total = x.new_zeros(x.shape[0])
        for t in self.transforms:
            x, logabsdet = t(x)
            total = total + logabsdet
        return x, total

    def inverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        total = z.new_zeros(z.shape[0])
        for t in reversed(self.transforms):
            z, logabsdet = t.inverse(z)
            total = total + logabsdet
        return z, total

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z, logabsdet = self.transform_to_noise(x)
        log_base = -0.5 * z.pow(2).sum(-1) - 0.5 * self.features * math.log(2 * math.pi)  # StandardNormal
        return log_base + logabsdet

    def sample(self, num_samples: int) -> torch.Tensor:
        z = torch.randn(
            num_samples, self.features, device=self.transforms[1].bias.device, dtype=self.transforms[1].bias.dtype
        )
        return self.inverse(z)[0]


def power_like_data(ctx: BuildContext, num: int, features: int) -> torch.Tensor:
    """``(num, D)`` draws of a seeded 8-component Gaussian mixture, standardised as the UCI sets are."""
    means = ctx.randn(MIXTURE_COMPONENTS, features, std=2.0)
    scales = ctx.randn(MIXTURE_COMPONENTS, features, features, std=0.5)  # Cholesky-like mixing
    pool = max(num, DATA_POOL)
    comp = ctx.randint(0, MIXTURE_COMPONENTS, (pool,))
    x = means[comp] + torch.einsum("nij,nj->ni", scales[comp], ctx.randn(pool, features))
    x = (x - x.mean(0)) / x.std(0)
    return x[:num].contiguous()


class FlowWorkload(Workload):
    """Train: ``-mean log p(x)`` with clipping and cosine annealing; eval: ``batch_size`` samples."""

    def __init__(
        self,
        *args,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        grad_norm_clip: float = 5.0,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.scheduler, self.grad_norm_clip = scheduler, grad_norm_clip

    def forward(self) -> torch.Tensor:
        if self.ctx.train:
            return self.module(*self.inputs)
        return self.module.sample(self.ctx.batch_size)

    def compute_loss(self, log_density: torch.Tensor) -> torch.Tensor:
        return -torch.mean(log_density)

    def train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.compute_loss(self.forward())
        loss.backward()
        nn.utils.clip_grad_norm_(self.module.parameters(), self.grad_norm_clip)
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()


def _create_nsf(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(num_flow_steps=2, hidden_features=16, num_transform_blocks=1) if ctx.smoke else {}
    cfg = replace(NSFConfig(), **{**smoke, **kwargs})
    x = power_like_data(ctx, ctx.batch_size, cfg.features)
    model = NeuralSplineFlow(cfg)
    opt = sched = None
    if ctx.train:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.num_training_steps, 0)
    return FlowWorkload(ctx, model, (x,), optimizer=opt, scheduler=sched, grad_norm_clip=cfg.grad_norm_clip)


@register_model(
    domain="other",
    task="density_estimation",
    batch_size=(512, 512),
    tags=("normalizing_flow",),
    source="Durkan et al., Neural Spline Flows, NeurIPS 2019; bayesiains/nflows, nsf experiments/uci.py",
    param_count=2_820_402,  # uci.py's rq-coupling flow on 6 features, summed over its layer shapes
    unsupported_precisions=("fp16", "bf16", "amp"),
    notes="Synthetic 6-D POWER-like data (Gaussian mixture). Eval samples batch_size points through "
    "the inverse flow. fp16/bf16 unsupported: no half-precision triangular solve on CPU (the LU "
    "inverse) and fp16 training turns NaN; amp unsupported: the spline writes fp32 results into "
    "the autocast-dtype outputs of the LU layers by masked assignment, which torch rejects "
    "(nflows does the same).",
)
def nsf_rq_coupling_power(ctx: BuildContext, **kwargs) -> Workload:
    """RQ-NSF (C): 10 coupling steps, 8 bins, ResidualNet 256x2, on 6-D POWER-like data."""
    return _create_nsf(ctx, **kwargs)
