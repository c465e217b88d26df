"""Multiscale deep equilibrium model (MDEQ) on CIFAR-10, solved by Anderson acceleration.

Bai, Kolter and Koltun, "Deep Equilibrium Models", NeurIPS 2019, and Bai, Koltun and Kolter,
"Multiscale Deep Equilibrium Models", NeurIPS 2020; reference implementation
github.com/locuslab/deq (MIT), ``MDEQ-Vision`` with ``experiments/cifar/cls_mdeq_TINY.yaml``.

The network's single layer ``f(z; x)`` acts on two resolution streams (32x32 and 16x16,
24 channels each). Per stream a residual block ``GN(ReLU(GN(conv(drop(conv(z)) ...) + x) + z))``
(3x3 convs 24 -> 120 -> 24, weight-normalised, GroupNorm(8), variational dropout 0.25 with one
mask per forward, the input injected into the highest resolution only), then multiscale
fusion (strided 3x3 conv down, 1x1 conv + nearest upsampling up, summed) and a post-fusion
``ReLU -> weight-normed 1x1 conv -> GroupNorm(4, affine=False)``. The forward pass finds
``z* = f(z*; x)`` without autograd by Anderson acceleration (the reference's ``anderson``:
memory 6, ``lam`` 1e-4, each iteration solving the bordered ``(n+1) x (n+1)`` least-squares
system ``[[0, 1^T], [1, G G^T + lam I]]`` with ``torch.linalg.solve`` after a ``bmm``),
re-applies ``f`` once with autograd, and registers a hook on that output which replaces
the incoming gradient ``g`` by the solution of the adjoint fixed point
``y = y J_f(z*) + g`` (vector-Jacobian products by ``autograd.grad``, same solver): the
implicit-function-theorem gradient. The classification head is the reference's: a
Bottleneck per stream (8 and 16 x 4 channels), a strided conv merging them, 1x1 conv to 200,
global average pooling, ``Linear(200, 10)``. Adam lr 1e-3, weight decay 2.5e-6, batch 128
(64 per GPU on the yaml's two GPUs); initialisation as ``init_weights``.

Differences: the TINY yaml selects Broyden's method for both solves; the repository's other
solver, Anderson (``F_SOLVER: 'anderson'``), is used here (forward 18, backward 20 iterations,
``stop_mode`` rel and eps 1e-3 as the yaml and ``anderson`` default). Weight norm is
``nn.utils.parametrizations.weight_norm`` evaluated once per solve under
``parametrize.cached()`` (the reference recomputes its own weight-norm weights once per
forward). The 3000 unrolled pre-training steps are not benchmarked: every step is a DEQ
step. Data are random images. Written from the papers and the description above; no code copied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import autograd, nn
from torch.nn import functional as F
from torch.nn.utils import parametrizations, parametrize

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["MDEQ", "MDEQConfig", "anderson", "implicit_backward"]


@dataclass(frozen=True)
class MDEQConfig:
    channels: tuple[int, ...] = (24, 24)  # NUM_CHANNELS: one stream per resolution
    head_channels: tuple[int, ...] = (8, 16)  # Bottleneck widths of the head (x4 out)
    final_channels: int = 200  # FINAL_CHANSIZE
    expansion: int = 5  # EXPANSION_FACTOR: inner width of the residual block
    num_groups: int = 8  # NUM_GROUPS of the GroupNorms (post-fusion: half)
    dropout: float = 0.25  # variational dropout in the residual blocks
    num_classes: int = 10
    f_thres: int = 18  # forward solver iterations
    b_thres: int = 20  # backward solver iterations
    image_size: int = 32


def anderson(
    f: Callable[[torch.Tensor], torch.Tensor],
    x0: torch.Tensor,
    m: int = 6,
    lam: float = 1e-4,
    threshold: int = 50,
    eps: float = 1e-3,
    stop_mode: str = "rel",
    beta: float = 1.0,
) -> torch.Tensor:
    """Anderson acceleration for ``x = f(x)``, ``x0 (B, d, L)``; returns the iterate of lowest residual.

    Keeps the last ``m`` iterates ``X`` and images ``F``; each step picks the affine combination
    ``alpha`` (summing to 1) minimising ``|sum_i alpha_i (F_i - X_i)|^2 + lam |alpha|^2`` by
    solving the bordered system ``H [mu; alpha] = [1; 0]`` and moves to ``sum_i alpha_i F_i``.
    Stops when ``|f(x) - x|`` (``abs``) or that over ``|f(x)|`` (``rel``) falls below ``eps``.
    """
    bsz = x0.shape[0]
    X = x0.new_zeros(bsz, m, x0[0].numel())  # (B, m, d L)
    Fx = x0.new_zeros(bsz, m, x0[0].numel())
    X[:, 0], Fx[:, 0] = x0.reshape(bsz, -1), f(x0).reshape(bsz, -1)
    X[:, 1], Fx[:, 1] = Fx[:, 0], f(Fx[:, 0].reshape_as(x0)).reshape(bsz, -1)
    H = x0.new_zeros(bsz, m + 1, m + 1)
    H[:, 0, 1:] = H[:, 1:, 0] = 1
    y = x0.new_zeros(bsz, m + 1, 1)
    y[:, 0] = 1
    lowest, lowest_x = float("inf"), Fx[:, 0].reshape_as(x0)
    for k in range(2, threshold):
        n = min(k, m)
        G = Fx[:, :n] - X[:, :n]  # (B, n, d L) residuals
        eye = torch.eye(n, dtype=x0.dtype, device=x0.device)
        H[:, 1 : n + 1, 1 : n + 1] = torch.bmm(G, G.transpose(1, 2)) + lam * eye[None]
        alpha = torch.linalg.solve(H[:, : n + 1, : n + 1], y[:, : n + 1])[:, 1 : n + 1, 0]  # (B, n)
        X[:, k % m] = beta * (alpha[:, None] @ Fx[:, :n])[:, 0] + (1 - beta) * (alpha[:, None] @ X[:, :n])[:, 0]
        Fx[:, k % m] = f(X[:, k % m].reshape_as(x0)).reshape(bsz, -1)
        abs_diff = (Fx[:, k % m] - X[:, k % m]).norm().item()
        diff = abs_diff if stop_mode == "abs" else abs_diff / (1e-5 + Fx[:, k % m].norm().item())
        if diff < lowest:
            lowest, lowest_x = diff, X[:, k % m].reshape_as(x0).clone()
        if diff < eps:
            break
    return lowest_x


def implicit_backward(
    func: Callable[[torch.Tensor], torch.Tensor], z_star: torch.Tensor, b_thres: int, eps: float = 1e-3
) -> torch.Tensor:
    """``func(z*)`` once with autograd, its incoming gradient ``g`` replaced by the implicit one.

    By the implicit-function theorem ``dL/dz* = g (I - J_f(z*))^-1``: the fixed point of
    ``y = y J_f(z*) + g``, found by :func:`anderson` on vector-Jacobian products (to relative
    residual ``eps``, the reference's default).
    """
    z_star = z_star.detach().requires_grad_()
    new_z = func(z_star)
    handle = None

    def backward_hook(grad: torch.Tensor) -> torch.Tensor:
        handle.remove()  # once: the vector-Jacobian products below must not re-enter it
        return anderson(
            lambda y: autograd.grad(new_z, z_star, y, retain_graph=True)[0] + grad,
            torch.zeros_like(grad),
            threshold=b_thres,
            eps=eps,
            stop_mode="rel",
        )

    handle = new_z.register_hook(backward_hook)
    return new_z


class VariationalHidDropout2d(nn.Module):
    """Dropout with one mask per forward pass, shared by every solver iteration (``reset_mask``)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p, self.mask = p, None

    def reset_mask(self, like: torch.Tensor) -> None:
        keep = 1 - self.p
        self.mask = torch.empty_like(like).bernoulli_(keep) / keep if self.training and self.p > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.mask is None else x * self.mask


def _wn_conv(cin: int, cout: int, kernel: int) -> nn.Conv2d:
    conv = nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False)
    return parametrizations.weight_norm(conv, dim=0)


