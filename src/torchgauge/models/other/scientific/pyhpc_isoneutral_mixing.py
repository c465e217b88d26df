"""pyhpc isoneutral mixing: the Griffies isoneutral diffusion tensor with slope tapering, a stencil kernel.

Reference: pyhpc-benchmarks ``isoneutral_mixing`` (Dion Häfner, Unlicense), i.e. Veros'
``isoneutral_diffusion_pre`` (MIT), itself after MOM2.1 and Griffies et al. (1998),
"Isoneutral diffusion in a z-coordinate ocean model". For every cell face it forms the
four "triads" (two neighbouring cells x two vertical faces), computes the isoneutral slope
``-drho_h / drho_z``, tapers steep slopes with a tanh (Danabasoglu & McWilliams), and sums
the diffusivities K_11, K_22 (lateral faces) and K_33 (top faces) plus the slope tensors
Ai_* indexed ``[..., ip, kr]`` (neighbour, vertical face).

The north-face computation is the east-face one with x and y swapped, so both run through
one function on transposed views. As in TorchBench, the outputs are written in place into
the ``K_11, K_22, K_33, Ai_*`` arrays passed in (entries outside the computed interior keep
their values), and every step writes into the same arrays: TorchBench's forward copies
nothing. Inputs are TorchBench's 23 arrays, drawn in its order from numpy's seed-17 stream.
"""

from __future__ import annotations

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .ocean_grid import PYHPC_INPUT_SEED, PYHPC_SPEC, NumpyLegacyStream, face_gradient, grid_shape, problem_points

__all__ = ["IsoneutralMixing", "isoneutral_diffusion_pre", "torchbench_inputs"]

_RHO0 = 1024.0  # reference density [kg/m^3]
_EPSLN = 1e-20  # keeps the slope finite where the stratification vanishes
_K_ISO_STEEP = 50.0  # floor of the lateral diffusivity where slopes are tapered away
_ISO_SLOPEC = 1e-3  # taper: slope at which the diffusivity is halved
_ISO_DSLOPE = 1e-3  # taper: width of the transition


