"""pyhpc turbulent kinetic energy: one TKE time step with an implicit vertical solve and superbee advection.

Reference: pyhpc-benchmarks ``turbulent_kinetic_energy`` (Dion Häfner, Unlicense), i.e. Veros'
``integrate_tke`` (MIT) of the Gaspar et al. (1990) TKE closure as in Eden et al. (2014):

1. vertical mixing and dissipation, implicit in time: one tridiagonal system per water
   column, starting at the sea floor level ``kbot - 1`` (Thomas algorithm along z);
2. surface correction where the solution went negative;
3. lateral diffusion (explicit), then superbee flux-limited advection on the W grid;
4. Adams-Bashforth update of the next time level.

Time levels are the last axis: ``tau = 0`` (now), ``taup1 = 1`` (next), ``taum1 = 2``
(previous). The reference updates ``tke`` and ``dtke`` in place; here they are copied first
so that every step computes the same thing from the same inputs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .ocean_grid import PYHPC_SPEC, face_gradient, grid_mask, grid_shape, grid_spacing, problem_points

__all__ = ["integrate_tke", "solve_tridiagonal"]

_TAU, _TAUP1, _TAUM1 = 0, 1, 2
_DT_TRACER = 1.0  # tracer time step [s]
_DT_TKE = 1.0  # the momentum time step: avoids spurious oscillations
_AB_EPS = 0.1  # Adams-Bashforth stabilisation
_ALPHA_TKE = 1.0  # TKE diffusivity = alpha_tke * kappaM
_C_EPS = 0.7  # dissipation constant
_K_H_TKE = 2000.0  # lateral TKE diffusivity [m^2/s]


def solve_tridiagonal(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Solve ``a[k] x[k-1] + b[k] x[k] + c[k] x[k+1] = d[k]`` along the last dim (Thomas algorithm).

    ``a[..., 0]`` and ``c[..., -1]`` are ignored. No pivoting: meant for diagonally dominant systems.
    """
    n = a.shape[-1]
    diag, rhs = [b[..., 0]], [d[..., 0]]
    for k in range(1, n):  # forward elimination of the sub-diagonal
        w = a[..., k] / diag[-1]
        diag.append(b[..., k] - w * c[..., k - 1])
        rhs.append(d[..., k] - w * rhs[-1])
    x = [rhs[-1] / diag[-1]]
    for k in range(n - 2, -1, -1):  # back substitution
        x.append((rhs[k] - c[..., k] * x[-1]) / diag[k])
    return torch.stack(x[::-1], dim=-1)


def _solve_columns(ks, a, b, c, d, b_edge):
    """Solve the columns from their floor level ``ks`` upwards; land columns (ks < 0) and cells below are inert."""
    levels = torch.arange(a.shape[-1], device=a.device)
    land = (ks >= 0)[..., None]
    edge = land & (levels == ks[..., None])  # the floor cell: no flux through its bottom
    water = land & (levels >= ks[..., None])
    a = torch.where(water & ~edge, a, 0.0)
    b = torch.where(edge, b_edge, torch.where(water, b, 1.0))
    return solve_tridiagonal(a, b, torch.where(water, c, 0.0), torch.where(water, d, 0.0)), water


def _superbee_flux(vel, var, mask, dx, dim, vel_factor=None):
    """Superbee-limited advective flux through faces ``i + 1/2``, i = 1..n-3, along ``dim``.

    All arguments have length ``n`` along ``dim`` (``dx`` and ``vel_factor`` broadcastable).
    """
    n = var.shape[dim]

    def at(x, offset):  # x[i + offset] for i = 1..n-3
        return x.narrow(dim, 1 + offset, n - 3)

    vel_face = at(vel, 0) if vel_factor is None else at(vel_factor, 0) * at(vel, 0)
    cfl = torch.abs(vel_face * _DT_TRACER / at(dx, 0))
    r_up = (at(var, 2) - at(var, 1)) * at(mask, 1)
    r_here = (at(var, 1) - at(var, 0)) * at(mask, 0)
    r_down = (at(var, 0) - at(var, -1)) * at(mask, -1)
    ratio = torch.where(at(vel, 0) > 0, r_down, r_up) / torch.where(torch.abs(r_here) < 1e-20, 1e-20, r_here)
    limiter = torch.clamp(torch.maximum(torch.clamp(2 * ratio, max=1.0), torch.clamp(ratio, max=2.0)), min=0.0)
    return (
        vel_face * (at(var, 1) + at(var, 0)) * 0.5
        - torch.abs(vel_face) * ((1.0 - limiter) + cfl * limiter) * r_here * 0.5
    )


