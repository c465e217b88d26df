"""pyhpc turbulent kinetic energy: one TKE time step with an implicit vertical solve and superbee advection.

Reference: pyhpc-benchmarks ``turbulent_kinetic_energy`` (Dion Häfner, Unlicense), i.e. Veros'
``integrate_tke`` (MIT) of the Gaspar et al. (1990) TKE closure as in Eden et al. (2014):

1. vertical mixing and dissipation, implicit in time: one tridiagonal system per water
   column, starting at the sea floor level ``kbot - 1`` (Thomas algorithm along z);
2. surface correction where the solution went negative;
3. lateral diffusion (explicit), then superbee flux-limited advection on the W grid;
4. Adams-Bashforth update of the next time level.

Time levels are the last axis: ``tau = 0`` (now), ``taup1 = 1`` (next), ``taum1 = 2``
(previous). The kernel runs TorchBench's sequence of operations (``tke_pytorch.py``): the
same temporaries, the in-place Thomas sweep and the zero-padded vertical stencil, in the same
order, so its launches and memory traffic are TorchBench's.

The reference updates ``tke`` and ``dtke`` in place and TorchBench's forward
clones them first, so every step computes the same thing from the same inputs; here
:func:`integrate_tke` makes those two copies. ``tke_surf_corr`` is float32, as TorchBench's
(allocated with ``torch.zeros``' default dtype). Inputs are TorchBench's 21 arrays, drawn in
its order from numpy's seed-17 stream.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .ocean_grid import PYHPC_INPUT_SEED, PYHPC_SPEC, NumpyLegacyStream, grid_shape, problem_points

__all__ = ["TurbulentKineticEnergy", "integrate_tke", "solve_tridiagonal", "torchbench_inputs"]

_TAU, _TAUP1, _TAUM1 = 0, 1, 2
_DT_TRACER = 1.0  # tracer time step [s]
_DT_TKE = 1  # the momentum time step (an int, as Veros'): avoids spurious oscillations
_AB_EPS = 0.1  # Adams-Bashforth stabilisation
_ALPHA_TKE = 1.0  # TKE diffusivity = alpha_tke * kappaM
_C_EPS = 0.7  # dissipation constant
_K_H_TKE = 2000.0  # lateral TKE diffusivity [m^2/s]
_EPS = 1e-20  # keeps the superbee ratio finite on flat profiles


def solve_tridiagonal(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Solve ``a[k] x[k-1] + b[k] x[k] + c[k] x[k+1] = d[k]`` along the last dim (Thomas algorithm).

    ``a[..., 0]`` and ``c[..., -1]`` are ignored. No pivoting: meant for diagonally dominant
    systems. The forward sweep overwrites ``b`` and ``d`` in place, as the reference does.
    """
    if not a.shape == b.shape == c.shape == d.shape:
        raise ValueError(f"a, b, c, d must have one shape, got {[tuple(t.shape) for t in (a, b, c, d)]}")
    n = a.shape[-1]
    for k in range(1, n):  # forward elimination of the sub-diagonal
        w = a[..., k] / b[..., k - 1]
        b[..., k] += -w * c[..., k - 1]
        d[..., k] += -w * d[..., k - 1]
    x = torch.empty_like(a)
    x[..., -1] = d[..., -1] / b[..., -1]
    for k in range(n - 2, -1, -1):  # back substitution
        x[..., k] = (d[..., k] - c[..., k] * x[..., k + 1]) / b[..., k]
    return x


def _solve_columns(ks, a, b, c, d, b_edge):
    """Solve the columns from their floor level ``ks`` upwards; land columns (ks < 0) and cells below are inert."""
    land = (ks >= 0)[:, :, None]
    edge = land & (torch.arange(a.shape[2], device=ks.device)[None, None, :] == ks[:, :, None])  # no flux below
    water = land & (torch.arange(a.shape[2], device=ks.device)[None, None, :] >= ks[:, :, None])
    a_tri = water * a * torch.logical_not(edge)
    b_tri = torch.where(water, b, 1.0)
    b_tri = torch.where(edge, b_edge, b_tri)
    return solve_tridiagonal(a_tri, b_tri, water * c, water * d), water


def _superbee_limiter(ratio: torch.Tensor) -> torch.Tensor:
    """Superbee flux limiter ``max(0, min(1, 2r), min(2, r))``."""
    bound = functools.partial(torch.tensor, device=ratio.device)
    return torch.maximum(
        bound([0.0]), torch.maximum(torch.minimum(bound([1.0]), 2 * ratio), torch.minimum(bound([2.0]), ratio))
    )


