"""Building blocks of the generation / image-to-image / volumetric models, on hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.vision.generation.cyclegan import ImagePool, PatchDiscriminator
from torchgauge.models.vision.generation.dice import soft_dice
from torchgauge.models.vision.generation.diffusion_unet import DDPM, DiffusionUNetConfig, timestep_embedding
from torchgauge.models.vision.generation.stargan import StarGANConfig, StarGANDiscriminator, gradient_penalty
from torchgauge.models.vision.generation.super_slomo import backward_warp
from torchgauge.models.vision.generation.unet import UNet
from torchgauge.models.vision.generation.unet3d import dice_ce_loss


# -- backward warping (Super SloMo) ---------------------------------------------------------------
def test_backward_warp_zero_flow_is_identity() -> None:
    image = torch.rand(2, 3, 5, 7)
    out = backward_warp(image, torch.zeros(2, 2, 5, 7))
    torch.testing.assert_close(out, image)


def test_backward_warp_integer_flow_shifts_and_zero_pads() -> None:
    image = torch.arange(12.0).view(1, 1, 3, 4)
    flow = torch.zeros(1, 2, 3, 4)
    flow[:, 0] = 1.0  # every pixel p reads image[p + (1, 0)]: a shift left by one column
    out = backward_warp(image, flow)
    expected = torch.tensor([[1.0, 2.0, 3.0, 0.0], [5.0, 6.0, 7.0, 0.0], [9.0, 10.0, 11.0, 0.0]])
    torch.testing.assert_close(out[0, 0], expected)


def test_backward_warp_half_pixel_flow_interpolates() -> None:
    image = torch.tensor([[[[0.0, 2.0, 4.0]]]])  # (1, 1, 1, 3)
    flow = torch.zeros(1, 2, 1, 3)
    flow[:, 0] = 0.5
    out = backward_warp(image, flow)
    # x + 0.5 between neighbours is their mean; past the last pixel half of it is zero padding.
    torch.testing.assert_close(out[0, 0, 0], torch.tensor([1.0, 3.0, 2.0]))


# -- timestep embedding and the DDPM schedule -------------------------------------------------------
def test_timestep_embedding_shape_and_values() -> None:
    t = torch.tensor([0, 1, 999])
    emb = timestep_embedding(t, 128)
    assert emb.shape == (3, 128)
    torch.testing.assert_close(emb[0, :64], torch.zeros(64))  # sin(0)
    torch.testing.assert_close(emb[0, 64:], torch.ones(64))  # cos(0)
    # The first frequency is 1: t=1 gives sin(1), cos(1); the last is 1/10000.
    assert emb[1, 0].item() == pytest.approx(math.sin(1.0))
    assert emb[1, 64].item() == pytest.approx(math.cos(1.0))
    assert emb[2, 63].item() == pytest.approx(math.sin(999 / 10000), rel=1e-5)


def test_timestep_embedding_odd_dim_is_zero_padded() -> None:
    emb = timestep_embedding(torch.tensor([5]), 7)
    assert emb.shape == (1, 7)
    assert emb[0, -1].item() == 0.0


def test_ddpm_q_sample_matches_closed_form() -> None:
    ddpm = DDPM(DiffusionUNetConfig(ch=32, ch_mult=(1, 1), num_res_blocks=1))
    x0, noise, t = torch.ones(1, 3, 2, 2), torch.full((1, 3, 2, 2), 2.0), torch.tensor([0])
    abar0 = 1 - 1e-4  # alpha-bar at t=0 is 1 - beta_start
    expected = math.sqrt(abar0) * 1.0 + math.sqrt(1 - abar0) * 2.0
    torch.testing.assert_close(ddpm.q_sample(x0, t, noise), torch.full((1, 3, 2, 2), expected))


def test_ddpm_p_sample_adds_no_noise_at_t0() -> None:
    ddpm = DDPM(DiffusionUNetConfig(ch=32, ch_mult=(1, 1), num_res_blocks=1)).eval()
    x_t, t = torch.randn(1, 3, 4, 4), torch.tensor([0])
    with torch.no_grad():
        a = ddpm.p_sample(x_t, t, torch.zeros_like(x_t))
        b = ddpm.p_sample(x_t, t, torch.randn_like(x_t))
    torch.testing.assert_close(a, b)


# -- Dice losses (Pytorch-UNet, MLPerf 3D U-Net) -----------------------------------------------------
def test_soft_dice_hand_computed() -> None:
    target = torch.tensor([1.0, 0.0, 1.0, 0.0])
    assert soft_dice(target, target, dims=(0,)).item() == pytest.approx(1.0)
    assert soft_dice(1 - target, target, dims=(0,)).item() == pytest.approx(0.0, abs=1e-6)
    # 2 * 0.5 / (2 + 2) with p = 0.5 everywhere
    assert soft_dice(torch.full((4,), 0.5), target, dims=(0,)).item() == pytest.approx(0.5)


def test_dice_ce_loss_perfect_prediction_is_zero() -> None:
    labels = torch.randint(0, 3, (2, 1, 4, 4, 4), generator=torch.Generator().manual_seed(0))
    labels[:, :, 0, 0, :3] = torch.tensor([0, 1, 2])  # every class present in every image
    logits = torch.nn.functional.one_hot(labels.squeeze(1), 3).movedim(-1, 1).float() * 100.0
    assert dice_ce_loss(logits, labels).item() == pytest.approx(0.0, abs=1e-5)


def test_dice_ce_loss_uniform_prediction() -> None:
    labels = torch.zeros(1, 1, 2, 2, 2, dtype=torch.long)
    labels[0, 0, 0] = 1  # half the voxels class 1, none class 2
    loss = dice_ce_loss(torch.zeros(1, 3, 2, 2, 2), labels)
    dice1 = 2 * (4 / 3) / (8 / 3 + 4)  # p = 1/3 on 8 voxels, 4 of them class 1
    dice2 = 1e-6 / (8 / 3 + 1e-6)  # absent class: nearly zero
    expected = ((1 - dice1 + 1 - dice2) / 2 + math.log(3)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-5)


# -- shapes of the image-to-image networks --------------------------------------------------------
def test_unet_keeps_odd_spatial_size() -> None:
    out = UNet(3, 2).eval()(torch.rand(1, 3, 32, 33))  # 33 -> 16 -> 8 -> 4 -> 2, padded back up
    assert out.shape == (1, 2, 32, 33)


def test_patch_discriminator_scores_30x30_patches_at_256() -> None:
    disc = PatchDiscriminator(6, filters=4, n_layers=3)  # narrow: the output grid ignores width
    out = disc(torch.rand(1, 6, 256, 256))
    assert out.shape == (1, 1, 30, 30)  # 256 -> 128 -> 64 -> 32 -> 31 -> 30, one logit per 70x70 patch


def test_stargan_discriminator_heads() -> None:
    cfg = StarGANConfig(disc_filters=2)
    src, cls = StarGANDiscriminator(cfg)(torch.rand(3, 3, 128, 128))
    assert src.shape == (3, 1, 2, 2) and cls.shape == (3, 5)


def test_gradient_penalty_of_linear_critic() -> None:
    w = torch.tensor([3.0, 4.0])  # critic(x) = w . x has gradient w everywhere, norm 5
    x_hat = torch.rand(2, 2, requires_grad=True)
    assert gradient_penalty(x_hat @ w, x_hat).item() == pytest.approx((5 - 1) ** 2)


# -- training schedules of the TorchBench GANs --------------------------------------------------------
@pytest.mark.parametrize("iteration,g_steps", [(0, False), (4, True)])
def test_stargan_updates_the_generator_every_n_critic_iterations(iteration: int, g_steps: bool) -> None:
    # TorchBench's train() is solver iteration 0: D only; G steps when (i + 1) % n_critic == 0.
    w = torchgauge.create("pytorch_stargan", mode="train", size="smoke", iteration=iteration)
    g_before = [p.detach().clone() for p in w.generator.parameters()]
    d_before = [p.detach().clone() for p in w.discriminator.parameters()]
    w.step()
    assert any(not torch.equal(a, b) for a, b in zip(d_before, w.discriminator.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(g_before, w.generator.parameters())) == g_steps


def test_image_pool_passes_fakes_until_full_then_swaps_half() -> None:
    pool = ImagePool(2, torch.Generator().manual_seed(0))
    first, second = torch.zeros(1, 3, 2, 2), torch.ones(1, 3, 2, 2)
    assert torch.equal(pool.query(first), first) and torch.equal(pool.query(second), second)
    outs = [pool.query(torch.full((1, 3, 2, 2), 2.0)) for _ in range(40)]
    swapped = sum(float(o.max()) < 2 for o in outs)
    assert 0 < swapped < 40  # some fakes come back from the history, some pass through
    assert len(pool.images) == 2


def test_cyclegan_step_updates_both_generators_and_discriminators() -> None:
    w = torchgauge.create("pytorch_CycleGAN_and_pix2pix", mode="train", size="smoke")
    nets = ("g_a", "g_b", "d_a", "d_b")
    before = {n: [p.detach().clone() for p in getattr(w.module, n).parameters()] for n in nets}
    w.step()
    for n in nets:
        assert any(not torch.equal(a, b) for a, b in zip(before[n], getattr(w.module, n).parameters())), n
