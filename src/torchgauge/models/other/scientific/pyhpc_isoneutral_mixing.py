"""pyhpc isoneutral mixing: the Griffies isoneutral diffusion tensor with slope tapering, a stencil kernel.

Reference: pyhpc-benchmarks ``isoneutral_mixing`` (Dion Häfner, Unlicense), i.e. Veros'
``isoneutral_diffusion_pre`` (MIT), itself after MOM2.1 and Griffies et al. (1998),
"Isoneutral diffusion in a z-coordinate ocean model". For every cell face it forms the
four "triads" (two neighbouring cells x two vertical faces), computes the isoneutral slope
``-drho_h / drho_z``, tapers steep slopes with a tanh (Danabasoglu & McWilliams), and sums
the diffusivities K_11, K_22 (lateral faces) and K_33 (top faces) plus the slope tensors
Ai_* indexed ``[..., ip, kr]`` (neighbour, vertical face).

The kernel runs TorchBench's sequence of operations (``isoneutral_pytorch.py``): the same
temporaries (six zero-initialised gradient arrays, a face-averaged diffusivity, the triad
loops) in the same order, so its launches and memory traffic are TorchBench's; the east and
north faces share one function that indexes along x or y. As in TorchBench, the outputs are
written in place into the ``K_11, K_22, K_33, Ai_*`` arrays passed in (entries outside the
computed interior keep their values), and every step writes into the same arrays:
TorchBench's forward copies nothing. Inputs are TorchBench's 23 arrays, drawn in its order
from numpy's seed-17 stream.
"""

from __future__ import annotations

import functools
import operator

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .ocean_grid import PYHPC_INPUT_SEED, PYHPC_SPEC, NumpyLegacyStream, grid_shape, problem_points

__all__ = ["IsoneutralMixing", "isoneutral_diffusion_pre", "torchbench_inputs"]

_RHO0 = 1024.0  # reference density [kg/m^3]
_EPSLN = 1e-20  # keeps the slope finite where the stratification vanishes
_K_ISO_STEEP = 50.0  # floor of the lateral diffusivity where slopes are tapered away
_ISO_SLOPEC = 1e-3  # taper: slope at which the diffusivity is halved
_ISO_DSLOPE = 1e-3  # taper: width of the transition
_TAU = 0  # the time level of the tracers used