def _open_faces(mask: torch.Tensor, dim: int) -> torch.Tensor:
    """1 on the upper face of a cell along ``dim`` where both neighbours are water; 0 on the last face."""
    n = mask.shape[dim]
    pad = [0, 0] * (mask.dim() - 1 - dim) + [0, 1]
    return F.pad(mask.narrow(dim, 0, n - 1) * mask.narrow(dim, 1, n - 1), pad)


def _advection_fluxes(var, u, v, w, maskW, dxt, dyt, dzw, cost, cosu):
    """East, north and top superbee fluxes ``(nx, ny, nz)`` of a W-grid tracer."""
    nx, ny, _ = var.shape
    flux_east, flux_north, flux_top = (torch.zeros_like(var) for _ in range(3))
    inner_x, inner_y = slice(2, nx - 2), slice(2, ny - 2)
    mask_u = _open_faces(maskW, 0)[:, inner_y]
    flux_east[1:-2, inner_y] = _superbee_flux(
        u[:, inner_y], var[:, inner_y], mask_u, dxt[:, None, None] * cost[None, inner_y, None], 0
    )
    mask_v = _open_faces(maskW, 1)[inner_x]
    flux_north[inner_x, 1:-2] = _superbee_flux(
        v[inner_x], var[inner_x], mask_v, (cost * dyt)[None, :, None], 1, cosu[None, :, None]
    )
    # vertical: zero-padded below the floor and above the surface, so faces 0..nz-2 are interior
    w_z, var_z, mask_z = (F.pad(x[inner_x, inner_y], (1, 1)) for x in (w, var, _open_faces(maskW, 2)))
    flux_top[inner_x, inner_y, :-1] = _superbee_flux(w_z, var_z, mask_z, F.pad(dzw, (1, 1))[None, None, :], 2)
    return flux_east, flux_north, flux_top


