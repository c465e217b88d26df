"""NeRF: neural radiance fields, trained and rendered along camera rays.

Mildenhall, Srinivasan, Tancik, Barron, Ramamoorthi and Ng, "NeRF: Representing Scenes as Neural
Radiance Fields for View Synthesis", ECCV 2020. Reference implementation: ``run_nerf.py`` and
``run_nerf_helpers.py`` of github.com/yenchenlin/nerf-pytorch (MIT), with its Blender-scene
configuration (``configs/lego.txt``: view directions on, 64 coarse + 128 fine samples per ray,
1024 rays per batch, white background, near 2, far 6, no NDC, raw noise 0).

As the reference:
- Positional encoding ``[x, sin(2^k x), cos(2^k x)]_{k < L}``, L = 10 for points (63 inputs) and
  4 for view directions (27 inputs).
- Coarse and fine MLPs alike: 8 ReLU layers of 256 with the encoded point concatenated again
  after the fifth, density from the 256-d feature, colour from a 128-wide layer that also sees
  the encoded direction.
- Stratified sampling of ``N_samples`` depths in ``[near, far]`` (one uniform draw per bin when
  perturbing, bin edges at the midpoints), volume rendering with ``alpha = 1 - exp(-relu(sigma)
  delta)`` (the last interval 1e10), weights ``alpha * cumprod([1, 1 - alpha + 1e-10])`` with
  ``torch.cumprod`` exactly as the reference, ``rgb``, ``depth``, ``disp`` and ``acc`` maps, and a
  white background ``rgb + (1 - acc)``.
- Hierarchical sampling: ``sample_pdf`` inverts the piecewise-constant CDF of the coarse weights
  (interior bins, +1e-5) with ``torch.searchsorted`` and ``torch.gather``; the fine network
  renders the sorted union of both sample sets.
- Rays are rendered in chunks of 32768 (``batchify_rays``) and points queried in chunks of
  65536 (``batchify``). Train: MSE of the fine and the coarse colours against the target,
  Adam (lr 5e-4). Eval: the test-time render (no perturbation) of a batch of rays.

Differences: the reference's per-step exponential learning-rate decay and its optional
raw-output return are left out; the disparity divides by the accumulated weight floored at 1e-10
(the reference's ``depth / acc`` is 0 / 0 = NaN on rays with no density, which random weights
produce; here such rays get disparity 1e10). Parameters: 1,191,688 (coarse and fine, 595,844 each), counted
from the reference's ``NeRF(D=8, W=256, input_ch=63, input_ch_views=27, skips=[4],
use_viewdirs=True)``. Data: rays through random pixels of a 400 x 400 pinhole camera (the
Blender half-resolution focal length) at a seeded position 4 units from the origin, looking at
it; target colours uniform random. Written from the paper and the description above; no code
copied.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["NeRFConfig", "NeRFMLP", "NeRFRenderer", "PositionalEncoding", "camera_rays", "raw2outputs", "sample_pdf"]

# Rays of the smoke problem (batch size = rays).
SMOKE_RAYS = 32
# Length given to the last sample interval of each ray (the reference's "infinity").
LAST_INTERVAL = 1e10


@dataclass(frozen=True)
class NeRFConfig:
    multires: int = 10  # frequencies for points: 3 + 3 * 2 * 10 = 63 inputs
    multires_views: int = 4  # frequencies for view directions: 27 inputs
    netdepth: int = 8
    netwidth: int = 256
    skips: tuple[int, ...] = (4,)  # layers after which the encoded point is concatenated again
    n_samples: int = 64  # stratified (coarse) samples per ray
    n_importance: int = 128  # extra fine samples per ray from the coarse weights
    perturb: float = 1.0  # stratified jitter in training (0 at test time)
    raw_noise_std: float = 0.0  # noise on sigma in training (0 for Blender scenes)
    white_bkgd: bool = True
    near: float = 2.0
    far: float = 6.0
    chunk: int = 1024 * 32  # rays rendered at a time
    netchunk: int = 1024 * 64  # points through a network at a time
    image_size: int = 400  # Blender at half resolution
    camera_angle_x: float = 0.6911112070083618  # the Blender scenes' horizontal field of view
    camera_radius: float = 4.0  # distance of the camera from the origin


class PositionalEncoding(nn.Module):
    """``(..., d) -> (..., d + 2 d L)``: the input, then ``sin`` and ``cos`` of ``2^k x`` for each k."""

    def __init__(self, num_freqs: int, input_dims: int = 3) -> None:
        super().__init__()
        self.freq_bands = [float(f) for f in 2.0 ** torch.linspace(0.0, num_freqs - 1, num_freqs)]  # log sampling
        self.out_dim = input_dims * (1 + 2 * num_freqs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x] + [fn(x * freq) for freq in self.freq_bands for fn in (torch.sin, torch.cos)], -1)


class NeRFMLP(nn.Module):
    """Encoded points and directions ``(P, in + in_views)`` -> ``(P, 4)``: raw rgb and raw density."""

    def __init__(self, depth: int, width: int, input_ch: int, input_ch_views: int, skips: tuple[int, ...]) -> None:
        super().__init__()
        self.input_ch, self.input_ch_views, self.skips = input_ch, input_ch_views, skips
        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, width)]
            + [nn.Linear(width + input_ch if i in skips else width, width) for i in range(depth - 1)]
        )
        self.views_linears = nn.ModuleList([nn.Linear(input_ch_views + width, width // 2)])
        self.feature_linear = nn.Linear(width, width)
        self.alpha_linear = nn.Linear(width, 1)
        self.rgb_linear = nn.Linear(width // 2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_pts, input_views = torch.split(x, [self.input_ch, self.input_ch_views], dim=-1)
        h = input_pts
        for i, layer in enumerate(self.pts_linears):
            h = F.relu(layer(h))
            if i in self.skips:
                h = torch.cat([input_pts, h], -1)
        alpha = self.alpha_linear(h)
        h = torch.cat([self.feature_linear(h), input_views], -1)
        for layer in self.views_linears:
            h = F.relu(layer(h))
        return torch.cat([self.rgb_linear(h), alpha], -1)


def raw2outputs(
    raw: torch.Tensor, z_vals: torch.Tensor, rays_d: torch.Tensor, raw_noise_std: float = 0.0, white_bkgd: bool = False
) -> tuple[torch.Tensor, ...]:
    """Volume rendering of ``raw (R, S, 4)`` at depths ``z_vals (R, S)``: rgb ``(R, 3)``, disp, acc,
    weights ``(R, S)``, depth."""
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.full_like(dists[..., :1], LAST_INTERVAL)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)  # depth steps -> distances along the ray
    rgb = torch.sigmoid(raw[..., :3])
    sigma = raw[..., 3]
    if raw_noise_std > 0.0:
        sigma = sigma + torch.randn_like(sigma) * raw_noise_std
    alpha = 1.0 - torch.exp(-F.relu(sigma) * dists)
    # transmittance T_i = prod_{j < i} (1 - alpha_j): an exclusive cumulative product
    weights = alpha * torch.cumprod(torch.cat([torch.ones_like(alpha[..., :1]), 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    depth_map = torch.sum(weights * z_vals, -1)
    acc_map = torch.sum(weights, -1)
    # the reference divides by acc_map unguarded: 0 / 0 = NaN on rays with no density (common at init)
    disp_map = 1.0 / torch.max(1e-10 * torch.ones_like(depth_map), depth_map / torch.clamp(acc_map, min=1e-10))
    if white_bkgd:
        rgb_map = rgb_map + (1.0 - acc_map[..., None])
    return rgb_map, disp_map, acc_map, weights, depth_map


def sample_pdf(bins: torch.Tensor, weights: torch.Tensor, n_samples: int, det: bool = False) -> torch.Tensor:
    """``(R, M + 1)`` bin edges, ``(R, M)`` weights -> ``(R, n_samples)`` inverse-CDF samples of the
    piecewise-uniform pdf."""
    weights = weights + 1e-5  # no empty bins
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)  # (R, M + 1)
    if det:
        u = torch.linspace(0.0, 1.0, steps=n_samples, dtype=cdf.dtype, device=cdf.device)
        u = u.expand(list(cdf.shape[:-1]) + [n_samples])
    else:
        u = torch.rand(list(cdf.shape[:-1]) + [n_samples], dtype=cdf.dtype, device=cdf.device)
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)  # first edge with cdf > u
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)  # (R, S, 2)
    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])


class NeRFRenderer(nn.Module):
    """Rays ``rays_o, rays_d (R, 3)`` -> rendered maps: ``rgb_map (R, 3)``, ``disp_map``, ``acc_map``
    and the coarse ``rgb0``/``disp0``/``acc0``. Training mode perturbs the samples; eval does not."""

    def __init__(self, cfg: NeRFConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_fn = PositionalEncoding(cfg.multires)
        self.embeddirs_fn = PositionalEncoding(cfg.multires_views)
        args = (cfg.netdepth, cfg.netwidth, self.embed_fn.out_dim, self.embeddirs_fn.out_dim, cfg.skips)
        self.network_fn, self.network_fine = NeRFMLP(*args), NeRFMLP(*args)

    def run_network(self, pts: torch.Tensor, viewdirs: torch.Tensor, fn: Callable) -> torch.Tensor:
        """``(R, S, 3)`` points seen from ``(R, 3)`` directions -> ``(R, S, 4)``, in point chunks."""
        pts_flat = torch.reshape(pts, [-1, pts.shape[-1]])
        dirs_flat = torch.reshape(viewdirs[:, None].expand(pts.shape), [-1, 3])
        embedded = torch.cat([self.embed_fn(pts_flat), self.embeddirs_fn(dirs_flat)], -1)
        chunk = self.cfg.netchunk
        out = torch.cat([fn(embedded[i : i + chunk]) for i in range(0, embedded.shape[0], chunk)], 0)
        return torch.reshape(out, list(pts.shape[:-1]) + [out.shape[-1]])

    def render_rays(self, ray_batch: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(R, 11)`` rows ``(o, d, near, far, viewdir)`` -> maps of the coarse and fine passes."""
        cfg = self.cfg
        perturb, noise = (cfg.perturb, cfg.raw_noise_std) if self.training else (0.0, 0.0)
        n_rays = ray_batch.shape[0]
        rays_o, rays_d, viewdirs = ray_batch[:, 0:3], ray_batch[:, 3:6], ray_batch[:, -3:]
        bounds = torch.reshape(ray_batch[..., 6:8], [-1, 1, 2])
        near, far = bounds[..., 0], bounds[..., 1]  # (R, 1)
        t_vals = torch.linspace(0.0, 1.0, steps=cfg.n_samples, dtype=ray_batch.dtype, device=ray_batch.device)
        z_vals = (near * (1.0 - t_vals) + far * t_vals).expand([n_rays, cfg.n_samples])
        if perturb > 0.0:  # stratified: one uniform depth in each bin between neighbouring midpoints
            mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
            upper = torch.cat([mids, z_vals[..., -1:]], -1)
            lower = torch.cat([z_vals[..., :1], mids], -1)
            z_vals = lower + (upper - lower) * torch.rand_like(z_vals)
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]  # (R, S, 3)
        raw = self.run_network(pts, viewdirs, self.network_fn)
        rgb_0, disp_0, acc_0, weights, _ = raw2outputs(raw, z_vals, rays_d, noise, cfg.white_bkgd)

        z_vals_mid = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
        z_samples = sample_pdf(z_vals_mid, weights[..., 1:-1], cfg.n_importance, det=perturb == 0.0).detach()
        z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]  # (R, S + I, 3)
        raw = self.run_network(pts, viewdirs, self.network_fine)
        rgb, disp, acc, _, _ = raw2outputs(raw, z_vals, rays_d, noise, cfg.white_bkgd)
        return {
            "rgb_map": rgb,
            "disp_map": disp,
            "acc_map": acc,
            "rgb0": rgb_0,
            "disp0": disp_0,
            "acc0": acc_0,
            "z_std": torch.std(z_samples, dim=-1, unbiased=False),
        }

    def forward(self, rays_o: torch.Tensor, rays_d: torch.Tensor) -> dict[str, torch.Tensor]:
        viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
        near = self.cfg.near * torch.ones_like(rays_d[..., :1])
        far = self.cfg.far * torch.ones_like(rays_d[..., :1])
        rays = torch.cat([rays_o, rays_d, near, far, viewdirs], -1)  # (R, 11)
        chunks: dict[str, list[torch.Tensor]] = {}
        for i in range(0, rays.shape[0], self.cfg.chunk):
            for key, value in self.render_rays(rays[i : i + self.cfg.chunk]).items():
                chunks.setdefault(key, []).append(value)
        return {key: torch.cat(values, 0) for key, values in chunks.items()}