def _superbee_flux(vel, var, mask, cfl, velfac=None):
    """Superbee-limited flux through the faces ``i + 1/2``, from the velocity ``vel`` on them.

    ``var`` holds the four shifted views ``var[i - 1], var[i], var[i + 1], var[i + 2]`` of the
    tracer (see :func:`_windows`), ``mask`` the first three of the face mask; ``cfl`` is the
    Courant number on the faces and ``velfac`` an optional metric factor on the velocity.
    """
    var_m, var_0, var_1, var_2 = var
    rjp = (var_2 - var_1) * mask[2]
    rj = (var_1 - var_0) * mask[1]
    rjm = (var_0 - var_m) * mask[0]
    ratio = torch.where(vel > 0.0, rjm, rjp) / torch.where(torch.abs(rj) < _EPS, _EPS, rj)
    limiter = _superbee_limiter(ratio)
    if velfac is None:
        return vel * (var_1 + var_0) * 0.5 - torch.abs(vel) * ((1.0 - limiter) + cfl * limiter) * rj * 0.5
    return velfac * vel * (var_1 + var_0) * 0.5 - torch.abs(velfac * vel) * ((1.0 - limiter) + cfl * limiter) * rj * 0.5


def _windows(x: torch.Tensor, dim: int, rows: tuple) -> tuple:
    """The four shifted views ``x[i - 1], x[i], x[i + 1], x[i + 2]`` along ``dim`` for i = 1..n-3, at ``rows``."""
    shifts = (slice(None, -3), slice(1, -2), slice(2, -1), slice(3, None))
    return tuple(x[(*rows[:dim], s, *rows[dim:])] for s in shifts)


def _pad_z(x: torch.Tensor) -> torch.Tensor:
    """``x`` with a zero level below the floor and above the surface."""
    shape = list(x.shape)
    shape[2] += 2
    out = torch.zeros(shape, dtype=x.dtype, device=x.device)
    out[:, :, 1:-1] = x
    return out


def _advection_fluxes(flux_east, flux_north, flux_top, var, u, v, w, maskW, dxt, dyt, dzw, cost, cosu):
    """Superbee fluxes of a W-grid tracer through the east, north and top faces, written into the flux arrays."""
    inner = slice(2, -2)
    mask_u = torch.zeros_like(maskW)
    mask_u[:-1, :, :] = maskW[1:, :, :] * maskW[:-1, :, :]
    flux_east[...] = 0.0
    dx = cost[None, inner, None] * dxt[1:-2, None, None]
    cfl = torch.abs(u[1:-2, inner, :] * _DT_TRACER / dx)
    east = _superbee_flux(u[1:-2, inner, :], _windows(var, 0, (inner,)), _windows(mask_u, 0, (inner,))[:3], cfl)
    flux_east[1:-2, inner, :] = east

    mask_v = torch.zeros_like(maskW)
    mask_v[:, :-1, :] = maskW[:, 1:, :] * maskW[:, :-1, :]
    flux_north[...] = 0.0
    dy = (cost * dyt)[None, 1:-2, None]
    velfac = cosu[None, 1:-2, None]
    cfl = torch.abs(velfac * v[inner, 1:-2, :] * _DT_TRACER / dy)
    north = _superbee_flux(
        v[inner, 1:-2, :], _windows(var, 1, (inner,)), _windows(mask_v, 1, (inner,))[:3], cfl, velfac
    )
    flux_north[inner, 1:-2, :] = north

    mask_w = torch.zeros_like(maskW)
    mask_w[:, :, :-1] = maskW[:, :, 1:] * maskW[:, :, :-1]
    flux_top[...] = 0.0
    w_z, var_z, mask_z = (_pad_z(x) for x in (w, var, mask_w))
    cfl = torch.abs(w_z[inner, inner, 1:-2] * _DT_TRACER / dzw[None, None, :-1])
    top = _superbee_flux(
        w_z[inner, inner, 1:-2], _windows(var_z, 2, (inner, inner)), _windows(mask_z, 2, (inner, inner))[:3], cfl
    )
    flux_top[inner, inner, :-1] = top


def _lateral_divergence(flux_east, flux_north, dxt, dyt, cost):
    """Divergence of the east/north face fluxes in the interior cells ``(nx-4, ny-4, nz)``."""
    return (flux_east[2:-2, 2:-2, :] - flux_east[1:-3, 2:-2, :]) / (cost[None, 2:-2, None] * dxt[2:-2, None, None]) + (
        flux_north[2:-2, 2:-2, :] - flux_north[2:-2, 1:-3, :]
    ) / (cost[None, 2:-2, None] * dyt[None, 2:-2, None])


