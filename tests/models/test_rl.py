"""RL building blocks: environments, replay, squashed policy, target updates, augmentation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchgauge
from torchgauge.models.rl.drq import DrQAgent, DrQConfig, random_shift
from torchgauge.models.rl.envs import PendulumConfig, PendulumEnv, ReplayBuffer
from torchgauge.models.rl.learning_to_paint import paint
from torchgauge.models.rl.sac import TanhNormal, polyak_update, squashed_gaussian

CPU = torch.device("cpu")


def _pendulum(seed: int, num_envs: int = 4, **cfg) -> PendulumEnv:
    return PendulumEnv(num_envs, CPU, torch.Generator().manual_seed(seed), PendulumConfig(**cfg))


def _rollout(env: PendulumEnv, steps: int) -> torch.Tensor:
    actions = torch.Generator().manual_seed(7)
    obs = [env.reset()]
    for _ in range(steps):
        next_obs, reward, _ = env.step(2 * torch.rand(env.num_envs, 1, generator=actions) - 1)
        obs += [next_obs, reward]
    return torch.cat(obs, dim=1)


def test_pendulum_is_deterministic_for_a_seed() -> None:
    a, b, c = _rollout(_pendulum(1), 250), _rollout(_pendulum(1), 250), _rollout(_pendulum(2), 250)
    assert torch.equal(a, b)  # 250 > 200 steps: the time-limit resets are seeded too
    assert not torch.equal(a, c)


@pytest.mark.parametrize("name", ["soft_actor_critic", "drq"])
def test_training_replays_identically_for_a_seed(name: str) -> None:
    runs = []
    for _ in range(2):
        workload = torchgauge.create(name, mode="train", size="smoke", seed=3)
        runs.append([workload.step().item() for _ in range(2)] + [workload.obs.float().sum().item()])
    assert runs[0] == runs[1]


def test_drq_update_samples_torchbench_128_transitions_whatever_the_batch() -> None:
    # TorchBench declares batch 1 but its DRQAgent.update samples config.batch_size = 128; the
    # registry's samples_per_step says the same, so throughput counts what the step processes
    from torchgauge.registry import get_spec

    workload = torchgauge.create("drq", mode="train", size="smoke", seed=0)
    assert workload.batch_size == 1 and len(workload.buffer) >= 128
    sampled = []
    original = workload.buffer.sample
    workload.buffer.sample = lambda n: sampled.append(n) or original(n)
    workload.step()
    assert sampled == [128] == [get_spec("drq").step_samples("train", workload.batch_size)]


def test_pendulum_matches_gym_step_and_reward() -> None:
    env = _pendulum(0, num_envs=1)
    env.theta, env.theta_dot = torch.tensor([0.5]), torch.tensor([1.0])
    obs, reward, terminal = env.step(torch.tensor([[0.5]]))  # torque 1.0
    # gym Pendulum-v1: cost = 0.5^2 + 0.1 * 1^2 + 0.001 * 1^2; new speed = 1 + (15 sin 0.5 + 3 * 1) * 0.05
    speed = 1 + (15 * math.sin(0.5) + 3) * 0.05
    assert reward.item() == pytest.approx(-(0.25 + 0.1 + 0.001))
    assert obs[0, 2].item() == pytest.approx(speed, rel=1e-6)
    assert obs[0, 0].item() == pytest.approx(math.cos(0.5 + speed * 0.05), rel=1e-6)
    assert terminal.item() == 0.0
    env.theta, env.theta_dot = torch.tensor([2 * math.pi]), torch.tensor([0.0])
    assert env.step(torch.zeros(1, 1))[1].item() == pytest.approx(0.0, abs=1e-9)  # upright, angle wrapped


def test_pendulum_energy_is_conserved_without_torque_and_grows_with_aligned_torque() -> None:
    env = _pendulum(0, num_envs=3, max_episode_steps=10_000)
    env.theta = torch.tensor([math.pi - 0.3, math.pi - 1.0, math.pi - 2.5])  # hanging, various swings
    env.theta_dot = torch.zeros(3)
    e0, lowest = env.energy(), -env.cfg.m * env.cfg.g * env.cfg.l / 2
    energies = []
    for _ in range(400):
        env.step(torch.zeros(3, 1))
        energies.append(env.energy())
    energies = torch.stack(energies)
    swing = e0 - lowest
    # semi-implicit Euler: bounded oscillation of the energy, no drift
    assert ((energies - e0).abs().max(0).values < 0.15 * swing).all()
    assert ((energies[-50:].mean(0) - energies[:50].mean(0)).abs() < 0.01 * swing).all()

    env.theta, env.theta_dot = torch.full((3,), math.pi - 0.3), torch.zeros(3)
    e0 = env.energy()
    for _ in range(20):  # push along the velocity: positive power
        env.step(0.5 * torch.sign(env.theta_dot + 1e-9).unsqueeze(1))
    assert (env.energy() > e0 + 0.5).all()


def test_pendulum_resets_itself_at_the_time_limit() -> None:
    env = _pendulum(3, num_envs=2, max_episode_steps=5)
    env.reset()
    for _ in range(4):
        env.step(torch.zeros(2, 1))
    before = env.observation()
    last_obs, _, _ = env.step(torch.zeros(2, 1))
    assert env.elapsed.tolist() == [0, 0]
    assert not torch.allclose(last_obs, env.observation())  # fresh start, while step returned the final state
    assert not torch.allclose(before, last_obs)


def test_replay_buffer_wraps_around_and_samples_deterministically() -> None:
    buffer = ReplayBuffer(4, CPU, torch.Generator().manual_seed(0), x=((1,), torch.float32))
    buffer.add(x=torch.tensor([[0.0], [1.0], [2.0]]))
    buffer.add(x=torch.tensor([[3.0], [4.0]]))  # overwrites the oldest slot
    assert len(buffer) == 4 and buffer.position == 1
    assert buffer.storage["x"].flatten().tolist() == [4.0, 1.0, 2.0, 3.0]
    again = ReplayBuffer(4, CPU, torch.Generator().manual_seed(0), x=((1,), torch.float32))
    again.add(x=torch.tensor([[4.0], [1.0], [2.0], [3.0]]))
    assert torch.equal(buffer.sample(16)["x"], again.sample(16)["x"])


def test_tanh_normal_log_prob_matches_change_of_variables() -> None:
    loc, scale = torch.tensor([0.3, -1.2], dtype=torch.float64), torch.tensor([0.8, 0.5], dtype=torch.float64)
    dist = TanhNormal(loc, scale)
    y = torch.tensor([0.25, -0.9], dtype=torch.float64)
    # density of Y = tanh(X) by differentiating its CDF: P(Y <= y) = Phi((atanh y - loc) / scale)
    base, h = torch.distributions.Normal(loc, scale), 1e-6
    numeric = (base.cdf(torch.atanh(y + h)) - base.cdf(torch.atanh(y - h))) / (2 * h)
    torch.testing.assert_close(dist.log_prob(y).exp(), numeric, rtol=1e-6, atol=0)
    # closed form: log N(atanh y) - log(1 - y^2)
    torch.testing.assert_close(dist.log_prob(y), base.log_prob(torch.atanh(y)) - torch.log1p(-(y**2)))


def test_squashed_policy_samples_in_bounds_with_validation_on() -> None:
    dist = squashed_gaussian(torch.tensor([[0.5, 10.0], [-3.0, -10.0]]), (-10.0, 2.0))
    assert dist._validate_args  # torch.distributions argument checks stay on, as in the reference
    sample = dist.rsample((1000,))
    assert sample.abs().max() <= 1.0 and torch.isfinite(dist.log_prob(sample)).all()
    torch.testing.assert_close(dist.mean, torch.tanh(torch.tensor([[0.5], [-3.0]])))
    with pytest.raises(ValueError):
        TanhNormal(torch.zeros(1), -torch.ones(1))  # validation rejects a negative scale


def test_polyak_update() -> None:
    source, target = nn.Linear(3, 2), nn.Linear(3, 2)
    original = [p.clone() for p in target.parameters()]
    polyak_update(target, source, 0.0)
    assert all(torch.equal(t, o) for t, o in zip(target.parameters(), original))
    polyak_update(target, source, 0.5)
    for t, o, s in zip(target.parameters(), original, source.parameters()):
        torch.testing.assert_close(t, (o + s) / 2)
    polyak_update(target, source, 1.0)
    assert all(torch.equal(t, s) for t, s in zip(target.parameters(), source.parameters()))


def test_random_shift_crops_the_replicate_padded_image() -> None:
    images = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6)
    assert torch.equal(random_shift(images, 0, torch.Generator().manual_seed(0)), images)
    shifted = random_shift(images, 2, torch.Generator().manual_seed(0))
    padded = nn.functional.pad(images, (2, 2, 2, 2), mode="replicate")
    for i in range(2):
        crops = [padded[i, :, r : r + 6, c : c + 6] for r in range(5) for c in range(5)]
        assert any(torch.equal(shifted[i], crop) for crop in crops)


def test_drq_actor_and_critic_share_convolutions_only() -> None:
    agent = DrQAgent((9, 84, 84), 1, DrQConfig(hidden_dim=8))
    assert agent.actor_encoder.convs is agent.critic_encoder.convs
    assert agent.actor_encoder.head is not agent.critic_encoder.head
    assert not any(p.requires_grad for p in agent.critic_target.parameters())


def test_paint_with_opaque_strokes_leaves_the_last_colour() -> None:
    def opaque_renderer(params: torch.Tensor) -> torch.Tensor:  # returns 1 - stroke: 0 = fully painted
        return torch.zeros(params.shape[0], 4, 4)

    actions = torch.zeros(1, 5, 13)
    actions[0, :, 10:] = torch.arange(15, dtype=torch.float32).view(5, 3) / 15  # a colour per stroke
    canvas = paint(actions.view(1, 65), torch.ones(1, 3, 4, 4), opaque_renderer)
    expected = (torch.tensor([12.0, 13.0, 14.0]) / 15).view(1, 3, 1, 1).expand(1, 3, 4, 4)
    torch.testing.assert_close(canvas, expected)

    def clear_renderer(params: torch.Tensor) -> torch.Tensor:
        return torch.ones(params.shape[0], 4, 4)

    blank = torch.full((1, 3, 4, 4), 0.3)
    torch.testing.assert_close(paint(actions.view(1, 65), blank, clear_renderer), blank)


def test_warm_up_refuses_a_buffer_smaller_than_the_update_batch() -> None:
    # A buffer that can never hold one update batch used to make warm-up loop forever
    # (drq at smoke size: 4 x batch 1 rows against 128 sampled).
    workload = torchgauge.create("soft_actor_critic", mode="train", size="smoke", seed=0)
    workload.buffer.capacity = workload.update_batch_size - 1
    workload.buffer.size = 0
    with pytest.raises(ValueError, match="replay buffer holds .* an update samples"):
        workload.warm_up()
