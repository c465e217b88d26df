"""Synthetic point clouds and rigid transforms shared by the point-cloud models.

ModelNet40 as the references load it (the ``modelnet40_ply_hdf5_2048`` files of DGCNN and DCP,
and PointNet++'s ``pc_normalize``) is centred on its centroid and scaled into the unit sphere;
:func:`unit_sphere_clouds` makes seeded Gaussian clouds with the same normalization. DCP's
data loader rotates a cloud by Euler angles (``Rx @ Ry @ Rz``); :func:`euler_to_rotation`
builds those matrices.
"""

from __future__ import annotations

import torch

from torchgauge.workload import BuildContext

__all__ = ["euler_to_rotation", "unit_sphere_clouds"]


def unit_sphere_clouds(ctx: BuildContext, batch: int, points: int) -> torch.Tensor:
    """``(B, N, 3)`` seeded clouds, each centred on its centroid and scaled to max radius 1."""
    xyz = ctx.randn(batch, points, 3)
    xyz = xyz - xyz.mean(dim=1, keepdim=True)
    return xyz / xyz.norm(dim=-1).amax(dim=1).view(batch, 1, 1)


def euler_to_rotation(angles: torch.Tensor) -> torch.Tensor:
    """``(B, 3)`` angles ``(x, y, z)`` in radians -> ``(B, 3, 3)`` rotations ``Rx @ Ry @ Rz``.

    DCP's ModelNet40 loader builds ``R_ab`` this way (equal to scipy's extrinsic ``'zyx'`` Euler
    rotation with angles ``(z, y, x)``, which it uses to move the points).
    """
    cos, sin = angles.cos(), angles.sin()
    one, zero = torch.ones_like(cos[:, 0]), torch.zeros_like(cos[:, 0])

    def mat(*rows: torch.Tensor) -> torch.Tensor:
        return torch.stack(rows, dim=-1).view(-1, 3, 3)

    cx, cy, cz = cos.unbind(-1)
    sx, sy, sz = sin.unbind(-1)
    rx = mat(one, zero, zero, zero, cx, -sx, zero, sx, cx)
    ry = mat(cy, zero, sy, zero, one, zero, -sy, zero, cy)
    rz = mat(cz, -sz, zero, sz, cz, zero, zero, zero, one)
    return rx @ ry @ rz