def integrate_tke(
    u,
    v,
    w,
    maskU,
    maskV,
    maskW,
    dxt,
    dxu,
    dyt,
    dyu,
    dzt,
    dzw,
    cost,
    cosu,
    kbot,
    kappaM,
    mxl,
    forc,
    forc_tke_surface,
    tke,
    dtke,
):
    """One TKE step on a ``(nx, ny, nz)`` grid; returns ``(tke, dtke, tke_surf_corr)``.

    Args:
        u, v, w: velocities ``(nx, ny, nz, 3)``; tke, dtke: TKE and its tendency ``(nx, ny, nz, 3)``,
            copied first (TorchBench's forward clones them), then updated.
        maskU, maskV, maskW: 0/1 masks; kappaM, mxl, forc: viscosity, mixing length, forcing ``(nx, ny, nz)``.
        dxt, dxu ``(nx,)``; dyt, dyu, cost, cosu ``(ny,)``; dzt, dzw ``(nz,)``: grid metrics.
        kbot: 1-based sea-floor level per column (0 = land) ``(nx, ny)``; forc_tke_surface ``(nx, ny)``.
    """
    tke, dtke = torch.clone(tke), torch.clone(dtke)
    flux_east, flux_north, flux_top = (torch.zeros_like(maskU) for _ in range(3))
    sqrttke = torch.sqrt(torch.maximum(torch.tensor([0.0], device=tke.device), tke[:, :, :, _TAU]))
    inner = (slice(2, -2), slice(2, -2))

    # 1. vertical mixing and dissipation, implicit: delta[k] couples levels k and k+1
    ks = kbot[inner] - 1
    a_tri, b_tri, c_tri, d_tri, delta = (torch.zeros_like(maskU[inner]) for _ in range(5))
    delta[:, :, :-1] = (
        _DT_TKE / dzt[None, None, 1:] * _ALPHA_TKE * 0.5 * (kappaM[2:-2, 2:-2, :-1] + kappaM[2:-2, 2:-2, 1:])
    )
    # the surface box is half a cell: 0.5 * dzw[-1] below
    a_tri[:, :, 1:-1] = -delta[:, :, :-2] / dzw[None, None, 1:-1]
    a_tri[:, :, -1] = -delta[:, :, -2] / (0.5 * dzw[-1])
    b_tri[:, :, 1:-1] = (
        1
        + (delta[:, :, 1:-1] + delta[:, :, :-2]) / dzw[None, None, 1:-1]
        + _DT_TKE * _C_EPS * sqrttke[2:-2, 2:-2, 1:-1] / mxl[2:-2, 2:-2, 1:-1]
    )
    b_tri[:, :, -1] = (
        1 + delta[:, :, -2] / (0.5 * dzw[-1]) + _DT_TKE * _C_EPS / mxl[2:-2, 2:-2, -1] * sqrttke[2:-2, 2:-2, -1]
    )
    b_floor = 1 + delta / dzw[None, None, :] + _DT_TKE * _C_EPS / mxl[inner] * sqrttke[inner]
    c_tri[:, :, :-1] = -delta[:, :, :-1] / dzw[None, None, :-1]
    d_tri[...] = tke[2:-2, 2:-2, :, _TAU] + _DT_TKE * forc[inner]
    d_tri[:, :, -1] += _DT_TKE * forc_tke_surface[inner] / (0.5 * dzw[-1])
    solution, water = _solve_columns(ks, a_tri, b_tri, c_tri, d_tri, b_floor)
    tke[2:-2, 2:-2, :, _TAUP1] = torch.where(water, solution, tke[2:-2, 2:-2, :, _TAUP1])

    # 2. put back the TKE that a draining surface density flux removed from the top box
    tke_surf_corr = torch.zeros(maskU.shape[:2], dtype=torch.float32, device=maskU.device)  # float32, as TorchBench
    drained = tke[2:-2, 2:-2, -1, _TAUP1] < 0.0
    tke_surf_corr[inner] = torch.where(drained, -tke[2:-2, 2:-2, -1, _TAUP1] * 0.5 * dzw[-1] / _DT_TKE, 0.0)
    tke[2:-2, 2:-2, -1, _TAUP1] = torch.maximum(torch.tensor([0.0], device=tke.device), tke[2:-2, 2:-2, -1, _TAUP1])

    # 3. lateral diffusion, then advection
    flux_east[:-1, :, :] = (
        _K_H_TKE
        * (tke[1:, :, :, _TAU] - tke[:-1, :, :, _TAU])
        / (cost[None, :, None] * dxu[:-1, None, None])
        * maskU[:-1, :, :]
    )
    flux_east[-1, :, :] = 0.0
    flux_north[:, :-1, :] = (
        _K_H_TKE
        * (tke[:, 1:, :, _TAU] - tke[:, :-1, :, _TAU])
        / dyu[None, :-1, None]
        * maskV[:, :-1, :]
        * cosu[None, :-1, None]
    )
    flux_north[:, -1, :] = 0.0
    tke[2:-2, 2:-2, :, _TAUP1] += (
        _DT_TKE * maskW[2:-2, 2:-2, :] * _lateral_divergence(flux_east, flux_north, dxt, dyt, cost)
    )
    _advection_fluxes(
        flux_east, flux_north, flux_top, tke[:, :, :, _TAU], u[..., _TAU], v[..., _TAU], w[..., _TAU],
        maskW, dxt, dyt, dzw, cost, cosu,
    )  # fmt: skip
    dtke[2:-2, 2:-2, :, _TAU] = maskW[2:-2, 2:-2, :] * (
        -(flux_east[2:-2, 2:-2, :] - flux_east[1:-3, 2:-2, :]) / (cost[None, 2:-2, None] * dxt[2:-2, None, None])
        - (flux_north[2:-2, 2:-2, :] - flux_north[2:-2, 1:-3, :]) / (cost[None, 2:-2, None] * dyt[None, 2:-2, None])
    )
    dtke[:, :, 0, _TAU] += -flux_top[:, :, 0] / dzw[0]
    dtke[:, :, 1:-1, _TAU] += -(flux_top[:, :, 1:-1] - flux_top[:, :, :-2]) / dzw[1:-1]
    dtke[:, :, -1, _TAU] += -(flux_top[:, :, -1] - flux_top[:, :, -2]) / (0.5 * dzw[-1])

    # 4. Adams-Bashforth time step
    tke[:, :, :, _TAUP1] += _DT_TRACER * (
        (1.5 + _AB_EPS) * dtke[:, :, :, _TAU] - (0.5 + _AB_EPS) * dtke[:, :, :, _TAUM1]
    )
    return tke, dtke, tke_surf_corr


