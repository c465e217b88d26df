"""PPO (CleanRL): GAE against its definition, the policies' distributions, the clipped objective."""

from __future__ import annotations

import math

import torch

import torchgauge
from torchgauge.models.rl.ppo import AtariAgent, ContinuousAgent, gae, nature_cnn_side

F64 = torch.float64


def _gae_by_definition(rewards, values, dones, next_value, next_done, gamma, lam):
    """A_t = sum_l (gamma lam)^l delta_{t+l}, the sum cut where an episode ends; one env column at a time."""
    steps, envs = rewards.shape
    values_ext = torch.cat([values, next_value.view(1, -1)])
    starts = torch.cat([dones, next_done.view(1, -1)])  # starts[t] = 1: state t begins a new episode
    adv = torch.zeros_like(rewards)
    for e in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                alive = 1.0 - starts[k + 1, e]
                delta = rewards[k, e] + gamma * values_ext[k + 1, e] * alive - values_ext[k, e]
                total += weight * delta
                if alive == 0:
                    break
                weight *= gamma * lam
            adv[t, e] = total
    return adv


def test_gae_matches_its_definition_across_episode_ends() -> None:
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(7, 3, generator=g, dtype=F64), torch.randn(7, 3, generator=g, dtype=F64)
    dones = torch.zeros(7, 3, dtype=F64)
    dones[3, 0] = dones[5, 2] = 1.0
    next_value, next_done = torch.randn(1, 3, generator=g, dtype=F64), torch.tensor([0.0, 1.0, 0.0], dtype=F64)
    adv, returns = gae(rewards, values, dones, next_value, next_done, 0.99, 0.95)
    torch.testing.assert_close(adv, _gae_by_definition(rewards, values, dones, next_value, next_done, 0.99, 0.95))
    torch.testing.assert_close(returns, adv + values)


def test_gae_with_lambda_one_is_the_discounted_return_minus_the_value() -> None:
    rewards = torch.tensor([[1.0], [2.0], [3.0]], dtype=F64)
    values = torch.tensor([[0.5], [0.0], [1.0]], dtype=F64)
    adv, _ = gae(rewards, values, torch.zeros(3, 1, dtype=F64), torch.tensor([[4.0]], dtype=F64),
                 torch.zeros(1, dtype=F64), gamma=0.5, gae_lambda=1.0)  # fmt: skip
    # return_0 = 1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4 = 3.25
    torch.testing.assert_close(adv.flatten(), torch.tensor([3.25 - 0.5, 2 + 1.5 + 1 - 0.0, 3 + 2 - 1.0], dtype=F64))


def test_continuous_policy_is_a_diagonal_gaussian() -> None:
    torch.manual_seed(0)
    agent = ContinuousAgent(5, 3).double()
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.tensor([[0.0, -1.0, 0.5]]))
    obs, action = torch.randn(4, 5, dtype=F64), torch.randn(4, 3, dtype=F64)
    _, log_prob, entropy, value = agent.get_action_and_value(obs, action)
    mean, std = agent.actor_mean(obs), agent.actor_logstd.exp()
    expected = (-((action - mean) ** 2) / (2 * std**2) - std.log() - 0.5 * math.log(2 * math.pi)).sum(1)
    torch.testing.assert_close(log_prob, expected)
    torch.testing.assert_close(entropy, (0.5 * math.log(2 * math.pi * math.e) + std.log()).sum(1).expand(4))
    assert value.shape == (4, 1)


def test_atari_policy_is_a_softmax_over_actions() -> None:
    torch.manual_seed(0)
    agent = AtariAgent(4).double()
    obs = torch.randint(0, 256, (2, 4, 84, 84)).double()
    action, log_prob, entropy, _ = agent.get_action_and_value(obs)
    logp = torch.log_softmax(agent.actor(agent.network(obs / 255.0)), -1)
    torch.testing.assert_close(log_prob, logp.gather(1, action[:, None]).squeeze(1))
    torch.testing.assert_close(entropy, -(logp.exp() * logp).sum(-1))
    assert nature_cnn_side(84) == 7 and nature_cnn_side(36) == 1


def test_fresh_rollout_has_unit_ratio_and_the_loss_is_the_value_term() -> None:
    # right after the rollout the policy is unchanged: ratio 1, normalised advantages average 0,
    # so the loss is 0.5 * vf_coef * mean((V - R)^2) (the clipped value equals the unclipped one)
    w = torchgauge.create("ppo_continuous", mode="train", size="smoke")
    b = w.buffer
    with torch.no_grad():
        next_value = w.module.get_value(b.next_obs).reshape(1, -1)
        adv, returns = gae(b.rewards, b.values, b.dones, next_value, b.next_done, 0.99, 0.95)
        loss = w.minibatch_loss(b.obs.flatten(0, 1), b.actions.flatten(0, 1), b.logprobs.reshape(-1),
                                adv.reshape(-1), returns.reshape(-1), b.values.reshape(-1))  # fmt: skip
    expected = 0.5 * 0.5 * ((b.values - returns) ** 2).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)


def test_updates_raise_the_surrogate_on_the_rollout() -> None:
    w = torchgauge.create("ppo_continuous", mode="train", size="smoke")
    b = w.buffer
    flat_obs, flat_act, old_logp = b.obs.flatten(0, 1), b.actions.flatten(0, 1), b.logprobs.reshape(-1)
    with torch.no_grad():
        next_value = w.module.get_value(b.next_obs).reshape(1, -1)
        adv = gae(b.rewards, b.values, b.dones, next_value, b.next_done, 0.99, 0.95)[0].reshape(-1)
    for _ in range(3):
        w.step()
    with torch.no_grad():
        _, new_logp, _, _ = w.module.get_action_and_value(flat_obs, flat_act)
    surrogate = ((new_logp - old_logp).exp() * (adv - adv.mean()) / adv.std()).mean()
    assert surrogate > 0  # actions with positive advantage became more likely
