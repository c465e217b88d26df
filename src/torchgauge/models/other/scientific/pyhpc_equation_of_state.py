"""pyhpc equation of state: d/dCT of the dynamic enthalpy of seawater, one large elementwise kernel.

Reference: pyhpc-benchmarks ``equation_of_state`` (Dion Häfner, Unlicense), taken from the
Veros ocean model (MIT): ``gsw_dHdT`` of the computationally efficient 48-term expression
for density (IOC, SCOR and IAPSO, TEOS-10 manual, 2010; McDougall et al. 2003), as
TorchBench times it (``pyhpc_equation_of_state/eos_pytorch.py``).

The specific volume of the 48-term expression is a ratio ``Den(p) / Num(p)`` of a cubic and a
quadratic in pressure, whose coefficients are polynomials in SA (with SA^1.5) and CT. Dynamic
enthalpy is ``1e4 * integral_0^p v dp'``; its exact integral is a polynomial, a logarithm and
an inverse-hyperbolic (logarithm of a ratio) term, and dh/dCT differentiates all three. The
reference writes that derivative as Maple output: about a hundred named subexpressions
``t1 .. t305`` (Maple's numbering) that reuse one another. :func:`gsw_dhdct` evaluates them in
the same order with the same operations, so the kernel launches, temporaries and memory traffic
are TorchBench's; ``pyhpc_equation_of_state_closed_form`` derives the same quantity with fewer
operations. Inputs are TorchBench's, bit for bit: float64 uniform draws after
``np.random.seed(17)`` (reproduced without numpy by :class:`~.ocean_grid.NumpyLegacyStream`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .ocean_grid import PYHPC_INPUT_SEED, PYHPC_SPEC, NumpyLegacyStream, grid_shape, problem_points

__all__ = ["DENSITY_48_TERM", "EquationOfState", "gsw_dhdct", "torchbench_inputs"]

# v01..v48 of the 48-term density expression (TEOS-10), keyed by their published index.
DENSITY_48_TERM = {
    1: 9.998420897506056e2,
    2: 2.839940833161907e0,
    3: -3.147759265588511e-2,
    4: 1.181805545074306e-3,
    5: -6.698001071123802e0,
    6: -2.986498947203215e-2,
    7: 2.327859407479162e-4,
    8: -3.988822378968490e-2,
    9: 5.095422573880500e-4,
    10: -1.426984671633621e-5,
    11: 1.645039373682922e-7,
    12: -2.233269627352527e-2,
    13: -3.436090079851880e-4,
    14: 3.726050720345733e-6,
    15: -1.806789763745328e-4,
    16: 6.876837219536232e-7,
    17: -3.087032500374211e-7,
    18: -1.988366587925593e-8,
    19: -1.061519070296458e-11,
    20: 1.550932729220080e-10,
    21: 1.0e0,
    22: 2.775927747785646e-3,
    23: -2.349607444135925e-5,
    24: 1.119513357486743e-6,
    25: 6.743689325042773e-10,
    26: -7.521448093615448e-3,
    27: -2.764306979894411e-5,
    28: 1.262937315098546e-7,
    29: 9.527875081696435e-10,
    30: -1.811147201949891e-11,
    31: -3.303308871386421e-5,
    32: 3.801564588876298e-7,
    33: -7.672876869259043e-9,
    34: -4.634182341116144e-11,
    35: 2.681097235569143e-12,
    36: 5.419326551148740e-6,
    37: -2.742185394906099e-5,
    38: -3.212746477974189e-7,
    39: 3.191413910561627e-9,
    40: -1.931012931541776e-12,
    41: -1.105097577149576e-7,
    42: 6.211426728363857e-10,
    43: -1.119011592875110e-10,
    44: -1.941660213148725e-11,
    45: -1.864826425365600e-14,
    46: 1.119522344879478e-14,
    47: -1.200507748551599e-15,
    48: 6.057902487546866e-17,
}


def gsw_dhdct(sa: torch.Tensor, ct: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """d/dCT of dynamic enthalpy [J/(kg K)] in the Maple-generated form TorchBench times.

    Args:
        sa: Absolute Salinity [g/kg], ``(nx, ny, nz)``.
        ct: Conservative Temperature [degC], ``(nx, ny, nz)``.
        p: sea pressure [dbar], broadcastable, e.g. ``(1, 1, nz)``.
    """
    v = DENSITY_48_TERM
    t1 = v[45] * ct
    t2 = 0.2e1 * t1
    t3 = v[46] * sa
    t4 = 0.5 * v[12]
    t5 = v[14] * ct
    t7 = ct * (v[13] + t5)
    t8 = 0.5 * t7
    t11 = sa * (v[15] + v[16] * ct)
    t12 = 0.5 * t11
    t13 = t4 + t8 + t12
    t15 = v[19] * ct
    t19 = v[17] + ct * (v[18] + t15) + v[20] * sa
    t20 = 1.0 / t19
    t24 = v[47] + v[48] * ct
    t25 = 0.5 * v[13]
    t26 = 1.0 * t5
    t27 = sa * v[16]
    t28 = 0.5 * t27
    t29 = t25 + t26 + t28
    t33 = t24 * t13
    t34 = t19**2
    t35 = 1.0 / t34
    t37 = v[18] + 2.0 * t15
    t38 = t35 * t37
    t48 = ct * (v[44] + t1 + t3)
    t57 = v[40] * ct
    t59 = ct * (v[39] + t57)
    t64 = t13**2
    t68 = t20 * t29
    t71 = t24 * t64
    t74 = v[4] * ct
    t76 = ct * (v[3] + t74)
    t79 = v[7] * ct
    t82 = torch.sqrt(sa)
    t83 = v[11] * ct
    t85 = ct * (v[10] + t83)
    t92 = v[1] + ct * (v[2] + t76) + sa * (v[5] + ct * (v[6] + t79) + t82 * (v[8] + ct * (v[9] + t85)))
    t93 = v[48] * t92
    t105 = (
        v[2] + t76 + ct * (v[3] + 2.0 * t74) + sa * (v[6] + 2.0 * t79 + t82 * (v[9] + t85 + ct * (v[10] + 2.0 * t83)))
    )
    t106 = t24 * t105
    t107 = v[44] + t2 + t3
    t110 = v[43] + t48
    t117 = t24 * t92
    t120 = 4.0 * t71 * t20 - t117 - 2.0 * t110 * t13
    t123 = (
        v[38]
        + t59
        + ct * (v[39] + 2.0 * t57)
        + sa * v[42]
        + (
            4.0 * v[48] * t64 * t20
            + 8.0 * t33 * t68
            - 4.0 * t71 * t38
            - t93
            - t106
            - 2.0 * t107 * t13
            - 2.0 * t110 * t29
        )
        * t20
        - t120 * t35 * t37
    )
    t128 = t19 * p
    t130 = p * (1.0 * v[12] + 1.0 * t7 + 1.0 * t11 + t128)
    t131 = 1.0 / t92
    t133 = 1.0 + t130 * t131
    t134 = torch.log(t133)
    t143 = v[37] + ct * (v[38] + t59) + sa * (v[41] + v[42] * ct) + t120 * t20
    t152 = t37 * p
    t156 = t92**2
    t165 = v[25] * ct
    t167 = ct * (v[24] + t165)
    t169 = ct * (v[23] + t167)
    t175 = v[30] * ct
    t177 = ct * (v[29] + t175)
    t179 = ct * (v[28] + t177)
    t185 = v[35] * ct
    t187 = ct * (v[34] + t185)
    t189 = ct * (v[33] + t187)
    t199 = t13 * t20
    t217 = 2.0 * t117 * t199 - t110 * t92
    t234 = (
        v[21]
        + ct * (v[22] + t169)
        + sa * (v[26] + ct * (v[27] + t179) + v[36] * sa + t82 * (v[31] + ct * (v[32] + t189)))
        + t217 * t20
    )
    t241 = t64 - t92 * t19
    t242 = torch.sqrt(t241)
    t243 = 1.0 / t242
    t244 = t4 + t8 + t12 - t242
    t245 = 1.0 / t244
    t247 = t4 + t8 + t12 + t242 + t128
    t248 = 1.0 / t247
    t249 = t242 * t245 * t248
    t252 = 1.0 + 2.0 * t128 * t249
    t253 = torch.log(t252)
    t254 = t243 * t253
    t259 = t234 * t19 - t143 * t13
    t264 = t259 * t20
    t272 = 2.0 * t13 * t29 - t105 * t19 - t92 * t37
    t282 = t128 * t242
    t283 = t244**2
    t287 = t243 * t272 / 2.0
    t292 = t247**2
    t305 = (
        0.1e5
        * p
        * (v[44] + t2 + t3 - 2.0 * v[48] * t13 * t20 - 2.0 * t24 * t29 * t20 + 2.0 * t33 * t38 + 0.5 * v[48] * p)
        * t20
        - 0.1e5 * p * (v[43] + t48 - 2.0 * t33 * t20 + 0.5 * t24 * p) * t38
        + 0.5e4 * t123 * t20 * t134
        - 0.5e4 * t143 * t35 * t134 * t37
        + 0.5e4 * t143 * t20 * (p * (1.0 * v[13] + 2.0 * t5 + 1.0 * t27 + t152) * t131 - t130 / t156 * t105) / t133
        + 0.5e4
        * (
            (
                v[22]
                + t169
                + ct * (v[23] + t167 + ct * (v[24] + 2.0 * t165))
                + sa
                * (
                    v[27]
                    + t179
                    + ct * (v[28] + t177 + ct * (v[29] + 2.0 * t175))
                    + t82 * (v[32] + t189 + ct * (v[33] + t187 + ct * (v[34] + 2.0 * t185)))
                )
                + (
                    2.0 * t93 * t199
                    + 2.0 * t106 * t199
                    + 2.0 * t117 * t68
                    - 2.0 * t117 * t13 * t35 * t37
                    - t107 * t92
                    - t110 * t105
                )
                * t20
                - t217 * t35 * t37
            )
            * t19
            + t234 * t37
            - t123 * t13
            - t143 * t29
        )
        * t20
        * t254
        - 0.5e4 * t259 * t35 * t254 * t37
        - 0.25e4 * t264 / t242 / t241 * t253 * t272
        + 0.5e4
        * t264
        * t243
        * (
            2.0 * t152 * t249
            + t128 * t243 * t245 * t248 * t272
            - 2.0 * t282 / t283 * t248 * (t25 + t26 + t28 - t287)
            - 2.0 * t282 * t245 / t292 * (t25 + t26 + t28 + t287 + t152)
        )
        / t252
    )

    return t305


class EquationOfState(nn.Module):
    """``(sa, ct, p)`` -> dh/dCT ``(nx, ny, nz)`` through ``dhdct``; no parameters."""

    def __init__(self, dhdct: Callable[..., torch.Tensor] = gsw_dhdct) -> None:
        super().__init__()
        self.dhdct = dhdct

    def forward(self, sa: torch.Tensor, ct: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return self.dhdct(sa, ct, p)


def torchbench_inputs(points: int, *, meta: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TorchBench's ``(sa, ct, p)`` for ``points`` grid points: ``np.random.seed(17)``, then uniform draws.

    With ``meta``, meta tensors of the same shapes and dtypes, nothing drawn.
    """
    nx, ny, nz = grid_shape(points)
    stream = NumpyLegacyStream(PYHPC_INPUT_SEED, meta=meta)
    sa = stream.uniform(1e-2, 10, (nx, ny, nz))  # [g/kg]
    ct = stream.uniform(-12, 20, (nx, ny, nz))  # [degC]
    p = stream.uniform(0, 1000, (1, 1, nz))  # [dbar], one pressure per level
    return sa, ct, p


def _create_equation_of_state(ctx: BuildContext) -> Workload:
    inputs = tuple(t.to(ctx.device) for t in torchbench_inputs(problem_points(ctx), meta=ctx.device.type == "meta"))
    return Workload(ctx, EquationOfState(), inputs)


@register_model(source="pyhpc-benchmarks equation_of_state (Veros gsw_dHdT, TEOS-10 48-term)", **PYHPC_SPEC)
def pyhpc_equation_of_state(ctx: BuildContext, **kwargs) -> Workload:
    """TEOS-10 48-term dh/dCT in TorchBench's Maple form on a 204x204x26 float64 grid (2**20 points)."""
    return _create_equation_of_state(ctx, **kwargs)
