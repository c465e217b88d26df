"""Latent-variable generative models (ProdLDA, VQ-VAE, DALL-E dVAE, SAGAN) against known answers."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

import torchgauge
from torchgauge.models.other.probabilistic.prodlda import (
    DOC_LENGTH,
    ProdLDA,
    ProdLDAConfig,
    negative_elbo,
    synthetic_documents,
)
from torchgauge.models.vision.generation.dalle_dvae import (
    DiscreteVAE,
    DVAEConfig,
    logit_laplace_nll,
    map_pixels,
    unmap_pixels,
)
from torchgauge.models.vision.generation.dalle_dvae import negative_elbo as dvae_negative_elbo
from torchgauge.models.vision.generation.sagan import SAGANConfig, SAGANDiscriminator, SAGANGenerator, SelfAttention
from torchgauge.models.vision.generation.vq_vae import VQVAE, VectorQuantizerEMA, VQVAEConfig
from torchgauge.workload import BuildContext

F64 = torch.float64


def _ctx(name: str, batch: int = 4) -> BuildContext:
    return BuildContext(name=name, mode="train", device=torch.device("cpu"), batch_size=batch, size="full")


# -- ProdLDA -----------------------------------------------------------------------------------------
def test_prodlda_negative_elbo_matches_hand_written_formulas() -> None:
    torch.manual_seed(0)
    model = ProdLDA(ProdLDAConfig(vocab_size=30, num_topics=4, hidden=8)).double()
    docs = torch.randint(0, 4, (5, 30)).to(F64)
    posterior, prior, probs = model(docs)
    mu, sigma = posterior.base_dist.loc, posterior.base_dist.scale
    # KL(N(mu, s^2) || N(0, 1)) = (s^2 + mu^2 - 1 - log s^2) / 2 per topic
    kl = 0.5 * (sigma**2 + mu**2 - 1 - 2 * sigma.log()).sum(-1)
    # multinomial: log n! - sum log x! + sum x log p, n = the document's own length
    log_lik = torch.lgamma(docs.sum(-1) + 1) - torch.lgamma(docs + 1).sum(-1) + (docs * probs.log()).sum(-1)
    torch.testing.assert_close(negative_elbo(posterior, prior, probs, docs), (kl - log_lik).sum())


def test_prodlda_inference_returns_distributions() -> None:
    torch.manual_seed(0)
    model = ProdLDA(ProdLDAConfig(vocab_size=50, num_topics=6, hidden=8)).eval()
    theta, probs = model.infer(torch.randint(0, 3, (3, 50)).float())
    torch.testing.assert_close(theta.sum(-1), torch.ones(3))
    torch.testing.assert_close(probs.sum(-1), torch.ones(3))
    assert (theta > 0).all() and theta.shape == (3, 6) and probs.shape == (3, 50)


def test_prodlda_synthetic_documents_are_seeded_counts_of_the_right_length() -> None:
    docs = synthetic_documents(_ctx("prodlda", 64), 64, 200)
    lengths = docs.sum(-1)
    assert docs.shape == (64, 200) and torch.equal(docs, docs.round()) and (docs >= 0).all()
    assert DOC_LENGTH[0] <= lengths.min() and lengths.max() <= DOC_LENGTH[1]
    assert lengths.unique().numel() > 10  # lengths vary across documents
    torch.testing.assert_close(docs, synthetic_documents(_ctx("prodlda", 64), 64, 200))


def test_prodlda_loss_falls_on_a_fixed_batch() -> None:
    torch.manual_seed(0)
    w = torchgauge.create("prodlda", mode="train", size="smoke", batch_size=16)
    for group in w.optimizer.param_groups:  # the tutorial's 1e-3 needs epochs; 1e-2 shows it in 80 steps
        group["lr"] = 1e-2
    losses = [w.step().item() for _ in range(80)]
    assert sum(losses[-5:]) < 0.9 * sum(losses[:5])  # dropout and sampling make single steps noisy


# -- VQ-VAE --------------------------------------------------------------------------------------------
def _quantizer(k: int = 6, d: int = 3, decay: float = 0.99, commitment: float = 0.25) -> VectorQuantizerEMA:
    torch.manual_seed(0)
    return VectorQuantizerEMA(k, d, commitment, decay, 1e-5).double()


def test_vq_picks_the_nearest_code_and_returns_it() -> None:
    vq = _quantizer().eval()
    z = torch.randn(2, 3, 4, 5, dtype=F64)
    quantized, _, indices = vq(z)
    flat = z.permute(0, 2, 3, 1).reshape(-1, 3)
    torch.testing.assert_close(vq.distances(flat), torch.cdist(flat, vq.embeddings) ** 2)
    expected = torch.cdist(flat, vq.embeddings).argmin(1)
    assert torch.equal(indices.flatten(), expected)
    torch.testing.assert_close(quantized.permute(0, 2, 3, 1).reshape(-1, 3), vq.embeddings[expected])


def test_vq_straight_through_gradient_and_commitment_loss() -> None:
    vq = _quantizer(commitment=0.25).eval()
    z = torch.randn(1, 3, 2, 2, dtype=F64, requires_grad=True)
    quantized, loss, _ = vq(z)
    torch.testing.assert_close(loss, 0.25 * (z - quantized).pow(2).mean())
    upstream = torch.randn_like(quantized)
    (grad,) = torch.autograd.grad((quantized * upstream).sum(), z)
    torch.testing.assert_close(grad, upstream)  # quantisation is the identity for the backward pass


def test_vq_ema_update_sets_codes_to_the_smoothed_means_of_their_inputs() -> None:
    # Zero-debiased EMA: after the first update the statistics are the batch's, whatever the decay.
    vq = _quantizer(k=6, d=3, decay=0.99).train()
    z = torch.randn(2, 3, 4, 4, dtype=F64)
    flat = z.permute(0, 2, 3, 1).reshape(-1, 3)
    assign = torch.cdist(flat, vq.embeddings).argmin(1)
    vq(z)
    counts = torch.bincount(assign, minlength=6).to(F64)
    n, eps = counts.sum(), 1e-5
    smoothed = (counts + eps) / (n + 6 * eps) * n
    sums = torch.zeros(6, 3, dtype=F64).index_add_(0, assign, flat)
    torch.testing.assert_close(vq.embeddings, sums / smoothed[:, None])
    used = counts > 0
    torch.testing.assert_close(vq.embeddings[used], sums[used] / counts[used, None], rtol=1e-5, atol=0)
    assert (vq.embeddings[~used] == 0).all()  # unused codes: no inputs to average


def test_vq_ema_second_update_follows_the_decay() -> None:
    vq = _quantizer(k=4, d=2, decay=0.9).train()
    with torch.no_grad():
        vq.embeddings.copy_(torch.tensor([[5, 5], [10, 0], [0, 10], [10, 10]], dtype=F64))
    a = torch.tensor([[5.5, 5.0], [9.0, 1.0]], dtype=F64)  # one input near code 0, one near code 1
    b = torch.tensor([[4.5, 5.5], [11.0, -1.0]], dtype=F64)  # the same codes after the first update
    vq(a.T.reshape(1, 2, 1, 2))
    vq(b.T.reshape(1, 2, 1, 2))
    # hidden = 0.9 * 0.1 * stats_a + 0.1 * stats_b, debiased by 1 - 0.81 = 0.19
    w_a, w_b = 0.09 / 0.19, 0.1 / 0.19
    size = w_a * 1 + w_b * 1  # each code got one input per batch (before smoothing)
    expected0 = (w_a * a[0] + w_b * b[0]) / size
    expected1 = (w_a * a[1] + w_b * b[1]) / size
    torch.testing.assert_close(vq.embeddings[0], expected0, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(vq.embeddings[1], expected1, rtol=1e-4, atol=1e-5)


def test_vq_eval_leaves_the_codebook_alone() -> None:
    vq = _quantizer().eval()
    before = vq.embeddings.clone()
    vq(torch.randn(2, 3, 4, 4, dtype=F64))
    assert torch.equal(vq.embeddings, before) and vq.counter.item() == 0


def test_vq_vae_reconstruction_gradient_reaches_the_encoder_through_the_codes() -> None:
    torch.manual_seed(0)
    model = VQVAE(
        VQVAEConfig(num_hiddens=16, num_residual_hiddens=8, embedding_dim=8, num_embeddings=16, commitment_cost=0.0)
    )
    x = torch.rand(2, 3, 32, 32) - 0.5
    x_hat, vq_loss, indices = model(x)
    assert x_hat.shape == (2, 3, 32, 32) and indices.shape == (2, 8, 8) and vq_loss.item() == 0
    F.mse_loss(x_hat, x).backward()  # no commitment term: only the straight-through path is left
    assert model.encoder[0].weight.grad.abs().sum() > 0
    assert all(p.grad is not None for p in model.parameters())
    assert "quantizer.embeddings" in dict(model.named_buffers())  # the codebook is not a parameter


# -- DALL-E dVAE -------------------------------------------------------------------------------------
def test_logit_laplace_nll_is_a_laplace_on_the_logit_with_the_jacobian() -> None:
    gen = torch.Generator().manual_seed(0)
    x = map_pixels(torch.rand(2, 3, 4, 4, generator=gen, dtype=F64))
    stats = torch.randn(2, 6, 4, 4, generator=gen, dtype=F64)
    mu, log_b = stats[:, :3], stats[:, 3:]
    laplace = torch.distributions.Laplace(mu, log_b.exp())
    # p(x) = p_Laplace(logit x) |d logit x / dx| = p_Laplace(logit x) / (x (1 - x))
    expected = -(laplace.log_prob(torch.logit(x)) - torch.log(x * (1 - x))).flatten(1).sum(1)
    torch.testing.assert_close(logit_laplace_nll(x, stats), expected)


def test_logit_laplace_density_integrates_to_one() -> None:
    x = torch.linspace(1e-6, 1 - 1e-6, 200_001, dtype=F64).view(1, 1, 1, -1)
    stats = torch.tensor([0.7, -1.2], dtype=F64).view(1, 2, 1, 1).expand(1, 2, 1, x.shape[-1])
    density = torch.exp(
        -(
            math.log(2)
            + stats[:, 1:]
            + torch.log(x * (1 - x))
            + (torch.logit(x) - stats[:, :1]).abs() * torch.exp(-stats[:, 1:])
        )
    )
    assert torch.trapezoid(density.flatten(), x.flatten()).item() == pytest.approx(1.0, abs=1e-3)


def test_dvae_kl_to_the_uniform_prior() -> None:
    x = map_pixels(torch.rand(2, 3, 8, 8, dtype=F64))
    stats = torch.zeros(2, 6, 8, 8, dtype=F64)
    nll = logit_laplace_nll(x, stats).mean()
    # uniform posterior: KL = 0
    flat = torch.zeros(2, 16, 1, 1, dtype=F64)
    torch.testing.assert_close(dvae_negative_elbo(x, stats, flat, kl_weight=6.6).double(), nll, rtol=1e-5, atol=0)
    # KL = sum_positions sum_k q log(q K), averaged over images
    logits = torch.randn(2, 16, 3, 3, dtype=F64)
    q = logits.softmax(1)
    kl = (q * (q * 16).log()).sum() / 2
    torch.testing.assert_close(
        dvae_negative_elbo(x, stats, logits, kl_weight=2.0).double(), nll + 2.0 * kl, rtol=1e-5, atol=0
    )


def test_dvae_pixel_maps_invert_and_tokens_decode_to_images() -> None:
    x = torch.rand(2, 3, 16, 16)
    torch.testing.assert_close(unmap_pixels(map_pixels(x)), x)
    torch.manual_seed(0)
    model = DiscreteVAE(DVAEConfig(vocab_size=32, n_hid=8, n_init=8, image_size=16)).eval()
    with torch.no_grad():
        tokens, images = model.reconstruct(map_pixels(x))
    assert tokens.shape == (2, 2, 2) and tokens.dtype == torch.long and images.shape == (2, 3, 16, 16)
    assert images.min() >= 0 and images.max() <= 1
    assert model.encoder.groups[0][0].post_gain == 1 / 64  # 8 blocks: 1 / n_layers^2


def test_dvae_training_decoder_sees_gumbel_softmax_samples() -> None:
    torch.manual_seed(0)
    model = DiscreteVAE(DVAEConfig(vocab_size=32, n_hid=8, n_init=8, image_size=16))
    seen = []
    model.decoder.input.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
    stats, logits = model(map_pixels(torch.rand(2, 3, 16, 16)))
    z = seen[0]
    assert stats.shape == (2, 6, 16, 16) and logits.shape == (2, 32, 2, 2)
    torch.testing.assert_close(z.sum(1), torch.ones(2, 2, 2))  # relaxed one-hot over the vocabulary
    assert (z.amax(1) > 0.5).float().mean() > 0.5  # tau = 1/16: mostly near one-hot


# -- SAGAN -----------------------------------------------------------------------------------------------
def test_self_attention_matches_a_loop_over_positions() -> None:
    torch.manual_seed(0)
    attn = SelfAttention(16).double().eval()
    with torch.no_grad():
        attn.gamma.fill_(0.5)
    x = torch.randn(2, 16, 3, 4, dtype=F64)
    with torch.no_grad():
        q, k, v = (m(x).flatten(2) for m in (attn.query, attn.key, attn.value))  # (B, C', N)
        expected = torch.empty_like(v)
        for b in range(2):
            for i in range(12):
                weights = torch.softmax(q[b, :, i] @ k[b], dim=0)  # over positions j
                expected[b, :, i] = (v[b] * weights).sum(1)
        torch.testing.assert_close(attn(x), x + 0.5 * expected.view_as(x))
        attn.gamma.zero_()
        torch.testing.assert_close(attn(x), x)  # gamma starts at 0: the identity


def test_sagan_spectral_norm_on_every_convolution_bounds_each_layer() -> None:
    torch.manual_seed(0)
    cfg = SAGANConfig(z_dim=16, g_conv_dim=16, d_conv_dim=16)
    for net in (SAGANGenerator(cfg), SAGANDiscriminator(cfg)):
        convs = [m for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d))]
        assert convs and all(torch.nn.utils.parametrize.is_parametrized(m, "weight") for m in convs)
        net.train()
        for m in convs:
            for _ in range(200):  # in training mode each access of .weight runs one power iteration
                w = m.weight.detach()
            dim = 1 if isinstance(m, torch.nn.ConvTranspose2d) else 0  # the output-channel dim
            sigma = torch.linalg.matrix_norm(w.movedim(dim, 0).flatten(1), ord=2).item()
            assert sigma == pytest.approx(1.0, rel=2e-3)


def test_sagan_train_step_updates_both_networks_with_ttur() -> None:
    w = torchgauge.create("sagan", mode="train", size="smoke")
    assert w.optimizer_g.param_groups[0]["lr"] == 1e-4 and w.optimizer_d.param_groups[0]["lr"] == 4e-4
    assert w.optimizer_d.param_groups[0]["betas"] == (0.0, 0.9)
    g0 = [p.detach().clone() for p in w.generator.parameters()]
    d0 = [p.detach().clone() for p in w.discriminator.parameters()]
    w.step()
    assert any(not torch.equal(a, b) for a, b in zip(g0, w.generator.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(d0, w.discriminator.parameters()))
    out = torchgauge.create("sagan", mode="eval", size="smoke").step()
    assert out.shape == (2, 3, 64, 64) and out.abs().max() <= 1
