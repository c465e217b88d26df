"""Soft Actor-Critic with automatic entropy tuning (Haarnoja et al., 2018, arXiv:1812.05905).

Follows TorchBench's ``soft_actor_critic`` (jakegrigsby/deep_control, MIT license): a
Gaussian policy squashed by tanh through ``torch.distributions`` (``Normal`` +
``TanhTransform``, argument validation left at torch's default, i.e. on), twin Q networks
with 1024-wide hidden layers, Polyak-averaged target critics, a learned temperature and
uniform replay. One training step is what TorchBench's ``train()`` does (its ``__init__.py``:
215-257): reset the environment, act once (a sampled action), store the transition, sample a
batch of 256 and update critic, actor and temperature, then move the target critics (its loop
counter restarts at 0 every call, so ``step % target_delay == 0`` always holds). One eval step
is its ``eval()`` (:259-275): an episode of ``max_episode_steps = 10`` greedy actions of one
environment. The environment is :class:`~torchgauge.models.rl.envs.PendulumEnv` (gym Pendulum-v1).
The distribution, network and target-update pieces here are shared with ``drq.py``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from ...registry import register_model
from ...workload import BuildContext, Workload
from .envs import PendulumEnv, ReplayBuffer, device_generator

__all__ = [
    "OffPolicyWorkload", "TanhNormal", "TwinQ", "frozen_copy", "mlp", "optimizer_step", "orthogonal_init",
    "polyak_update", "squashed_gaussian",
]  # fmt: skip


class TanhNormal(TransformedDistribution):
    """``tanh(x)`` with ``x ~ Normal(loc, scale)``; ``mean`` is the deterministic action ``tanh(loc)``."""

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor, validate_args: bool | None = None) -> None:
        # cache_size=1: log_prob of an rsample() reuses its pre-tanh value instead of atanh(+-1).
        super().__init__(Normal(loc, scale, validate_args=validate_args), [TanhTransform(cache_size=1)], validate_args)

    @property
    def mean(self) -> torch.Tensor:
        return torch.tanh(self.base_dist.loc)


def squashed_gaussian(params: torch.Tensor, log_std_bounds: tuple[float, float]) -> TanhNormal:
    """Policy distribution from a head's output ``(B, 2A)`` = (mean, raw log-std)."""
    mu, log_std = params.chunk(2, dim=-1)
    low, high = log_std_bounds
    log_std = low + 0.5 * (high - low) * (torch.tanh(log_std) + 1)  # squashed into [low, high]
    return TanhNormal(mu, log_std.exp())


def mlp(in_dim: int, hidden_dim: int, out_dim: int, depth: int) -> nn.Sequential:
    """``depth`` hidden Linear+ReLU layers of ``hidden_dim`` units, then a linear output."""
    dims = [in_dim] + [hidden_dim] * depth
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(dims[-1], out_dim))


def orthogonal_init(module: nn.Module) -> None:
    """The references' init: orthogonal weights (ReLU gain for convolutions), zero biases."""
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        gain = nn.init.calculate_gain("relu") if isinstance(module, nn.Conv2d) else 1.0
        nn.init.orthogonal_(module.weight, gain)
        nn.init.zeros_(module.bias)


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source`` for every parameter (tau=1 copies)."""
    for t, s in zip(target.parameters(), source.parameters()):
        t.lerp_(s, tau)


def frozen_copy(module: nn.Module) -> nn.Module:
    """A target network: a copy of ``module`` that no optimizer or backward pass touches."""
    return copy.deepcopy(module).requires_grad_(False)


class TwinQ(nn.Module):
    """Two independent Q heads over the same input (clipped double Q-learning)."""

    def __init__(self, in_dim: int, hidden_dim: int, depth: int = 2) -> None:
        super().__init__()
        self.q1 = mlp(in_dim, hidden_dim, 1, depth)
        self.q2 = mlp(in_dim, hidden_dim, 1, depth)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q1(x), self.q2(x)  # (B, 1) each


@dataclass(frozen=True)
class SACConfig:
    """TorchBench's SACConfig (deep_control defaults)."""

    hidden_dim: int = 1024  # actor and critic hidden width
    log_std_bounds: tuple[float, float] = (-10.0, 2.0)
    gamma: float = 0.99
    tau: float = 0.005  # Polyak rate of the target critics
    actor_lr: float = 1e-4
    critic_lr: float = 1e-4
    alpha_lr: float = 1e-4
    init_alpha: float = 0.1
    num_envs: int = 1  # env transitions collected per training step
    eval_steps: int = 10  # max_episode_steps: greedy env steps of one eval episode
    buffer_size: int = 1_000_000


