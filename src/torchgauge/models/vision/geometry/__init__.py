"""3-D vision: point-cloud networks and neural rendering.

- :mod:`.pointnet2`: ``pointnet2_ssg_cls``, PointNet++ SSG classification (ModelNet40).
- :mod:`.dgcnn`: ``dgcnn_cls``, dynamic-graph CNN classification (ModelNet40).
- :mod:`.deep_closest_point`: ``deep_closest_point``, DCP-v2 rigid registration of cloud pairs.
- :mod:`.nerf`: ``nerf``, neural radiance fields with hierarchical volume rendering.

:mod:`.clouds` holds the shared synthetic clouds and Euler rotations.
"""

from . import deep_closest_point, dgcnn, nerf, pointnet2  # noqa: F401  (registers models)
