"""pyhpc equation of state in closed form: TorchBench's dh/dCT of seawater with fewer operations.

Reference: pyhpc-benchmarks ``equation_of_state`` (Dion Häfner, Unlicense), taken from the
Veros ocean model (MIT): ``gsw_dHdT`` of the computationally efficient 48-term expression
for density (IOC, SCOR and IAPSO, TEOS-10 manual, 2010; McDougall et al. 2003). The
reference is Maple output; here the same quantity is derived in closed form:

    specific volume  v(p) = Den(p) / Num(p),  Num quadratic and Den cubic in p
    dynamic enthalpy h(p) = 1e4 * integral_0^p v dp'          (dbar -> Pa)

Dividing Den by Num gives a polynomial part plus ``(r0 + r1 p) / Num``, which integrates
to a log term and an inverse-hyperbolic term. Every coefficient is a polynomial in CT whose
CT-slope comes from Horner's rule, and the chain rule then gives dh/dCT exactly. Inputs are
TorchBench's, bit for bit: float64 uniform draws after ``np.random.seed(17)`` (reproduced
without numpy by :class:`~.ocean_grid.NumpyLegacyStream`). The closed form agrees with the
Maple expression TorchBench times to ~1e-7 relative but is fewer operations, so its timings
are not TorchBench's: ``pyhpc_equation_of_state`` is TorchBench's formulation, this is kept as
``pyhpc_equation_of_state_closed_form``.
"""

from __future__ import annotations

import torch

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .ocean_grid import PYHPC_SPEC, problem_points
from .pyhpc_equation_of_state import DENSITY_48_TERM, EquationOfState, torchbench_inputs

__all__ = ["gsw_dhdct_closed_form", "specific_volume"]

_DBAR_TO_PA = 1e4


def _horner(x, coeffs):
    """Value and d/dx of ``sum_k coeffs[k] * x**k`` (coefficients may be tensors)."""
    value, slope = coeffs[-1], None
    for c in coeffs[-2::-1]:
        slope = value if slope is None else slope * x + value
        value = value * x + c
    return value, slope


def _pressure_coefficients(sa: torch.Tensor, ct: torch.Tensor):
    """(value, d/dCT) of the p-coefficients: Num = a + 2 b p + c p^2, Den = d0 + d1 p + d2 p^2 + d3 p^3."""
    v = DENSITY_48_TERM
    sa15 = sa * torch.sqrt(sa)  # SA^1.5
    a = _horner(
        ct,
        (
            v[1] + v[5] * sa + v[8] * sa15,
            v[2] + v[6] * sa + v[9] * sa15,
            v[3] + v[7] * sa + v[10] * sa15,
            v[4] + v[11] * sa15,
        ),
    )
    b = _horner(ct, (0.5 * (v[12] + v[15] * sa), 0.5 * (v[13] + v[16] * sa), 0.5 * v[14]))
    c = _horner(ct, (v[17] + v[20] * sa, v[18], v[19]))
    d0 = _horner(
        ct,
        (
            v[21] + sa * (v[26] + v[36] * sa) + v[31] * sa15,
            v[22] + v[27] * sa + v[32] * sa15,
            v[23] + v[28] * sa + v[33] * sa15,
            v[24] + v[29] * sa + v[34] * sa15,
            v[25] + v[30] * sa + v[35] * sa15,
        ),
    )
    d1 = _horner(ct, (v[37] + v[41] * sa, v[38] + v[42] * sa, v[39], v[40]))
    d2 = _horner(ct, (v[43], v[44] + v[46] * sa, v[45]))
    d3 = _horner(ct, (v[47], v[48]))
    return a, b, c, d0, d1, d2, d3


def specific_volume(sa: torch.Tensor, ct: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Specific volume ``1/rho`` [m^3/kg] of the 48-term expression (SA g/kg, CT degC, p dbar)."""
    (a, _), (b, _), (c, _), (d0, _), (d1, _), (d2, _), (d3, _) = _pressure_coefficients(sa, ct)
    return (d0 + p * (d1 + p * (d2 + p * d3))) / (a + p * (2 * b + c * p))


def gsw_dhdct_closed_form(sa: torch.Tensor, ct: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """d/dCT of dynamic enthalpy [J/(kg K)] for Absolute Salinity, Conservative Temperature, pressure.

    Args:
        sa: Absolute Salinity [g/kg], ``(nx, ny, nz)``.
        ct: Conservative Temperature [degC], ``(nx, ny, nz)``.
        p: sea pressure [dbar], broadcastable, e.g. ``(1, 1, nz)``.
    """
    (a, da), (b, db), (c, dc), (d0, dd0), (d1, dd1), (d2, dd2), (d3, dd3) = _pressure_coefficients(sa, ct)
    # Den = (q0 + q1 p) * Num + (r0 + r1 p)
    q1 = d3 / c
    dq1 = (dd3 - q1 * dc) / c
    q0 = (d2 - 2 * b * q1) / c
    dq0 = (dd2 - 2 * (db * q1 + b * dq1) - q0 * dc) / c
    r1 = d1 - q1 * a - 2 * b * q0
    dr1 = dd1 - dq1 * a - q1 * da - 2 * (db * q0 + b * dq0)
    r0 = d0 - q0 * a
    dr0 = dd0 - dq0 * a - q0 * da
    # (r0 + r1 p) / Num = f * Num'(p) / Num + e / Num, with f = r1 / 2c and e = r0 - r1 b / c
    f = r1 / (2 * c)
    df = (dr1 - r1 * dc / c) / (2 * c)
    e = r0 - r1 * b / c
    de = dr0 - (dr1 * b + r1 * db) / c + r1 * b * dc / (c * c)
    # integral_0^p f Num'/Num = f ln(Num(p) / a)
    num = a + p * (2 * b + c * p)
    dnum = da + p * (2 * db + dc * p)
    log_num = torch.log(num / a)
    dlog_num = dnum / num - da / a
    # integral_0^p dp'/Num = ln(R) / 2s, s^2 = b^2 - a c, R = 1 + 2 c p s / ((b - s)(b + s + c p))
    s = torch.sqrt(b * b - a * c)
    ds = (2 * b * db - da * c - a * dc) / (2 * s)
    m = (b - s) * (b + s + c * p)
    dm = (db - ds) * (b + s + c * p) + (b - s) * (db + ds + dc * p)
    n = 2 * c * p * s
    dn = 2 * p * (dc * s + c * ds)
    ratio = 1 + n / m
    inv = torch.log(ratio) / (2 * s)
    dinv = ((dn * m - n * dm) / (m * m * ratio) - 2 * inv * ds) / (2 * s)
    poly = p * (dq0 + 0.5 * dq1 * p)
    return _DBAR_TO_PA * (poly + df * log_num + f * dlog_num + de * inv + e * dinv)


def _create_equation_of_state_closed_form(ctx: BuildContext) -> Workload:
    inputs = tuple(t.to(ctx.device) for t in torchbench_inputs(problem_points(ctx), meta=ctx.device.type == "meta"))
    return Workload(ctx, EquationOfState(gsw_dhdct_closed_form), inputs)


@register_model(
    source="pyhpc-benchmarks equation_of_state (Veros gsw_dHdT, TEOS-10 48-term), closed-form derivation", **PYHPC_SPEC
)
def pyhpc_equation_of_state_closed_form(ctx: BuildContext, **kwargs) -> Workload:
    """TEOS-10 48-term dh/dCT in closed form (fewer operations than TorchBench's) on TorchBench's inputs."""
    return _create_equation_of_state_closed_form(ctx, **kwargs)