def _drho_dtemp(temp: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """d(rho)/dT of Veros' linear equation of state with thermobaricity, at ``depth`` (positive down)."""
    beta_t, beta_ts, gamma_s, grav, theta0, z0 = 1.67e-4, 1e-5, 1.1e-8, 9.81, 283.0 - 273.15, 0.0
    height = -depth - z0
    return -(beta_ts * (temp - theta0) + beta_t * (1 - gamma_s * grav * height * _RHO0)) * _RHO0


def _drho_dsalt(temp: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """d(rho)/dS of the linear equation of state: a constant on ``temp``'s grid (``depth`` unused, as in Veros)."""
    return 0.78e-3 * _RHO0 * torch.ones_like(temp)


def _taper(slope: torch.Tensor) -> torch.Tensor:
    """Danabasoglu-McWilliams taper in [0, 1]: 1 for flat slopes, 0 for steep ones."""
    return 0.5 * (1.0 + torch.tanh((-torch.abs(slope) + _ISO_SLOPEC) / _ISO_DSLOPE))


def _gradient_into(out, field, mask, dim, *spacing) -> None:
    """``out[i] = mask[i] * (field[i + 1] - field[i]) / prod(spacing)`` on the upper faces along ``dim``.

    The last face along ``dim`` keeps its value; the spacing factors are multiplied after the
    difference, in TorchBench's order.
    """
    lower = (slice(None),) * dim + (slice(None, -1),)
    upper = (slice(None),) * dim + (slice(1, None),)
    out[lower] = mask[lower] * (field[upper] - field[lower]) / functools.reduce(operator.mul, spacing)


def _lateral_faces(axis, drdT, drdS, dTdh, dSdh, dTdz, dSdz, K_iso, mask_face, dzw, dzt, diffloc, K_out, Ai_out):
    """K and slope triads on the faces normal to ``axis`` (0: east, 1: north), written into ``K_out``, ``Ai_out``.

    Face ``i`` lies between cells ``i`` and ``i + 1``; faces 1..n-3 along ``axis`` of the rows
    2..m-3 across it are computed. ``diffloc`` is zero on entry and receives the face-averaged
    ``K_iso``.
    """

    def at(along: slice, *rest) -> tuple:  # index with ``along`` on ``axis`` and rows 2..m-3 across it
        return (along, slice(2, -2), *rest) if axis == 0 else (slice(2, -2), along, *rest)

    faces, upper = slice(1, -2), slice(2, -1)
    nz = K_out.shape[2]
    # K_iso averaged over the face's two cells and the two levels of the W face below it
    diffloc[at(faces, slice(1, None))] = 0.25 * (
        K_iso[at(faces, slice(1, None))]
        + K_iso[at(faces, slice(None, -1))]
        + K_iso[at(upper, slice(1, None))]
        + K_iso[at(upper, slice(None, -1))]
    )
    diffloc[at(faces, 0)] = 0.5 * (K_iso[at(faces, 0)] + K_iso[at(upper, 0)])

    sumz = torch.zeros_like(K_out)[at(faces)]
    for kr in range(2):  # the W face below (0) or above (1) the level; the sea floor has none below
        ki = 1 - kr
        su = nz - ki
        for ip in range(2):  # the cell before (0) or after (1) the face
            cells = slice(1 + ip, -2 + ip)
            drho_h = (
                drdT[at(cells, slice(ki, None))] * dTdh[at(faces, slice(ki, None))]
                + drdS[at(cells, slice(ki, None))] * dSdh[at(faces, slice(ki, None))]
            )
            drho_z = (
                drdT[at(cells, slice(ki, None))] * dTdz[at(cells, slice(None, su))]
                + drdS[at(cells, slice(ki, None))] * dSdz[at(cells, slice(None, su))]
            )
            slope = -drho_h / (torch.min(drho_z, torch.tensor([0.0], device=drho_z.device)) - _EPSLN)
            taper = _taper(slope)
            sumz[:, :, ki:] += (
                dzw[None, None, :su]
                * mask_face[at(faces, slice(ki, None))]
                * torch.max(
                    torch.tensor([_K_ISO_STEEP], device=slope.device), diffloc[at(faces, slice(ki, None))] * taper
                )
            )
            Ai_out[at(faces, slice(ki, None), ip, kr)] = taper * slope * mask_face[at(faces, slice(ki, None))]
    K_out[at(faces, slice(None))] = sumz / (4.0 * dzt[None, None, :])


def isoneutral_diffusion_pre(
    maskT,
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
    salt,
    temp,
    zt,
    K_iso,
    K_11,
    K_22,
    K_33,
    Ai_ez,
    Ai_nz,
    Ai_bx,
    Ai_by,
):
    """Isoneutral diffusivities and slope triads of one time level, written into ``K_*`` and ``Ai_*``.

    Args:
        maskT, maskU, maskV, maskW: 0/1 masks of the T, U, V, W grids, ``(nx, ny, nz)``.
        dxt, dxu: x spacing of T and U cells ``(nx,)``; dyt, dyu ``(ny,)``; dzt, dzw ``(nz,)``.
        cost, cosu: cos(latitude) at T and U rows ``(ny,)``.
        salt, temp: tracers ``(nx, ny, nz, 3)`` over three time levels (level 0 is used).
        zt: depth of the T levels ``(nz,)``.
        K_iso: isoneutral diffusivity ``(nx, ny, nz)``.
        K_11, K_22, K_33: ``(nx, ny, nz)``, and Ai_ez, Ai_nz, Ai_bx, Ai_by: ``(nx, ny, nz, 2, 2)``:
            the outputs, overwritten on the faces computed (the interior), kept elsewhere.

    Returns:
        ``K_11, K_22, K_33, Ai_ez, Ai_nz, Ai_bx, Ai_by``: the arrays passed in.
    """
    dTdx, dSdx, dTdy, dSdy, dTdz, dSdz = (torch.zeros_like(K_11) for _ in range(6))
    drdT = maskT * _drho_dtemp(temp[..., _TAU], torch.abs(zt))  # at the T-cell centres
    drdS = maskT * _drho_dsalt(temp[..., _TAU], torch.abs(zt))
    # tracer gradients on the top, east and north faces of the T cells
    for out, tracer in ((dTdz, temp), (dSdz, salt)):
        _gradient_into(out, tracer[..., _TAU], maskW, 2, dzw[None, None, :-1])
    for out, tracer in ((dTdx, temp), (dSdx, salt)):
        _gradient_into(out, tracer[..., _TAU], maskU, 0, dxu[:-1, None, None], cost[None, :, None])
    for out, tracer in ((dTdy, temp), (dSdy, salt)):
        _gradient_into(out, tracer[..., _TAU], maskV, 1, dyu[None, :-1, None])

    diffloc = torch.zeros_like(K_11)
    _lateral_faces(0, drdT, drdS, dTdx, dSdx, dTdz, dSdz, K_iso, maskU, dzw, dzt, diffloc, K_11, Ai_ez)
    diffloc[...] = 0
    _lateral_faces(1, drdT, drdS, dTdy, dSdy, dTdz, dSdz, K_iso, maskV, dzw, dzt, diffloc, K_22, Ai_nz)

    # slopes on the top faces of the T cells, from the two lateral faces in x and in y
    inner = (slice(2, -2), slice(2, -2))
    sumx = torch.zeros_like(K_11)[2:-2, 2:-2, :-1]
    sumy = torch.zeros_like(K_11)[2:-2, 2:-2, :-1]
    K_top, mask_top = K_iso[2:-2, 2:-2, :-1], maskW[2:-2, 2:-2, :-1]
    nz = K_11.shape[2]
    for kr in range(2):  # the cell below (0) or above (1) the face
        levels = slice(kr, nz - 1 + kr)
        drho_z = drdT[(*inner, levels)] * dTdz[2:-2, 2:-2, :-1] + drdS[(*inner, levels)] * dSdz[2:-2, 2:-2, :-1]
        for ip in range(2):  # the east face west (0) or east (1) of the cell
            faces = slice(1 + ip, -3 + ip)
            drho_h = (
                drdT[(*inner, levels)] * dTdx[faces, 2:-2, levels] + drdS[(*inner, levels)] * dSdx[faces, 2:-2, levels]
            )
            slope = -drho_h / (torch.min(torch.tensor([0.0], device=drho_z.device), drho_z) - _EPSLN)
            taper = _taper(slope)
            sumx += dxu[faces, None, None] * K_top * taper * slope**2 * mask_top
            Ai_bx[2:-2, 2:-2, :-1, ip, kr] = taper * slope * mask_top
        for jp in range(2):  # the north face south (0) or north (1) of the cell
            faces = slice(1 + jp, -3 + jp)
            face_y = cosu[faces] * dyu[faces]
            drho_h = (
                drdT[(*inner, levels)] * dTdy[2:-2, faces, levels] + drdS[(*inner, levels)] * dSdy[2:-2, faces, levels]
            )
            slope = -drho_h / (torch.min(torch.tensor([0.0], device=drho_z.device), drho_z) - _EPSLN)
            taper = _taper(slope)
            sumy += face_y[None, :, None] * K_top * taper * slope**2 * mask_top
            Ai_by[2:-2, 2:-2, :-1, jp, kr] = taper * slope * mask_top
    K_33[2:-2, 2:-2, :-1] = sumx / (4 * dxt[2:-2, None, None]) + sumy / (
        4 * dyt[None, 2:-2, None] * cost[None, 2:-2, None]
    )
    K_33[2:-2, 2:-2, -1] = 0.0  # the surface level has no top face
    return K_11, K_22, K_33, Ai_ez, Ai_nz, Ai_bx, Ai_by


class IsoneutralMixing(nn.Module):
    """Grid fields and output arrays -> ``(K_11, K_22, K_33, Ai_ez, Ai_nz, Ai_bx, Ai_by)``, written in place."""

    def forward(self, *fields: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return isoneutral_diffusion_pre(*fields)


def torchbench_inputs(points: int, *, meta: bool = False) -> tuple[torch.Tensor, ...]:
    """TorchBench's 23 arrays for ``points`` grid points, drawn in its order after ``np.random.seed(17)``.

    The grid metrics are standard normal draws (TorchBench's, not physical spacings), and
    ``K_iso_steep`` is drawn and dropped as TorchBench does, which shifts the later draws.
    With ``meta``, meta tensors of the same shapes and dtypes, nothing drawn.
    """
    shape = grid_shape(points)
    nx, ny, nz = shape
    stream = NumpyLegacyStream(PYHPC_INPUT_SEED, meta=meta)
    maskT, maskU, maskV, maskW = ((stream.rand(*shape) < 0.8).to(torch.float64) for _ in range(4))
    dxt, dxu = (stream.randn(nx) for _ in range(2))
    dyt, dyu = (stream.randn(ny) for _ in range(2))
    dzt, dzw, zt = (stream.randn(nz) for _ in range(3))
    cost, cosu = (stream.randn(ny) for _ in range(2))
    K_iso, _K_iso_steep, K_11, K_22, K_33 = (stream.randn(*shape) for _ in range(5))
    salt, temp = (stream.randn(*shape, 3) for _ in range(2))
    Ai_ez, Ai_nz, Ai_bx, Ai_by = (torch.zeros(*shape, 2, 2, dtype=torch.float64) for _ in range(4))
    return (
        maskT, maskU, maskV, maskW, dxt, dxu, dyt, dyu, dzt, dzw, cost, cosu, salt, temp, zt, K_iso,
        K_11, K_22, K_33, Ai_ez, Ai_nz, Ai_bx, Ai_by,
    )  # fmt: skip


def _create_isoneutral_mixing(ctx: BuildContext) -> Workload:
    inputs = tuple(t.to(ctx.device) for t in torchbench_inputs(problem_points(ctx), meta=ctx.device.type == "meta"))
    return Workload(ctx, IsoneutralMixing(), inputs)


@register_model(source="pyhpc-benchmarks isoneutral_mixing (Veros isoneutral_diffusion_pre)", **PYHPC_SPEC)
def pyhpc_isoneutral_mixing(ctx: BuildContext, **kwargs) -> Workload:
    """Griffies isoneutral mixing tensor on a 204x204x26 float64 grid (2**20 points), written into its inputs."""
    return _create_isoneutral_mixing(ctx, **kwargs)
