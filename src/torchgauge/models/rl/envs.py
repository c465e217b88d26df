"""Environments and replay memory for the RL workloads, in torch on the benchmark device.

``PendulumEnv`` is a batch of gym's ``Pendulum-v1`` (MIT license; same constants,
semi-implicit Euler step, reward and reset ranges) so no simulator is needed;
``PixelPendulum`` renders it to RGB frames and stacks the last few, as DrQ's pixel
wrappers do. ``ReplayBuffer`` is a ring buffer of transitions kept on the device.
Everything random draws from its own ``torch.Generator`` seeded from the build context,
so the same seed gives the same trajectory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...workload import BuildContext

__all__ = ["PendulumConfig", "PendulumEnv", "PixelPendulum", "ReplayBuffer", "device_generator"]


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


def render_pendulum(obs: torch.Tensor, size: int) -> torch.Tensor:
    """RGB frames ``(N, 3, size, size)`` uint8 of pendulums from observations ``(N, 3)``.

    A red rod of length 1 from the centre towards (sin theta, cos theta), on a light background
    spanning [-1.1, 1.1]^2 (y up), with a dark axle.
    """
    axis = torch.linspace(-1.1, 1.1, size, device=obs.device)
    y, x = -axis.view(size, 1), axis.view(1, size)  # image rows go down
    tip_x, tip_y = obs[:, 1].view(-1, 1, 1), obs[:, 0].view(-1, 1, 1)  # unit vector (N, 1, 1)
    along = (x * tip_x + y * tip_y).clamp(0.0, 1.0)  # projection onto the rod (N, H, W)
    dist2 = (x - along * tip_x) ** 2 + (y - along * tip_y) ** 2
    rod = (dist2 < 0.1**2).unsqueeze(1)  # (N, 1, H, W)
    axle = (x**2 + y**2 < 0.05**2).expand_as(dist2).unsqueeze(1)
    background = torch.tensor([230, 230, 230], dtype=torch.uint8, device=obs.device).view(1, 3, 1, 1)
    rod_color = torch.tensor([204, 77, 77], dtype=torch.uint8, device=obs.device).view(1, 3, 1, 1)
    frame = torch.where(rod, rod_color, background)
    return torch.where(axle, torch.zeros_like(frame), frame)


class PixelPendulum:
    """Pendulum seen through rendered frames: observation ``(N, 3 * frame_stack, size, size)`` uint8.

    Each step repeats the action ``action_repeat`` times and sums the rewards (DrQ's
    ``action_repeat``); an env reset by the time limit starts a fresh stack of its first frame.
    """

    def __init__(self, env: PendulumEnv, image_size: int = 84, frame_stack: int = 3, action_repeat: int = 1) -> None:
        self.env = env
        self.image_size = image_size
        self.frame_stack = frame_stack
        self.action_repeat = action_repeat
        self.frames = self.reset()

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        return (3 * self.frame_stack, self.image_size, self.image_size)

    @property
    def action_dim(self) -> int:
        return self.env.action_dim

    def observation(self) -> torch.Tensor:
        """The current frame stacks (after any time-limit reset)."""
        return self.frames

    def reset(self) -> torch.Tensor:
        self.frames = render_pendulum(self.env.reset(), self.image_size).repeat(1, self.frame_stack, 1, 1)
        return self.frames

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns (next stacked frames, summed reward, terminal), each with N rows."""
        reward = torch.zeros(self.env.num_envs, 1, device=self.env.device)
        was_reset = torch.zeros(self.env.num_envs, dtype=torch.bool, device=self.env.device)
        for _ in range(self.action_repeat):
            next_state, r, terminal = self.env.step(action)
            reward = reward + r
            was_reset |= self.env.elapsed == 0
        next_frames = torch.cat([self.frames[:, 3:], render_pendulum(next_state, self.image_size)], dim=1)
        restart = render_pendulum(self.env.observation(), self.image_size).repeat(1, self.frame_stack, 1, 1)
        self.frames = torch.where(was_reset.view(-1, 1, 1, 1), restart, next_frames)
        return next_frames, reward, terminal


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
        cls, ctx: BuildContext, capacity: int, obs_shape: tuple[int, ...], obs_dtype: torch.dtype, action_dim: int
    ) -> ReplayBuffer | None:
        """A buffer of (obs, action, reward, next_obs, terminal) rows on ``ctx.device``; None in eval.

        At size="smoke" it holds four batches instead of ``capacity``.
        """
        if not ctx.train:
            return None
        obs, scalar = (tuple(obs_shape), obs_dtype), ((1,), torch.float32)
        return cls(ctx.pick(capacity, 4 * ctx.batch_size), ctx.device, device_generator(ctx), obs=obs, next_obs=obs,
                   action=((action_dim,), torch.float32), reward=scalar, terminal=scalar)  # fmt: skip

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly from those stored."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=self.generator, device=self.device)
        return {name: store[idx] for name, store in self.storage.items()}
