"""3-D vision models (PointNet++, DGCNN, DCP, NeRF): their geometric pieces against known answers."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

import torchgauge
from torchgauge.models.vision.geometry.clouds import euler_to_rotation
from torchgauge.models.vision.geometry.deep_closest_point import DCPConfig, SVDHead, dcp_loss, rigid_pairs
from torchgauge.models.vision.geometry.dgcnn import (
    DGCNNClassifier,
    DGCNNConfig,
    get_graph_feature,
    knn,
    smoothed_cross_entropy,
)
from torchgauge.models.vision.geometry.nerf import (
    NeRFConfig,
    NeRFMLP,
    PositionalEncoding,
    camera_rays,
    raw2outputs,
    sample_pdf,
)
from torchgauge.models.vision.geometry.pointnet2 import (
    ball_query,
    farthest_point_sample,
    index_points,
    square_distance,
)
from torchgauge.workload import BuildContext

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- PointNet++ ---------------------------------------------------------------------------------------
def _slow_fps(points: list[list[float]], start: int, npoint: int) -> list[int]:
    """Farthest point sampling by the definition: repeatedly the point farthest from the chosen set."""
    chosen, nearest = [start], [math.inf] * len(points)
    for _ in range(npoint - 1):
        last = points[chosen[-1]]
        for i, p in enumerate(points):
            nearest[i] = min(nearest[i], sum((a - b) ** 2 for a, b in zip(p, last)))
        chosen.append(max(range(len(points)), key=lambda i: nearest[i]))
    return chosen


def test_farthest_point_sample_matches_the_definition() -> None:
    xyz = torch.randn(3, 60, 3, generator=_gen(0), dtype=F64)
    torch.manual_seed(1)  # the first point is drawn at random, as in the reference
    idx = farthest_point_sample(xyz, 12)
    for b in range(3):
        expected = _slow_fps(xyz[b].tolist(), int(idx[b, 0]), 12)
        assert idx[b].tolist() == expected


def test_farthest_point_sample_finds_every_cluster_first() -> None:
    # 5 tight clusters far apart: the first 5 samples must land in 5 different clusters
    centres = torch.tensor([[0, 0, 0], [10, 0, 0], [0, 10, 0], [0, 0, 10], [10, 10, 10]], dtype=F64)
    xyz = (centres[:, None, :] + 0.01 * torch.randn(5, 8, 3, generator=_gen(2), dtype=F64)).reshape(1, 40, 3)
    idx = farthest_point_sample(xyz, 5)
    assert sorted((idx[0] // 8).tolist()) == [0, 1, 2, 3, 4]


def test_square_distance_and_index_points() -> None:
    a = torch.randn(2, 7, 3, generator=_gen(3), dtype=F64)
    b = torch.randn(2, 5, 3, generator=_gen(4), dtype=F64)
    torch.testing.assert_close(square_distance(a, b), torch.cdist(a, b) ** 2)
    idx = torch.randint(0, 7, (2, 4, 3), generator=_gen(5))
    out = index_points(a, idx)
    assert out.shape == (2, 4, 3, 3)
    for bi in range(2):
        torch.testing.assert_close(out[bi], a[bi][idx[bi]])


def test_ball_query_matches_a_slow_reference() -> None:
    radius, nsample = 0.6, 6
    xyz = torch.rand(2, 50, 3, generator=_gen(6), dtype=F64)
    new_xyz = xyz[:, :9]  # centroids are cloud points, so no ball is empty
    idx = ball_query(radius, nsample, xyz, new_xyz)
    for b in range(2):
        for s in range(9):
            inside = [i for i in range(50) if float(((xyz[b, i] - new_xyz[b, s]) ** 2).sum()) <= radius**2]
            expected = (inside[:nsample] + [inside[0]] * nsample)[:nsample]  # short groups repeat the first
            assert idx[b, s].tolist() == expected
    dist = ((index_points(xyz, idx) - new_xyz[:, :, None]) ** 2).sum(-1)
    assert (dist <= radius**2 + 1e-12).all()


# -- DGCNN --------------------------------------------------------------------------------------------
def test_knn_matches_brute_force_sort() -> None:
    x = torch.randn(2, 5, 40, generator=_gen(7), dtype=F64)  # 5-d features
    idx = knn(x, 6)
    pts = x.transpose(1, 2)
    expected = torch.cdist(pts, pts).argsort(dim=-1)[..., :6]
    assert torch.equal(idx.sort(-1)[0], expected.sort(-1)[0])
    assert torch.equal(idx[..., 0], torch.arange(40).expand(2, 40))  # each point is its own nearest


def test_graph_feature_edges() -> None:
    x = torch.randn(2, 3, 30, generator=_gen(8), dtype=F64)
    idx = knn(x, 4)
    rel = get_graph_feature(x, 4)  # (B, 6, N, k)
    absolute = get_graph_feature(x, 4, relative=False)
    assert rel.shape == (2, 6, 30, 4)
    for b in range(2):
        for n in (0, 17):
            for j in range(4):
                neighbour, centre = x[b, :, idx[b, n, j]], x[b, :, n]
                torch.testing.assert_close(rel[b, :, n, j], torch.cat([neighbour - centre, centre]))
                torch.testing.assert_close(absolute[b, :, n, j], torch.cat([neighbour, centre]))


def test_smoothed_cross_entropy_is_torch_label_smoothing_rescaled() -> None:
    # reference: true class 0.8, others 0.2 / (K - 1); torch: (1 - e) one-hot + e / K, so e = 0.2 K / (K - 1)
    logits = torch.randn(6, 40, generator=_gen(9), dtype=F64)
    labels = torch.randint(0, 40, (6,), generator=_gen(10))
    expected = F.cross_entropy(logits, labels, label_smoothing=0.2 * 40 / 39)
    torch.testing.assert_close(smoothed_cross_entropy(logits, labels), expected)


def test_dgcnn_is_invariant_to_point_order() -> None:
    torch.manual_seed(0)
    model = DGCNNClassifier(DGCNNConfig(k=5, edge_widths=(8, 8, 16, 16), emb_dims=32, head=(16, 8))).double().eval()
    x = torch.randn(2, 3, 24, generator=_gen(11), dtype=F64)
    perm = torch.randperm(24, generator=_gen(12))
    with torch.no_grad():
        torch.testing.assert_close(model(x[:, :, perm]), model(x))


def test_dgcnn_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("dgcnn_cls", mode="train", size="smoke", batch_size=4)
    first = float(w.step())
    for _ in range(8):
        last = float(w.step())
    assert last < 0.9 * first  # label smoothing and dropout 0.5 keep it well above 0


# -- Deep Closest Point --------------------------------------------------------------------------------
def test_euler_rotation_is_rx_ry_rz() -> None:
    quarter = math.pi / 2
    r = euler_to_rotation(torch.tensor([[quarter, 0, 0], [0, quarter, 0], [0, 0, quarter]], dtype=F64))
    e = torch.eye(3, dtype=F64)
    torch.testing.assert_close(r[0] @ e[1], e[2])  # about x: y -> z
    torch.testing.assert_close(r[1] @ e[2], e[0])  # about y: z -> x
    torch.testing.assert_close(r[2] @ e[0], e[1])  # about z: x -> y
    angles = torch.rand(5, 3, generator=_gen(13), dtype=F64) * 3
    full = euler_to_rotation(angles)
    zero = torch.zeros(5, dtype=F64)
    rx = euler_to_rotation(torch.stack([angles[:, 0], zero, zero], -1))
    ry = euler_to_rotation(torch.stack([zero, angles[:, 1], zero], -1))
    rz = euler_to_rotation(torch.stack([zero, zero, angles[:, 2]], -1))
    torch.testing.assert_close(full, rx @ ry @ rz)
    torch.testing.assert_close(full @ full.mT, torch.eye(3, dtype=F64).expand(5, 3, 3))


def test_svd_head_recovers_a_rigid_transform_from_exact_correspondences() -> None:
    head = SVDHead().double()
    src = torch.randn(4, 3, 25, generator=_gen(14), dtype=F64)
    rotation = euler_to_rotation(torch.rand(4, 3, generator=_gen(15), dtype=F64) * 2 * math.pi)
    translation = torch.randn(4, 3, generator=_gen(16), dtype=F64)
    r, t = head.procrustes(src, rotation @ src + translation[..., None])
    torch.testing.assert_close(r, rotation)
    torch.testing.assert_close(t, translation)


def test_svd_head_reflection_fix_on_planar_clouds() -> None:
    # coplanar points: H has a zero singular value whose singular vectors' signs are arbitrary, so
    # V U^T is a reflection about half the time; the fix must still return the rotation
    head, reflections = SVDHead().double(), 0
    for seed in range(10):
        src = torch.randn(1, 3, 20, generator=_gen(100 + seed), dtype=F64)
        src[:, 2] = 0
        rotation = euler_to_rotation(torch.rand(1, 3, generator=_gen(200 + seed), dtype=F64) * 3)
        corr = rotation @ src
        h = (src - src.mean(2, keepdim=True)) @ (corr - corr.mean(2, keepdim=True)).mT
        u, _, vh = torch.linalg.svd(h[0])
        reflections += bool(torch.linalg.det(vh.mT @ u.mT) < 0)
        r, _ = head.procrustes(src, corr)
        torch.testing.assert_close(r, rotation)
    assert reflections > 0, "no case exercised the reflection branch"


def test_svd_head_with_sharp_matching_embeddings_recovers_the_transform() -> None:
    # embeddings = scaled one-hot point ids: the softmax correspondences become the true permutation
    n = 16
    src = torch.randn(2, 3, n, generator=_gen(17), dtype=F64)
    rotation = euler_to_rotation(torch.rand(2, 3, generator=_gen(18), dtype=F64))
    translation = torch.randn(2, 3, generator=_gen(19), dtype=F64)
    perm = torch.randperm(n, generator=_gen(20))
    tgt = (rotation @ src + translation[..., None])[:, :, perm]
    src_emb = 200.0 * torch.eye(n, dtype=F64).expand(2, n, n)  # (B, d = n, N)
    tgt_emb = src_emb[:, :, perm]
    r, t = SVDHead().double()(src_emb, tgt_emb, src, tgt)
    torch.testing.assert_close(r, rotation)
    torch.testing.assert_close(t, translation)


def test_dcp_loss_is_zero_for_the_true_transform_and_rigid_pairs_are_rigid() -> None:
    ctx = BuildContext("deep_closest_point", "train", torch.device("cpu"), 3, "smoke")
    cfg = DCPConfig(num_points=50)
    src, tgt, rotation, translation = rigid_pairs(ctx, 3, cfg)
    # point order is shuffled, but centroids and the spread of the clouds are order-free
    torch.testing.assert_close(tgt.mean(2), (rotation @ src.mean(2, keepdim=True)).squeeze(2) + translation)
    torch.testing.assert_close(
        torch.linalg.svdvals(src - src.mean(2, keepdim=True)),
        torch.linalg.svdvals(tgt - tgt.mean(2, keepdim=True)),
        rtol=1e-4,
        atol=1e-5,
    )
    r_ba = rotation.mT
    t_ba = -(r_ba @ translation[..., None]).squeeze(2)
    loss = dcp_loss((rotation, translation, r_ba, t_ba), (rotation, translation), cycle=False)
    torch.testing.assert_close(loss, torch.tensor(0.0), atol=1e-10, rtol=0)
    # the reference's cycle translation term is mean((R_ba^T t_ab + t_ba)^2): at the truth R t - R^T t, not 0
    quirk = ((rotation @ translation[..., None]).squeeze(2) + t_ba).pow(2).mean()
    loss = dcp_loss((rotation, translation, r_ba, t_ba), (rotation, translation))
    torch.testing.assert_close(loss, 0.1 * quirk)
    wrong = dcp_loss((rotation, translation + 0.1, r_ba, t_ba), (rotation, translation), cycle=False)
    torch.testing.assert_close(wrong, torch.tensor(0.01))


# -- NeRF ---------------------------------------------------------------------------------------------
def test_positional_encoding_by_hand() -> None:
    enc = PositionalEncoding(3)
    x = torch.tensor([[0.3, -1.0, 2.0]], dtype=F64)
    expected = [x]
    for freq in (1.0, 2.0, 4.0):
        expected += [torch.sin(freq * x), torch.cos(freq * x)]
    torch.testing.assert_close(enc(x), torch.cat(expected, -1))
    assert PositionalEncoding(10).out_dim == 63 and PositionalEncoding(4).out_dim == 27


def test_nerf_mlp_skip_and_parameter_count() -> None:
    mlp = NeRFMLP(8, 256, 63, 27, (4,))
    assert [layer.in_features for layer in mlp.pts_linears] == [63, 256, 256, 256, 256, 319, 256, 256]
    assert sum(p.numel() for p in mlp.parameters()) == 595_844


@pytest.mark.parametrize("sigma,scale", [(0.3, 1.0), (1.5, 1.0), (0.5, 2.5)])
def test_constant_medium_renders_the_closed_form(sigma: float, scale: float) -> None:
    # uniform density sigma between near and far: opacity up to the last sample is 1 - exp(-sigma L)
    near, far, samples = 2.0, 6.0, 257
    z_vals = torch.linspace(near, far, samples, dtype=F64).expand(4, samples)
    rays_d = scale * F.normalize(torch.randn(4, 3, generator=_gen(21), dtype=F64), dim=-1)
    colour = torch.tensor([0.2, 0.5, 0.9], dtype=F64)
    raw = torch.cat([torch.logit(colour).expand(4, samples, 3), torch.full((4, samples, 1), sigma, dtype=F64)], -1)
    rgb, _, acc, weights, depth = raw2outputs(raw, z_vals, rays_d)
    length = (far - near) * scale
    opacity = acc - weights[:, -1]  # the last interval is infinite and absorbs the rest
    torch.testing.assert_close(
        opacity, torch.full((4,), 1 - math.exp(-sigma * length), dtype=F64), rtol=1e-6, atol=1e-8
    )
    torch.testing.assert_close(acc, torch.ones(4, dtype=F64))
    torch.testing.assert_close(rgb, colour.expand(4, 3))
    # white background adds what is not absorbed: nothing here
    torch.testing.assert_close(raw2outputs(raw, z_vals, rays_d, white_bkgd=True)[0], rgb)
    # expected depth of the exponential first hit truncated at the last sample (discrete sum is exact here)
    step = (far - near) / (samples - 1)
    alpha = 1 - math.exp(-sigma * step * scale)
    expected = sum(alpha * (1 - alpha) ** i * (near + i * step) for i in range(samples - 1))
    expected += (1 - alpha) ** (samples - 1) * far
    assert float(depth[0]) == pytest.approx(expected, rel=1e-6)


def _slow_inverse_cdf(bins: list[float], weights: list[float], u: float) -> float:
    w = [x + 1e-5 for x in weights]
    total = sum(w)
    cdf = [0.0]
    for x in w:
        cdf.append(cdf[-1] + x / total)
    for i in range(len(w)):
        if u < cdf[i + 1] or i == len(w) - 1:
            return bins[i] + (u - cdf[i]) / (cdf[i + 1] - cdf[i]) * (bins[i + 1] - bins[i])
    raise AssertionError


def test_sample_pdf_is_the_inverse_cdf() -> None:
    bins = torch.sort(torch.rand(3, 9, generator=_gen(22), dtype=F64), -1)[0] * 4 + 2
    weights = torch.rand(3, 8, generator=_gen(23), dtype=F64) ** 3
    samples = sample_pdf(bins, weights, 11, det=True)
    u = torch.linspace(0, 1, 11, dtype=F64)
    for r in range(3):
        expected = [_slow_inverse_cdf(bins[r].tolist(), weights[r].tolist(), float(x)) for x in u]
        torch.testing.assert_close(samples[r], torch.tensor(expected, dtype=F64))
    assert (samples.diff(dim=-1) >= 0).all()  # monotone in u
    assert (samples >= bins[:, :1]).all() and (samples <= bins[:, -1:]).all()


def test_sample_pdf_uniform_weights_and_a_single_bin() -> None:
    bins = torch.linspace(2, 6, 9, dtype=F64).expand(2, 9)
    uniform = sample_pdf(bins, torch.ones(2, 8, dtype=F64), 5, det=True)
    torch.testing.assert_close(uniform, torch.linspace(2, 6, 5, dtype=F64).expand(2, 5))
    weights = torch.zeros(2, 8, dtype=F64)
    weights[:, 3] = 1.0  # all mass in [3.5, 4]
    torch.manual_seed(0)
    random = sample_pdf(bins, weights, 2000)
    inside = ((random >= 3.5) & (random <= 4.0)).double().mean()
    assert float(inside) > 0.99  # 1 - 7e-5 / (1 + 8e-5) of the mass, up to sampling noise


def test_camera_rays_look_through_the_image_plane_at_the_origin() -> None:
    cfg = NeRFConfig()
    ctx = BuildContext("nerf", "train", torch.device("cpu"), 64, "full")
    rays_o, rays_d = camera_rays(ctx, 64, cfg)
    torch.testing.assert_close(rays_o.norm(dim=-1), torch.full((64,), cfg.camera_radius))
    forward = -rays_o[0] / rays_o[0].norm()  # the optical axis points at the origin
    torch.testing.assert_close(rays_d @ forward, torch.ones(64))  # image plane at depth 1
    half_width = 0.5 * cfg.image_size / (0.5 * cfg.image_size / math.tan(0.5 * cfg.camera_angle_x))
    lateral = rays_d - (rays_d @ forward)[:, None] * forward
    assert (lateral.norm(dim=-1) <= half_width * math.sqrt(2) + 1e-5).all()
    # every ray passes within the frustum's reach of the scene: closest approach to the origin < 4 tan(fov)
    t = -(rays_o * rays_d).sum(-1) / (rays_d * rays_d).sum(-1)
    closest = (rays_o + t[:, None] * rays_d).norm(dim=-1)
    assert (closest < cfg.camera_radius * half_width * math.sqrt(2)).all()


def test_nerf_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("nerf", mode="train", size="smoke")
    first = float(w.step())
    for _ in range(15):
        last = float(w.step())
    assert last < 0.8 * first


def test_empty_ray_renders_background_with_finite_disparity() -> None:
    z_vals = torch.linspace(2.0, 6.0, 16, dtype=F64).expand(2, 16)
    raw = torch.cat([torch.zeros(2, 16, 3, dtype=F64), torch.full((2, 16, 1), -1.0, dtype=F64)], -1)  # relu -> 0
    rgb, disp, acc, _, _ = raw2outputs(raw, z_vals, torch.ones(2, 3, dtype=F64), white_bkgd=True)
    torch.testing.assert_close(acc, torch.zeros(2, dtype=F64))
    torch.testing.assert_close(rgb, torch.ones(2, 3, dtype=F64))  # all white background
    assert torch.isfinite(disp).all()