def _lateral_divergence(flux_east, flux_north, dxt, dyt, cost):
    """Divergence of the east/north face fluxes in the interior cells ``(nx-4, ny-4, nz)``."""
    rows, cols = slice(2, -2), slice(2, -2)
    return (flux_east[rows, cols] - flux_east[1:-3, cols]) / (cost[None, cols, None] * dxt[rows, None, None]) + (
        flux_north[rows, cols] - flux_north[rows, 1:-3]
    ) / (cost[None, cols, None] * dyt[None, cols, None])


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
        u, v, w: velocities ``(nx, ny, nz, 3)``; tke, dtke: TKE and its tendency ``(nx, ny, nz, 3)``.
        maskU, maskV, maskW: 0/1 masks; kappaM, mxl, forc: viscosity, mixing length, forcing ``(nx, ny, nz)``.
        dxt, dxu ``(nx,)``; dyt, dyu, cost, cosu ``(ny,)``; dzt, dzw ``(nz,)``: grid metrics.
        kbot: 1-based sea-floor level per column (0 = land) ``(nx, ny)``; forc_tke_surface ``(nx, ny)``.
    """
    tke, dtke = tke.clone(), dtke.clone()
    sqrt_tke = torch.sqrt(torch.clamp(tke[..., _TAU], min=0.0))
    inner = (slice(2, -2), slice(2, -2))

    # 1. vertical mixing and dissipation, implicit: delta[k] couples levels k and k+1
    delta = F.pad(_DT_TKE / dzt[1:] * _ALPHA_TKE * 0.5 * (kappaM[inner][..., :-1] + kappaM[inner][..., 1:]), (0, 1))
    half_top = 0.5 * dzw[-1]  # the surface box is half a cell
    dissipation = _DT_TKE * _C_EPS * sqrt_tke[inner] / mxl[inner]
    a_tri = F.pad(torch.cat([-delta[..., :-2] / dzw[1:-1], -delta[..., -2:-1] / half_top], dim=-1), (1, 0))
    b_tri = (
        F.pad(
            torch.cat([(delta[..., 1:-1] + delta[..., :-2]) / dzw[1:-1], delta[..., -2:-1] / half_top], dim=-1), (1, 0)
        )
        + 1.0
        + dissipation
    )
    b_floor = 1.0 + delta / dzw + dissipation
    c_tri = -delta / dzw
    d_tri = tke[inner][..., _TAU] + _DT_TKE * forc[inner]
    d_tri[..., -1] += _DT_TKE * forc_tke_surface[inner] / half_top
    solution, water = _solve_columns(kbot[inner] - 1, a_tri, b_tri, c_tri, d_tri, b_floor)
    tke[inner][..., _TAUP1] = torch.where(water, solution, tke[inner][..., _TAUP1])

    # 2. put back the TKE that a draining surface density flux removed from the top box
    top = tke[inner][..., -1, _TAUP1]
    tke_surf_corr = torch.zeros_like(forc_tke_surface)
    tke_surf_corr[inner] = torch.where(top < 0.0, -top * half_top / _DT_TKE, 0.0)
    tke[inner][..., -1, _TAUP1] = torch.clamp(top, min=0.0)

    # 3. lateral diffusion, then advection
    now = tke[..., _TAU]
    flux_east = _K_H_TKE * face_gradient(now, 0, maskU, cost[None, :, None] * dxu[:, None, None])
    flux_north = _K_H_TKE * face_gradient(now, 1, maskV, dyu[None, :, None]) * cosu[None, :, None]
    tke[inner][..., _TAUP1] += _DT_TKE * maskW[inner] * _lateral_divergence(flux_east, flux_north, dxt, dyt, cost)
    flux_east, flux_north, flux_top = _advection_fluxes(
        now, u[..., _TAU], v[..., _TAU], w[..., _TAU], maskW, dxt, dyt, dzw, cost, cosu
    )
    dtke[inner][..., _TAU] = -maskW[inner] * _lateral_divergence(flux_east, flux_north, dxt, dyt, cost)
    dz_box = torch.cat([dzw[:-1], dzw[-1:] * 0.5])
    dtke[..., _TAU] -= (flux_top - F.pad(flux_top[..., :-1], (1, 0))) / dz_box

    # 4. Adams-Bashforth time step
    tke[..., _TAUP1] += _DT_TRACER * ((1.5 + _AB_EPS) * dtke[..., _TAU] - (0.5 + _AB_EPS) * dtke[..., _TAUM1])
    return tke, dtke, tke_surf_corr


class TurbulentKineticEnergy(nn.Module):
    """Grid fields -> ``(tke, dtke, tke_surf_corr)``; no parameters."""

    def forward(self, *fields: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return integrate_tke(*fields)


def _create_turbulent_kinetic_energy(ctx: BuildContext) -> Workload:
    nx, ny, nz = grid_shape(problem_points(ctx))
    f64 = torch.float64
    u, v, w = (ctx.randn(nx, ny, nz, 3, dtype=f64) for _ in range(3))
    masks = [grid_mask(ctx, nx, ny, nz) for _ in range(3)]  # U, V, W
    metrics = [grid_spacing(ctx, n) for n in (nx, nx, ny, ny, nz, nz, ny, ny)]  # dxt dxu dyt dyu dzt dzw cost cosu
    kbot = ctx.randint(0, nz, (nx, ny))
    # Viscosity and mixing length are positive in a real ocean (pyhpc draws N(0, 1)); positive
    # values keep the vertical systems diagonally dominant and the outputs finite.
    kappa_m, mxl = grid_spacing(ctx, nx, ny, nz), grid_spacing(ctx, nx, ny, nz)
    forc = ctx.randn(nx, ny, nz, dtype=f64)
    forc_surface = ctx.randn(nx, ny, dtype=f64)
    tke, dtke = (ctx.randn(nx, ny, nz, 3, dtype=f64) for _ in range(2))
    fields = (u, v, w, *masks, *metrics, kbot, kappa_m, mxl, forc, forc_surface, tke, dtke)
    return Workload(ctx, TurbulentKineticEnergy(), fields)


@register_model(source="pyhpc-benchmarks turbulent_kinetic_energy (Veros integrate_tke)", **PYHPC_SPEC)
def pyhpc_turbulent_kinetic_energy(ctx: BuildContext, **kwargs) -> Workload:
    """One TKE step (tridiagonal vertical solve + superbee advection) on a 204x204x26 float64 grid."""
    return _create_turbulent_kinetic_energy(ctx, **kwargs)