class SACAgent(nn.Module):
    """Policy, twin critics, their targets and the log-temperature, in one module."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: SACConfig) -> None:
        super().__init__()
        self.log_std_bounds = cfg.log_std_bounds
        self.actor = mlp(obs_dim, cfg.hidden_dim, 2 * action_dim, depth=2)
        self.critic = TwinQ(obs_dim + action_dim, cfg.hidden_dim)
        self.apply(orthogonal_init)
        self.critic_target = frozen_copy(self.critic)
        self.log_alpha = nn.Parameter(torch.tensor([math.log(cfg.init_alpha)]))

    def policy(self, obs: torch.Tensor) -> TanhNormal:
        return squashed_gaussian(self.actor(obs), self.log_std_bounds)

    def q(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.critic(torch.cat([obs, action], dim=1))

    def target_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.min(*self.critic_target(torch.cat([obs, action], dim=1)))


def optimizer_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> torch.Tensor:
    """zero_grad + backward + step on one network's loss; returns the detached loss."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


class OffPolicyWorkload(Workload):
    """The loop shared by SAC-style agents: act in the env, store transitions, update from replay.

    ``module`` provides ``policy(obs) -> TanhNormal``, ``q(obs, action) -> (q1, q2)``,
    ``target_q(obs, action)`` and ``log_alpha``; subclasses set ``actor_optimizer`` and
    ``alpha_optimizer`` and implement ``train_step`` starting with :meth:`collect`.
    Eval (:meth:`forward`) is one greedy step in every env.
    """

    needs_optimizer = False
    eval_grad_mode = "no_grad"  # the references act under torch.no_grad()

    def __init__(self, ctx: BuildContext, agent: nn.Module, env: Any, buffer: ReplayBuffer | None, cfg: Any) -> None:
        super().__init__(ctx, agent)
        self.env, self.buffer, self.cfg = env, buffer, cfg
        self.obs = env.reset()
        self.target_entropy = -float(env.action_dim)  # the references' -|A|
        self.updates = 0

    def forward(self) -> torch.Tensor:
        """Act with tanh of the policy mean in every env for one step; returns the actions ``(N, A)``."""
        action = self.module.policy(self.obs).mean
        self.env.step(action)
        self.obs = self.env.observation()
        return action

    @torch.no_grad()
    def collect(self, random_actions: bool = False) -> None:
        """One env step with sampled (or uniform random) actions, stored in the replay buffer."""
        if random_actions:
            shape = (self.obs.shape[0], self.env.action_dim)
            action = 2 * torch.rand(shape, generator=self.buffer.generator, device=self.device) - 1
        else:
            action = self.module.policy(self.obs).sample()
        next_obs, reward, terminal = self.env.step(action)
        self.buffer.add(obs=self.obs, action=action, reward=reward, next_obs=next_obs, terminal=terminal)
        self.obs = self.env.observation()  # after any time-limit reset

    @property
    def update_batch_size(self) -> int:
        """Transitions one update samples from the buffer (the batch, unless a subclass fixes it)."""
        return self.batch_size

    def warm_up(self) -> OffPolicyWorkload:
        """Fill the buffer with one update batch of random-action transitions (build time, not timed)."""
        if self.buffer is not None:
            if self.buffer.capacity < self.update_batch_size:  # it could never fill: refuse, do not spin
                raise ValueError(
                    f"replay buffer holds {self.buffer.capacity} transitions but an update samples "
                    f"{self.update_batch_size}: give the buffer a capacity of at least the update batch"
                )
            while len(self.buffer) < self.update_batch_size:
                self.collect(random_actions=True)
        return self

    def soft_td_target(
        self, next_obs: torch.Tensor, reward: torch.Tensor, terminal: torch.Tensor, discount: float
    ) -> torch.Tensor:
        """``r + discount * (1 - done) * (min target Q(s', a') - alpha * log pi(a'|s'))`` with ``a' ~ pi(s')``."""
        dist = self.module.policy(next_obs)
        next_action = dist.rsample()
        log_prob = dist.log_prob(next_action).sum(-1, keepdim=True)
        value = self.module.target_q(next_obs, next_action) - self.module.log_alpha.exp() * log_prob
        return reward + discount * (1 - terminal) * value

    def update_actor_and_alpha(self, obs: torch.Tensor, **encoder_kwargs: Any) -> torch.Tensor:
        """Actor step on ``alpha * log pi - min Q`` then temperature step towards the target entropy."""
        agent = self.module
        alpha = agent.log_alpha.exp()
        with self.autocast():
            dist = agent.policy(obs, **encoder_kwargs)
            action = dist.rsample()
            log_prob = dist.log_prob(action).sum(-1, keepdim=True)
            actor_loss = (alpha.detach() * log_prob - torch.min(*agent.q(obs, action, **encoder_kwargs))).mean()
        alpha_loss = (alpha * (-log_prob - self.target_entropy).detach()).mean()
        return optimizer_step(self.actor_optimizer, actor_loss) + optimizer_step(self.alpha_optimizer, alpha_loss)