def _drho_dtemp(temp: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """d(rho)/dT of Veros' linear equation of state with thermobaricity."""
    beta_t, beta_ts, gamma_s, grav, theta0 = 1.67e-4, 1e-5, 1.1e-8, 9.81, 283.0 - 273.15
    return -(beta_ts * (temp - theta0) + beta_t * (1 + gamma_s * grav * depth * _RHO0)) * _RHO0


def _swap_xy(field: torch.Tensor) -> torch.Tensor:
    """A view with x and y exchanged, to run an x-direction stencil along y."""
    return field.transpose(0, 1)


def _tapered_slope(drho_h: torch.Tensor, drho_z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Isoneutral slope ``-drho_h / drho_z`` (stable stratification only) and its taper in [0, 1]."""
    slope = -drho_h / (torch.clamp(drho_z, max=0.0) - _EPSLN)
    taper = 0.5 * (1.0 + torch.tanh((_ISO_SLOPEC - torch.abs(slope)) / _ISO_DSLOPE))
    return slope, taper


def _lateral_face(drdT, drdS, dTdh, dSdh, dTdz, dSdz, K_iso, mask_face, dzw, dzt, k_out, a_out):
    """K and slopes on the faces normal to dim 0 (east faces; north faces via transposed views).

    Face ``i`` lies between cells ``i`` and ``i + 1``; faces 1..nx-3 of columns 2..ny-3 are
    written into ``k_out (nx, ny, nz)`` and ``a_out (nx, ny, nz, 2, 2)``.
    """
    nx, ny, nz = K_iso.shape
    faces, cols = slice(1, nx - 2), slice(2, ny - 2)
    # K_iso on the face, averaged over its two cells and over the two levels of the W-face below
    k_face = 0.5 * (K_iso[1:-2, cols] + K_iso[2:-1, cols])  # (nx-3, ny-4, nz)
    k_face = torch.cat([k_face[..., :1], 0.5 * (k_face[..., 1:] + k_face[..., :-1])], dim=-1)
    sum_z = torch.zeros_like(k_face)
    for kr in (0, 1):  # vertical face below (0) or above (1) the level; the sea floor has none below
        levels, wfaces = slice(1 - kr, nz), slice(0, nz - 1 + kr)
        mask = mask_face[faces, cols, levels]
        for ip in (0, 1):  # the cell west (0) or east (1) of the face
            cells = slice(1 + ip, nx - 2 + ip)
            dT, dS = drdT[cells, cols, levels], drdS[cells, cols, levels]
            drho_h = dT * dTdh[faces, cols, levels] + dS * dSdh[faces, cols, levels]
            drho_z = dT * dTdz[cells, cols, wfaces] + dS * dSdz[cells, cols, wfaces]
            slope, taper = _tapered_slope(drho_h, drho_z)
            sum_z[..., levels] += dzw[wfaces] * mask * torch.clamp(k_face[..., levels] * taper, min=_K_ISO_STEEP)
            a_out[faces, cols, levels, ip, kr] = taper * slope * mask
    k_out[faces, cols] = sum_z / (4.0 * dzt)


def _top_face(drdT, drdS, dTdh, dSdh, drho_z, K_iso, maskW, face_weight, a_out):
    """Slopes on the top faces along dim 0 (x; y via transposed views) and their K_33 sum.

    ``drho_z[kr]`` is the vertical density gradient seen from the cell below (0) or above (1);
    ``face_weight (nx, 1, 1)`` is the metric of the lateral faces. Writes the slopes into
    ``a_out (nx, ny, nz, 2, 2)`` and returns the sum ``(nx-4, ny-4, nz-1)``.
    """
    nx, ny, nz = K_iso.shape
    rows, cols, tops = slice(2, nx - 2), slice(2, ny - 2), slice(0, nz - 1)
    k_iso, mask = K_iso[rows, cols, tops], maskW[rows, cols, tops]
    total = torch.zeros_like(k_iso)
    for kr in (0, 1):
        levels = slice(kr, nz - 1 + kr)
        dT, dS = drdT[rows, cols, levels], drdS[rows, cols, levels]
        for ip in (0, 1):  # the lateral face west (0) or east (1) of the cell
            faces = slice(1 + ip, nx - 3 + ip)
            drho_h = dT * dTdh[faces, cols, levels] + dS * dSdh[faces, cols, levels]
            slope, taper = _tapered_slope(drho_h, drho_z[kr])
            total += face_weight[faces] * k_iso * taper * slope**2 * mask
            a_out[rows, cols, tops, ip, kr] = taper * slope * mask
    return total


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
    tau = 0
    temp, salt = temp[..., tau], salt[..., tau]
    drdT = maskT * _drho_dtemp(temp, torch.abs(zt))
    drdS = maskT * (0.78e-3 * _RHO0)  # d(rho)/dS of the linear equation of state
    metric_x = dxu[:, None, None] * cost[None, :, None]
    dTdx, dSdx = (face_gradient(f, 0, maskU, metric_x) for f in (temp, salt))
    dTdy, dSdy = (face_gradient(f, 1, maskV, dyu[None, :, None]) for f in (temp, salt))
    dTdz, dSdz = (face_gradient(f, 2, maskW, dzw) for f in (temp, salt))

    _lateral_face(drdT, drdS, dTdx, dSdx, dTdz, dSdz, K_iso, maskU, dzw, dzt, K_11, Ai_ez)
    swapped = map(_swap_xy, (drdT, drdS, dTdy, dSdy, dTdz, dSdz, K_iso, maskV))
    _lateral_face(*swapped, dzw, dzt, _swap_xy(K_22), _swap_xy(Ai_nz))

    nx, ny, nz = K_iso.shape
    rows, cols, tops = slice(2, nx - 2), slice(2, ny - 2), slice(0, nz - 1)
    drho_z = [
        drdT[rows, cols, kr : nz - 1 + kr] * dTdz[rows, cols, tops]
        + drdS[rows, cols, kr : nz - 1 + kr] * dSdz[rows, cols, tops]
        for kr in (0, 1)
    ]
    sum_x = _top_face(drdT, drdS, dTdx, dSdx, drho_z, K_iso, maskW, dxu[:, None, None], Ai_bx)
    sum_y = _top_face(
        *map(_swap_xy, (drdT, drdS, dTdy, dSdy)),
        list(map(_swap_xy, drho_z)),
        _swap_xy(K_iso),
        _swap_xy(maskW),
        (cosu * dyu)[:, None, None],
        _swap_xy(Ai_by),
    )
    K_33[rows, cols, tops] = sum_x / (4.0 * dxt[rows, None, None]) + _swap_xy(sum_y) / (
        4.0 * dyt[None, cols, None] * cost[None, cols, None]
    )
    K_33[rows, cols, -1] = 0.0  # the surface level has no top face
    return K_11, K_22, K_33, Ai_ez, Ai_nz, Ai_bx, Ai_by


class IsoneutralMixing(nn.Module):
    """Grid fields and output arrays -> ``(K_11, K_22, K_33, Ai_ez, Ai_nz, Ai_bx, Ai_by)``, written in place."""

    def forward(self, *fields: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return isoneutral_diffusion_pre(*fields)


def torchbench_inputs(points: int) -> tuple[torch.Tensor, ...]:
    """TorchBench's 23 arrays for ``points`` grid points, drawn in its order after ``np.random.seed(17)``.

    The grid metrics are standard normal draws (TorchBench's, not physical spacings), and
    ``K_iso_steep`` is drawn and dropped as TorchBench does, which shifts the later draws.
    """
    shape = grid_shape(points)
    nx, ny, nz = shape
    stream = NumpyLegacyStream(PYHPC_INPUT_SEED)
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
    inputs = tuple(t.to(ctx.device) for t in torchbench_inputs(problem_points(ctx)))
    return Workload(ctx, IsoneutralMixing(), inputs)


@register_model(source="pyhpc-benchmarks isoneutral_mixing (Veros isoneutral_diffusion_pre)", **PYHPC_SPEC)
def pyhpc_isoneutral_mixing(ctx: BuildContext, **kwargs) -> Workload:
    """Griffies isoneutral mixing tensor on a 204x204x26 float64 grid (2**20 points), written into its inputs."""
    return _create_isoneutral_mixing(ctx, **kwargs)