class TurbulentKineticEnergy(nn.Module):
    """Grid fields -> ``(tke, dtke, tke_surf_corr)``; no parameters."""

    def forward(self, *fields: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return integrate_tke(*fields)


def torchbench_inputs(points: int, *, meta: bool = False) -> tuple[torch.Tensor, ...]:
    """TorchBench's 21 arrays for ``points`` grid points, drawn in its order after ``np.random.seed(17)``.

    The grid metrics, viscosity ``kappaM`` and mixing length ``mxl`` are standard normal draws
    (TorchBench's, not physical values); ``kbot`` is int64 in ``[0, nz)``. With ``meta``,
    meta tensors of the same shapes and dtypes, nothing drawn.
    """
    shape = grid_shape(points)
    nx, ny, nz = shape
    stream = NumpyLegacyStream(PYHPC_INPUT_SEED, meta=meta)
    maskU, maskV, maskW = ((stream.rand(*shape) < 0.8).to(torch.float64) for _ in range(3))
    dxt, dxu = (stream.randn(nx) for _ in range(2))
    dyt, dyu = (stream.randn(ny) for _ in range(2))
    dzt, dzw = (stream.randn(nz) for _ in range(2))
    cost, cosu = (stream.randn(ny) for _ in range(2))
    kbot = stream.randint(0, nz, (nx, ny))
    forc_tke_surface = stream.randn(nx, ny)
    kappaM, mxl, forc = (stream.randn(*shape) for _ in range(3))
    u, v, w, tke, dtke = (stream.randn(*shape, 3) for _ in range(5))
    return (
        u, v, w, maskU, maskV, maskW, dxt, dxu, dyt, dyu, dzt, dzw, cost, cosu, kbot, kappaM, mxl, forc,
        forc_tke_surface, tke, dtke,
    )  # fmt: skip


def _create_turbulent_kinetic_energy(ctx: BuildContext) -> Workload:
    points = problem_points(ctx)
    if grid_shape(points)[2] < 2:  # the surface box couples to the level below it
        raise ValueError(f"pyhpc_turbulent_kinetic_energy needs a batch size (grid points) above 64, got {points}")
    inputs = tuple(t.to(ctx.device) for t in torchbench_inputs(points, meta=ctx.device.type == "meta"))
    return Workload(ctx, TurbulentKineticEnergy(), inputs)


@register_model(source="pyhpc-benchmarks turbulent_kinetic_energy (Veros integrate_tke)", **PYHPC_SPEC)
def pyhpc_turbulent_kinetic_energy(ctx: BuildContext, **kwargs) -> Workload:
    """One TKE step (tridiagonal vertical solve + superbee advection) on a 204x204x26 float64 grid."""
    return _create_turbulent_kinetic_energy(ctx, **kwargs)
