"""Environments and replay memory for the RL workloads, in torch on the benchmark device.

``PendulumEnv`` is a batch of gym's ``Pendulum-v1`` (MIT license; same constants,
semi-implicit Euler step, reward and reset ranges) so no simulator is needed.
``ReplayBuffer`` is a ring buffer of transitions kept on the device.
Everything random draws from its own ``torch.Generator`` seeded from the build context,
so the same seed gives the same trajectory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...workload import BuildContext

__all__ = ["PendulumConfig", "PendulumEnv", "ReplayBuffer", "device_generator"]


def device_generator(ctx: BuildContext) -> torch.Generator:
    """A generator on ``ctx.device`` seeded from the context's generator (deterministic per seed)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=ctx.generator()))
    gen = torch.Generator(device=ctx.device)
    gen.manual_seed(seed)
    return gen


@dataclass(frozen=True)
class PendulumConfig:
    """gym Pendulum-v1 constants."""

    max_speed: float = 8.0  # |theta_dot| is clipped here (rad/s)
    max_torque: float = 2.0  # an action in [-1, 1] is scaled to this torque
    dt: float = 0.05  # integration step (s)
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0  # noqa: E741  (gym's name for the rod length)
    max_episode_steps: int = 200  # gym's TimeLimit; envs reset themselves after this many steps


class PendulumEnv:
    """``num_envs`` independent pendulums; theta = 0 is upright.

    Observation ``(N, 3)``: cos(theta), sin(theta), theta_dot. Action ``(N, 1)`` in [-1, 1].
    An env reaching ``max_episode_steps`` is reset inside :meth:`step` (without a host sync),
    and :meth:`step` returns the observation *before* that reset, as a replay buffer wants.
    """

    obs_dim = 3
    action_dim = 1

    def __init__(
        self, num_envs: int, device: torch.device, generator: torch.Generator, config: PendulumConfig | None = None
    ) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.generator = generator
        self.cfg = config or PendulumConfig()
        self.theta, self.theta_dot = self._initial_state()
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    @classmethod
    def for_workload(cls, ctx: BuildContext, train_envs: int) -> PendulumEnv:
        """``train_envs`` pendulums in training; in eval the batch size is the number of envs acting."""
        return cls(train_envs if ctx.train else ctx.batch_size, ctx.device, device_generator(ctx))

    def _initial_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        # gym: theta ~ U(-pi, pi), theta_dot ~ U(-1, 1)
        u = torch.rand(2, self.num_envs, generator=self.generator, device=self.device)
        return (2 * u[0] - 1) * math.pi, 2 * u[1] - 1

    def reset(self) -> torch.Tensor:
        """Reset every env; returns the observations ``(N, 3)``."""
        self.theta, self.theta_dot = self._initial_state()
        self.elapsed.zero_()
        return self.observation()

    def observation(self) -> torch.Tensor:
        return torch.stack([torch.cos(self.theta), torch.sin(self.theta), self.theta_dot], dim=1)

    def energy(self) -> torch.Tensor:
        """Mechanical energy ``(N,)`` of the rod pivoted at one end (I = m l^2 / 3)."""
        c = self.cfg
        return c.m * c.l**2 / 6 * self.theta_dot**2 + c.m * c.g * c.l / 2 * torch.cos(self.theta)

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Advance one ``dt``; returns (next observation, reward, terminal), each with N rows.

        ``terminal`` is always 0: a pendulum has no terminal state, episodes are only truncated.
        """
        c = self.cfg
        torque = c.max_torque * action.reshape(self.num_envs).clamp(-1.0, 1.0)
        angle = torch.remainder(self.theta + math.pi, 2 * math.pi) - math.pi  # normalized to [-pi, pi)
        cost = angle**2 + 0.1 * self.theta_dot**2 + 0.001 * torque**2
        accel = 3 * c.g / (2 * c.l) * torch.sin(self.theta) + 3.0 / (c.m * c.l**2) * torque
        theta_dot = (self.theta_dot + accel * c.dt).clamp(-c.max_speed, c.max_speed)
        self.theta = self.theta + theta_dot * c.dt  # semi-implicit: the new speed moves the rod
        self.theta_dot = theta_dot
        next_obs = self.observation()
        self.elapsed += 1
        truncated = self.elapsed >= c.max_episode_steps
        fresh_theta, fresh_theta_dot = self._initial_state()
        self.theta = torch.where(truncated, fresh_theta, self.theta)
        self.theta_dot = torch.where(truncated, fresh_theta_dot, self.theta_dot)
        self.elapsed = torch.where(truncated, 0, self.elapsed)
        return next_obs, -cost.unsqueeze(1), torch.zeros_like(cost).unsqueeze(1)


class ReplayBuffer:
    """Ring buffer of transitions on one device; uniform sampling with replacement.

    Fields are declared as ``name=(shape, dtype)``; :meth:`add` takes a batch of rows per field.
    Write position and size are host integers, so adding and sampling never sync the device.
    """

    def __init__(
        self,
        capacity: int,
        device: torch.device,
        generator: torch.Generator,
        **fields: tuple[tuple[int, ...], torch.dtype],
    ) -> None:
        self.capacity = capacity
        self.device = torch.device(device)
        self.generator = generator
        self.storage = {
            name: torch.zeros((capacity, *shape), dtype=dtype, device=self.device)
            for name, (shape, dtype) in fields.items()
        }
        self.position = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, **rows: torch.Tensor) -> None:
        """Append a batch of transitions, overwriting the oldest once full."""
        n = next(iter(rows.values())).shape[0]
        slots = (self.position + torch.arange(n, device=self.device)) % self.capacity
        for name, value in rows.items():
            self.storage[name].index_copy_(0, slots, value.to(self.storage[name].dtype))
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    @classmethod
    def for_training(
        cls,
        ctx: BuildContext,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: torch.dtype,
        action_dim: int,
        update_batch_size: int | None = None,
    ) -> ReplayBuffer | None:
        """A buffer of (obs, action, reward, next_obs, terminal) rows on ``ctx.device``; None in eval.

        At size="smoke" it holds four update batches instead of ``capacity``: an update samples
        ``update_batch_size`` rows (default: the batch size), which may exceed the declared batch
        (drq declares 1 and samples 128), and warm-up must be able to fill one.
        """
        if not ctx.train:
            return None
        rows = update_batch_size or ctx.batch_size
        obs, scalar = (tuple(obs_shape), obs_dtype), ((1,), torch.float32)
        return cls(ctx.pick(capacity, 4 * rows), ctx.device, device_generator(ctx), obs=obs, next_obs=obs,
                   action=((action_dim,), torch.float32), reward=scalar, terminal=scalar)  # fmt: skip

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly from those stored."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=self.generator, device=self.device)
        return {name: store[idx] for name, store in self.storage.items()}