class SoftActorCritic(OffPolicyWorkload):
    """SAC on a pendulum: train = reset, collect + one SAC update; eval = one 10-step greedy episode."""

    def __init__(
        self, ctx: BuildContext, agent: SACAgent, env: PendulumEnv, buffer: ReplayBuffer | None, cfg: SACConfig
    ) -> None:
        super().__init__(ctx, agent, env, buffer, cfg)
        if ctx.train:
            adam = torch.optim.Adam
            self.critic_optimizer = adam(agent.critic.parameters(), lr=cfg.critic_lr)
            self.actor_optimizer = adam(agent.actor.parameters(), lr=cfg.actor_lr)
            self.alpha_optimizer = adam([agent.log_alpha], lr=cfg.alpha_lr, betas=(0.5, 0.999))

    def forward(self) -> torch.Tensor:
        """A fresh episode of ``eval_steps`` greedy actions; returns the last action ``(1, A)``."""
        self.obs = self.env.reset()
        for _ in range(self.cfg.eval_steps):
            action = super().forward()
        return action

    def train_step(self) -> torch.Tensor:
        """Reset, collect, then critic, actor and temperature updates and the Polyak step; returns their summed loss."""
        cfg = self.cfg
        self.obs = self.env.reset()
        self.collect()
        batch = self.buffer.sample(self.batch_size)
        with torch.no_grad(), self.autocast():
            td_target = self.soft_td_target(batch["next_obs"], batch["reward"], batch["terminal"], cfg.gamma)
        with self.autocast():
            q1, q2 = self.module.q(batch["obs"], batch["action"])
            critic_loss = 0.5 * ((td_target - q1) ** 2 + (td_target - q2) ** 2).mean()
        loss = optimizer_step(self.critic_optimizer, critic_loss)
        loss = loss + self.update_actor_and_alpha(batch["obs"])
        polyak_update(self.module.critic_target, self.module.critic, cfg.tau)
        return loss


def _create_sac(ctx: BuildContext, **kwargs) -> Workload:
    # Smoke: 64-wide hidden layers instead of 1024 (the 5.3M weights and their Adam updates set
    # the step's cost); every layer kept.
    cfg = SACConfig(**{**({"hidden_dim": 64} if ctx.smoke else {}), **kwargs})
    env = PendulumEnv(cfg.num_envs, ctx.device, device_generator(ctx))  # one env acts, in both modes
    agent = SACAgent(env.obs_dim, env.action_dim, cfg).to(ctx.device)
    buffer = ReplayBuffer.for_training(ctx, cfg.buffer_size, (env.obs_dim,), torch.float32, env.action_dim)
    return SoftActorCritic(ctx, agent, env, buffer, cfg).warm_up()


@register_model(
    domain="rl", task="continuous_control", batch_size=(256, 256), param_count=5_278_727,
    source="Haarnoja et al., Soft Actor-Critic Algorithms and Applications, 2018; "
    "jakegrigsby/deep_control (MIT) as in TorchBench's soft_actor_critic",
    unsupported_precisions=("fp16", "bf16"),
    notes="Parameters include the two target critics and the log-temperature. Train: one env step and one "
          "update of a 256 batch; eval: a 10-step greedy episode of one env (the eval batch is nominal). "
          "fp16/bf16 unsupported: the pendulum simulation and replay buffer make fp32 observations, rewards "
          "and actions inside the step (amp works).",
)  # fmt: skip
def soft_actor_critic(ctx: BuildContext, **kwargs) -> Workload:
    """SAC on Pendulum: 3-1024-1024-2 tanh-Gaussian actor, twin 4-1024-1024-1 critics, learned alpha."""
    return _create_sac(ctx, **kwargs)