class ResidualBlock(nn.Module):
    """MDEQ BasicBlock: ``(B, C, H, W) -> (B, C, H, W)`` with the injection added before ``gn2``."""

    def __init__(self, channels: int, cfg: MDEQConfig) -> None:
        super().__init__()
        inner = cfg.expansion * channels
        self.conv1, self.gn1 = _wn_conv(channels, inner, 3), nn.GroupNorm(cfg.num_groups, inner)
        self.conv2, self.gn2 = _wn_conv(inner, channels, 3), nn.GroupNorm(cfg.num_groups, channels)
        self.gn3 = nn.GroupNorm(cfg.num_groups, channels)
        self.drop = VariationalHidDropout2d(cfg.dropout)

    def forward(self, z: torch.Tensor, injection: torch.Tensor | None) -> torch.Tensor:
        out = F.relu(self.gn1(self.conv1(z)))
        out = self.drop(self.conv2(out))
        if injection is not None:
            out = out + injection
        return self.gn3(F.relu(self.gn2(out) + z))


class MDEQLayer(nn.Module):
    """``f(z; x)``: per-stream residual blocks, then multiscale fusion. Lists of ``(B, C_i, H/2^i, W/2^i)``."""

    def __init__(self, cfg: MDEQConfig) -> None:
        super().__init__()
        ch, g, n = cfg.channels, cfg.num_groups, len(cfg.channels)
        self.blocks = nn.ModuleList(ResidualBlock(c, cfg) for c in ch)
        fuse = []
        for i in range(n):  # fuse[i][j]: stream j -> resolution of stream i
            row = []
            for j in range(n):
                if j > i:  # upsample: 1x1 conv, GroupNorm, nearest
                    row.append(
                        nn.Sequential(
                            nn.Conv2d(ch[j], ch[i], 1, bias=False),
                            nn.GroupNorm(g, ch[i]),
                            nn.Upsample(scale_factor=2 ** (j - i), mode="nearest"),
                        )
                    )
                elif j < i:  # downsample: (i - j) strided 3x3 convs with GroupNorm, ReLU between
                    steps = []
                    for k in range(i - j):
                        out = ch[i] if k == i - j - 1 else ch[j]
                        steps += [nn.Conv2d(ch[j], out, 3, 2, 1, bias=False), nn.GroupNorm(g, out)]
                        if k < i - j - 1:
                            steps.append(nn.ReLU())
                    row.append(nn.Sequential(*steps))
                else:
                    row.append(nn.Identity())
            fuse.append(nn.ModuleList(row))
        self.fuse = nn.ModuleList(fuse)
        self.post_fuse = nn.ModuleList(
            nn.Sequential(nn.ReLU(), _wn_conv(c, c, 1), nn.GroupNorm(g // 2, c, affine=False)) for c in ch
        )

    def reset(self, zs: list[torch.Tensor]) -> None:
        """New dropout masks for this forward pass."""
        for block, z in zip(self.blocks, zs):
            block.drop.reset_mask(z)

    def forward(self, zs: list[torch.Tensor], injection: list[torch.Tensor | None]) -> list[torch.Tensor]:
        ys = [block(z, x) for block, z, x in zip(self.blocks, zs, injection)]
        return [post(sum(row[j](y) for j, y in enumerate(ys))) for row, post in zip(self.fuse, self.post_fuse)]


class Bottleneck(nn.Module):
    """Head block: 1x1 -> 3x3 -> 1x1 (x4) with non-affine BatchNorms and a projected shortcut."""

    def __init__(self, cin: int, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width, affine=False), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width, affine=False), nn.ReLU(),
            nn.Conv2d(width, 4 * width, 1, bias=False), nn.BatchNorm2d(4 * width, affine=False),
        )  # fmt: skip
        self.shortcut = nn.Sequential(nn.Conv2d(cin, 4 * width, 1, bias=False), nn.BatchNorm2d(4 * width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.net(x) + self.shortcut(x))


def _to_vec(zs: list[torch.Tensor]) -> torch.Tensor:
    """The reference's list2vec: ``[(B, C_i, H_i, W_i)] -> (B, sum C_i H_i W_i, 1)``."""
    return torch.cat([z.reshape(z.shape[0], -1, 1) for z in zs], dim=1)


def _to_list(z: torch.Tensor, shapes: list[torch.Size]) -> list[torch.Tensor]:
    sizes = [s[1:].numel() for s in shapes]
    return [part.reshape(s) for part, s in zip(z.split(sizes, dim=1), shapes)]


class MDEQ(nn.Module):
    """Images ``(B, 3, S, S)`` -> logits ``(B, num_classes)`` through the equilibrium of :class:`MDEQLayer`."""

    def __init__(self, cfg: MDEQConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c0 = cfg.channels[0]
        self.stem = nn.Sequential(  # DOWNSAMPLE_TIMES 0 with 2 streams: also the injection
            nn.Conv2d(3, c0, 3, padding=1, bias=False), nn.BatchNorm2d(c0), nn.ReLU(),
            nn.Conv2d(c0, c0, 3, padding=1, bias=False), nn.BatchNorm2d(c0), nn.ReLU(),
        )  # fmt: skip
        self.layer = MDEQLayer(cfg)
        head = [4 * h for h in cfg.head_channels]
        self.incre = nn.ModuleList(Bottleneck(c, h) for c, h in zip(cfg.channels, cfg.head_channels))
        self.downsamp = nn.ModuleList(
            nn.Sequential(nn.Conv2d(head[i], head[i + 1], 3, 2, 1), nn.BatchNorm2d(head[i + 1]), nn.ReLU())
            for i in range(len(head) - 1)
        )
        self.final = nn.Sequential(
            nn.Conv2d(head[-1], cfg.final_channels, 1), nn.BatchNorm2d(cfg.final_channels), nn.ReLU()
        )
        self.classifier = nn.Linear(cfg.final_channels, cfg.num_classes)
        for mod in self.modules():  # init_weights: N(0, 0.01) for the plain convs; weight-normed ones keep
            if isinstance(mod, nn.Conv2d) and not parametrize.is_parametrized(mod):  # their default init
                nn.init.normal_(mod.weight, 0, 0.01)
                if mod.bias is not None:
                    nn.init.normal_(mod.bias, 0, 0.01)

    def equilibrium(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The fixed point ``z* = f(z*; x)`` as a list of streams, with implicit gradients in training."""
        cfg = self.cfg
        b, _, h, w = x.shape
        shapes = [torch.Size((b, c, h >> i, w >> i)) for i, c in enumerate(cfg.channels)]
        injection = [x] + [None] * (len(shapes) - 1)  # only the highest resolution is injected
        zs = [x.new_zeros(s) for s in shapes]
        self.layer.reset(zs)

        def func(z: torch.Tensor) -> torch.Tensor:
            return _to_vec(self.layer(_to_list(z, shapes), injection))

        with torch.no_grad(), parametrize.cached():  # weight norm once per solve (the reference's _reset)
            z_star = anderson(func, _to_vec(zs), threshold=cfg.f_thres, stop_mode="rel")
        if not (self.training and torch.is_grad_enabled()):
            return _to_list(z_star, shapes)
        return _to_list(implicit_backward(func, z_star, cfg.b_thres), shapes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        zs = self.equilibrium(self.stem(images))
        y = self.incre[0](zs[0])
        for i, down in enumerate(self.downsamp):
            y = self.incre[i + 1](zs[i + 1]) + down(y)
        y = self.final(y).mean((2, 3))  # global average pool: (B, final_channels)
        return self.classifier(y)


def _create_mdeq(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(MDEQConfig(), **kwargs)
    if ctx.smoke:
        cfg = replace(
            cfg,
            channels=(4, 4),
            num_groups=2,
            head_channels=(2, 2),
            final_channels=8,
            f_thres=4,
            b_thres=4,
            image_size=8,
        )
    model = MDEQ(cfg)
    images = ctx.randn(ctx.batch_size, 3, cfg.image_size, cfg.image_size)
    labels = ctx.randint(0, cfg.num_classes, (ctx.batch_size,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=2.5e-6) if ctx.train else None
    return Workload(ctx, model, (images,), labels, loss_fn=F.cross_entropy, optimizer=opt)


@register_model(
    domain="other",
    task="classification",
    batch_size=(128, 64),
    tags=("implicit", "linalg"),
    source="Bai, Koltun & Kolter, Multiscale Deep Equilibrium Models, NeurIPS 2020 (locuslab/deq "
    "MDEQ-Vision, cls_mdeq_TINY.yaml), Anderson solver",
    unsupported_precisions=("fp16", "bf16", "amp"),
    notes="fp16/bf16/amp unsupported: Anderson's torch.linalg.solve has no half-precision kernel, and "
    "under amp the backward solve runs outside autocast on half-precision gradients. "
    "Forward and backward are fixed-point solves (18 and 20 Anderson iterations at most, early "
    "exit at relative residual 1e-3): the step's cost depends on the weights and inputs.",
)
def mdeq_tiny_cifar(ctx: BuildContext, **kwargs) -> Workload:
    """MDEQ-TINY (streams 24/24 at 32x32 and 16x16) on CIFAR-10, Anderson forward and implicit backward."""
    return _create_mdeq(ctx, **kwargs)