def img2mse(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.mean((x - y) ** 2)


def nerf_loss(outputs: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """Photometric MSE of the fine render plus that of the coarse render."""
    return img2mse(outputs["rgb_map"], target) + img2mse(outputs["rgb0"], target)


def camera_rays(ctx: BuildContext, n_rays: int, cfg: NeRFConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``rays_o, rays_d (R, 3)`` through random pixels of a pinhole camera looking at the origin.

    The camera sits ``camera_radius`` from the origin at a seeded azimuth and elevation (0 to 60
    degrees, z up); directions follow the reference's ``get_rays`` (OpenGL: x right, y up,
    looking down -z; principal point at the image centre, focal length from ``camera_angle_x``).
    """
    size = cfg.image_size
    focal = 0.5 * size / math.tan(0.5 * cfg.camera_angle_x)
    azimuth, elevation = (ctx.rand(2) * torch.tensor([2 * math.pi, math.pi / 3], device=ctx.device)).unbind()
    position = cfg.camera_radius * torch.stack(
        [elevation.cos() * azimuth.cos(), elevation.cos() * azimuth.sin(), elevation.sin()]
    )
    back = position / position.norm()  # camera +z points away from the scene
    right = torch.linalg.cross(torch.tensor([0.0, 0.0, 1.0], device=ctx.device), back)
    right = right / right.norm()
    up = torch.linalg.cross(back, right)
    rotation = torch.stack([right, up, back], dim=1)  # camera-to-world, columns = camera axes
    i = ctx.randint(0, size, (n_rays,)).float()  # pixel column
    j = ctx.randint(0, size, (n_rays,)).float()  # pixel row
    dirs = torch.stack([(i - 0.5 * size) / focal, -(j - 0.5 * size) / focal, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., None, :] * rotation, -1)  # (R, 3) = rotation @ dir
    return position.expand(rays_d.shape), rays_d


_SMOKE = dict(netwidth=16, n_samples=8, n_importance=8, chunk=16, netchunk=128, image_size=16)


def _create_nerf(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(NeRFConfig(), **{**ctx.pick({}, _SMOKE), **kwargs})
    n_rays = SMOKE_RAYS if ctx.smoke and not ctx.batch_size_given else ctx.batch_size
    rays_o, rays_d = camera_rays(ctx, n_rays, cfg)
    target = ctx.rand(n_rays, 3)
    model = NeRFRenderer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.999)) if ctx.train else None
    return Workload(ctx, model, (rays_o, rays_d), target, loss_fn=nerf_loss, optimizer=opt)


@register_model(
    domain="vision",
    task="neural_rendering",
    batch_size=(1024, 4096),
    tags=("nerf", "rendering"),
    source="Mildenhall et al., NeRF, ECCV 2020; github.com/yenchenlin/nerf-pytorch (lego config)",
    param_count=1_191_688,  # coarse + fine NeRF(D=8, W=256, use_viewdirs=True), counted from the reference
    unsupported_precisions=("fp16",),
    notes="fp16 unsupported: the reference's 1e10 length of the last sample interval overflows "
    "float16. Batch = rays (train 1024 as N_rand; eval renders 4096 rays, chunked by 32768). "
    "64 coarse + 128 fine samples per ray.",
)
def nerf(ctx: BuildContext, **kwargs) -> Workload:
    """NeRF (coarse + fine 8x256 MLPs, hierarchical sampling), Blender-scene settings."""
    return _create_nerf(ctx, **kwargs)
