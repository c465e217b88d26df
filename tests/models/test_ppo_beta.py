"""PPO with a Beta policy (Chou et al. 2017): the Beta's density and entropy in closed form, bounds, the loss."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

import torchgauge
from torchgauge.models.rl.ppo import BetaAgent, gae

F64 = torch.float64


def _agent_with_concentrations(alpha: float, beta: float, obs_dim: int = 5, action_dim: int = 3) -> BetaAgent:
    """A BetaAgent whose head ignores the observation: softplus(bias) + 1 = alpha (first half) / beta."""
    agent = BetaAgent(obs_dim, action_dim).double()
    head = agent.actor[-1]
    raw_alpha, raw_beta = math.log(math.expm1(alpha - 1.0)), math.log(math.expm1(beta - 1.0))  # softplus^-1
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([raw_alpha] * action_dim + [raw_beta] * action_dim))
    return agent


def test_beta22_log_density_and_entropy_match_closed_forms() -> None:
    # Beta(2, 2): density 6 x (1 - x), so log-density at 0.5 is log 1.5 and at 0.25 is log(6 * 0.1875);
    # entropy = ln B(a, b) - (a-1) psi(a) - (b-1) psi(b) + (a+b-2) psi(a+b), with B(2,2) = 1/6,
    # psi(2) = 1 - gamma_E, psi(4) = 1 + 1/2 + 1/3 - gamma_E: H = -ln 6 - 2 (1 - g) + 2 (11/6 - g) = 5/3 - ln 6
    agent = _agent_with_concentrations(2.0, 2.0)
    obs = torch.randn(2, 5, dtype=F64)
    action = torch.tensor([[0.5, 0.5, 0.25], [0.25, 0.5, 0.5]], dtype=F64)
    _, log_prob, entropy, value = agent.get_action_and_value(obs, action)
    expected = 2 * math.log(1.5) + math.log(6 * 0.25 * 0.75)
    torch.testing.assert_close(log_prob, torch.full((2,), expected, dtype=F64))
    torch.testing.assert_close(entropy, torch.full((2,), 3 * (5 / 3 - math.log(6)), dtype=F64))
    assert value.shape == (2, 1)


def test_log_density_matches_the_normalised_beta_formula() -> None:
    # Beta(3, 1.5): log p(x) = (a-1) log x + (b-1) log(1-x) - ln B(a, b), B via math.lgamma
    a, b = 3.0, 1.5
    agent = _agent_with_concentrations(a, b, action_dim=1)
    x = torch.tensor([[0.1], [0.7], [0.95]], dtype=F64)
    _, log_prob, _, _ = agent.get_action_and_value(torch.zeros(3, 5, dtype=F64), x)
    log_b = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    expected = [(a - 1) * math.log(v) + (b - 1) * math.log(1 - v) - log_b for v in (0.1, 0.7, 0.95)]
    torch.testing.assert_close(log_prob, torch.tensor(expected, dtype=F64))


def test_concentrations_are_softplus_plus_one_so_the_policy_is_unimodal() -> None:
    torch.manual_seed(0)
    agent = BetaAgent(5, 3).double()
    with torch.no_grad():
        agent.actor[-1].weight.mul_(1000.0)  # drive the head's outputs far from 0
    obs = torch.randn(16, 5, dtype=F64)
    probs = agent.distribution(obs)
    raw_alpha, raw_beta = agent.actor(obs).chunk(2, dim=-1)
    torch.testing.assert_close(probs.concentration1, F.softplus(raw_alpha) + 1)
    torch.testing.assert_close(probs.concentration0, F.softplus(raw_beta) + 1)
    assert (probs.concentration1 >= 1).all() and (probs.concentration0 >= 1).all()


def test_acting_step_actions_stay_inside_the_bounds() -> None:
    torch.manual_seed(0)
    agent = BetaAgent(5, 3, action_bound=2.0)
    with torch.no_grad():
        agent.actor[-1].weight.mul_(300.0)  # near-degenerate Betas put samples at the edges
    action, log_prob, _, _ = agent.get_action_and_value(torch.randn(4096, 5))
    assert ((action >= 0) & (action <= 1)).all() and torch.isfinite(log_prob).all()
    env_action = agent.scale_action(action)
    assert ((env_action >= -2.0) & (env_action <= 2.0)).all()
    torch.testing.assert_close(agent.scale_action(torch.tensor([0.0, 0.5, 1.0])), torch.tensor([-2.0, 0.0, 2.0]))
    w = torchgauge.create("ppo_beta_continuous", mode="eval", size="smoke", batch_size=64)
    env_action = w.step()[0]
    assert env_action.shape == (64, 6) and (env_action.abs() <= 1.0).all()


def _rollout_loss(w) -> torch.Tensor:
    b = w.buffer
    with torch.no_grad():
        next_value = w.module.get_value(b.next_obs).reshape(1, -1)
        adv, returns = gae(b.rewards, b.values, b.dones, next_value, b.next_done, 0.99, 0.95)
        return w.minibatch_loss(b.obs.flatten(0, 1), b.actions.flatten(0, 1), b.logprobs.reshape(-1),
                                adv.reshape(-1), returns.reshape(-1), b.values.reshape(-1))  # fmt: skip


def test_ppo_loss_falls_on_the_fixed_rollout() -> None:
    w = torchgauge.create("ppo_beta_continuous", mode="train", size="smoke")
    assert isinstance(w.module, BetaAgent)
    assert w.buffer.actions.min() >= 0 and w.buffer.actions.max() <= 1  # the rollout keeps the [0, 1] sample
    before = _rollout_loss(w)
    for _ in range(5):
        w.step()
    assert _rollout_loss(w) < before
