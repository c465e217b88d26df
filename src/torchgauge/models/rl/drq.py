"""DrQ: Data-regularized Q, SAC from pixels with random-shift augmentation.

Kostrikov, Yarats & Fergus, "Image Augmentation Is All You Need", 2020 (arXiv:2004.13649);
denisyarats/drq (MIT license) as configured by TorchBench's ``drq``: observations of 3 stacked
9x84x84 uint8 frames (27 channels) through a 4-layer 32-filter conv encoder, a 50-d LayerNorm +
tanh feature, a tanh-Gaussian actor and twin Q heads (1024 wide, depth 2). Actor and critic
own their encoder heads but share the convolutions; the actor's update does not reach the
convolutions. Every sampled batch is augmented twice by replicate-padding 4 pixels and
cropping back at a random offset per image; the critic target averages both views.

The environment is TorchBench's ``MockEnv`` (its ``__init__.py``:17-80): one fixed random
observation (values in [11, 228), the shape of its ``obs.pkl``: 9x84x84) returned by every step
with reward 0, stacked 3 times by ``FrameStack``. One train call acts once (sampled action) and
runs one DrQ update on a batch of 128, updating actor and temperature and moving the target
critic on every other call (``step % 2``); eval acts greedily once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ...registry import register_model
from ...workload import BuildContext, Workload
from .envs import ReplayBuffer, device_generator
from .sac import (
    OffPolicyWorkload,
    TanhNormal,
    TwinQ,
    frozen_copy,
    mlp,
    optimizer_step,
    orthogonal_init,
    polyak_update,
    squashed_gaussian,
)  # fmt: skip

__all__ = ["random_shift"]


@dataclass(frozen=True)
class DrQConfig:
    """TorchBench's DRQConfig."""

    image_size: int = 84
    frame_stack: int = 3
    image_pad: int = 4  # random shift of up to +-4 pixels
    num_filters: int = 32
    feature_dim: int = 50
    hidden_dim: int = 1024
    hidden_depth: int = 2
    log_std_bounds: tuple[float, float] = (-10.0, 2.0)
    lr: float = 1e-3  # actor, critic and temperature
    discount: float = 0.99
    init_temperature: float = 0.1
    critic_tau: float = 0.01
    actor_update_frequency: int = 2
    critic_target_update_frequency: int = 2
    num_envs: int = 1  # env transitions collected per training step
    frame_channels: int = 9  # channels of one mock observation (TorchBench's obs.pkl)
    # The reference holds 100k transitions in host memory; 1k uint8 27x84x84 stacks on the
    # device (0.4 GB with next_obs) change only the sampling range, not the per-step work.
    replay_capacity: int = 1_000
    # config.batch_size of TorchBench's DRQConfig (models/drq/config.py:30): what one update samples,
    # whatever the declared batch (TorchBench's DEFAULT_TRAIN_BSIZE is 1)
    update_batch_size: int = 128


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Replicate-pad ``(N, C, H, W)`` by ``pad`` and crop back to H x W at a random offset per image."""
    n, c, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")  # (N, C, H+2p, W+2p)
    offsets = torch.randint(0, 2 * pad + 1, (n, 2, 1), generator=generator, device=images.device)
    rows = (offsets[:, 0] + torch.arange(h, device=images.device)).view(n, 1, h, 1)
    cols = (offsets[:, 1] + torch.arange(w, device=images.device)).view(n, 1, 1, w)
    padded = padded.gather(2, rows.expand(n, c, h, w + 2 * pad))  # (N, C, H, W+2p)
    return padded.gather(3, cols.expand(n, c, h, w))


class MockPixelEnv:
    """TorchBench's drq environment: every step returns the same stacked observation, reward 0,
    never done. ``num_envs`` copies act in lockstep (1 in TorchBench)."""

    action_dim = 1

    def __init__(self, ctx: BuildContext, num_envs: int, cfg: DrQConfig) -> None:
        frame = ctx.randint(11, 228, (cfg.frame_channels, cfg.image_size, cfg.image_size), dtype=torch.uint8)
        self.frames = frame.repeat(cfg.frame_stack, 1, 1).expand(num_envs, -1, -1, -1).contiguous()
        self.reward = torch.zeros(num_envs, 1, device=ctx.device)

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        return tuple(self.frames.shape[1:])

    def observation(self) -> torch.Tensor:
        return self.frames

    def reset(self) -> torch.Tensor:
        return self.frames

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.frames, self.reward, self.reward  # next observation, reward 0, not terminal


class Encoder(nn.Module):
    """Frames ``(B, C, S, S)`` uint8-valued -> features ``(B, feature_dim)`` in (-1, 1)."""

    def __init__(self, channels: int, image_size: int, num_filters: int, feature_dim: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            [nn.Conv2d(channels, num_filters, 3, stride=2)] + [nn.Conv2d(num_filters, num_filters, 3) for _ in range(3)]
        )
        side = (image_size - 3) // 2 + 1 - 2 * 3  # 84 -> 41 -> 39 -> 37 -> 35
        self.head = nn.Sequential(nn.Linear(num_filters * side * side, feature_dim), nn.LayerNorm(feature_dim))

    def forward(self, obs: torch.Tensor, detach_convs: bool = False) -> torch.Tensor:
        h = obs.to(self.convs[0].weight.dtype) / 255.0  # frames are stored as uint8 values
        for conv in self.convs:
            h = torch.relu(conv(h))  # (B, F, 35, 35) at the end
        h = h.flatten(1)
        if detach_convs:
            h = h.detach()
        return torch.tanh(self.head(h))


class DrQAgent(nn.Module):
    """Actor and critic (each with an encoder; convolutions shared), critic target, log-temperature."""

    def __init__(self, obs_shape: tuple[int, int, int], action_dim: int, cfg: DrQConfig) -> None:
        super().__init__()
        self.log_std_bounds = cfg.log_std_bounds
        channels, size, _ = obs_shape
        self.critic_encoder = Encoder(channels, size, cfg.num_filters, cfg.feature_dim)
        self.critic = TwinQ(cfg.feature_dim + action_dim, cfg.hidden_dim, cfg.hidden_depth)
        self.actor_encoder = Encoder(channels, size, cfg.num_filters, cfg.feature_dim)
        self.actor = mlp(cfg.feature_dim, cfg.hidden_dim, 2 * action_dim, cfg.hidden_depth)
        self.apply(orthogonal_init)
        self.actor_encoder.convs = self.critic_encoder.convs  # tie the convolutions, as the reference
        self.target_encoder = frozen_copy(self.critic_encoder)
        self.critic_target = frozen_copy(self.critic)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.init_temperature)))

    def policy(self, obs: torch.Tensor, detach_convs: bool = False) -> TanhNormal:
        return squashed_gaussian(self.actor(self.actor_encoder(obs, detach_convs)), self.log_std_bounds)

    def q(self, obs: torch.Tensor, action: torch.Tensor, detach_convs: bool = False) -> tuple[torch.Tensor, ...]:
        return self.critic(torch.cat([self.critic_encoder(obs, detach_convs), action], dim=-1))

    def target_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.min(*self.critic_target(torch.cat([self.target_encoder(obs), action], dim=-1)))


class DrQ(OffPolicyWorkload):
    """DrQ on TorchBench's mock environment: train = collect + one DrQ update; eval = one greedy env step."""

    def __init__(
        self, ctx: BuildContext, agent: DrQAgent, env: MockPixelEnv, buffer: ReplayBuffer | None, cfg: DrQConfig
    ) -> None:
        super().__init__(ctx, agent, env, buffer, cfg)
        self.augment_generator = device_generator(ctx)
        if ctx.train:
            # The actor's encoder includes the shared convolutions, as in the reference (they get no actor gradient).
            actor_params = [*agent.actor_encoder.parameters(), *agent.actor.parameters()]
            self.actor_optimizer = torch.optim.Adam(actor_params, lr=cfg.lr)
            critic_params = [*agent.critic_encoder.parameters(), *agent.critic.parameters()]
            self.critic_optimizer = torch.optim.Adam(critic_params, lr=cfg.lr)
            self.alpha_optimizer = torch.optim.Adam([agent.log_alpha], lr=cfg.lr)

    @property
    def update_batch_size(self) -> int:
        return self.cfg.update_batch_size

    def train_step(self) -> torch.Tensor:
        """Collect, then the critic update on two augmented views and, every other step, actor and alpha."""
        agent, cfg = self.module, self.cfg
        self.collect()
        batch = self.buffer.sample(self.update_batch_size)
        shift = lambda x: random_shift(x.float(), cfg.image_pad, self.augment_generator)
        obs, obs_aug = shift(batch["obs"]), shift(batch["obs"])
        next_obs, next_obs_aug = shift(batch["next_obs"]), shift(batch["next_obs"])
        reward, terminal = batch["reward"], batch["terminal"]
        with torch.no_grad(), self.autocast():
            target = self.soft_td_target(next_obs, reward, terminal, cfg.discount)
            target = (target + self.soft_td_target(next_obs_aug, reward, terminal, cfg.discount)) / 2
        with self.autocast():
            critic_loss = sum(F.mse_loss(q, target) for view in (obs, obs_aug) for q in agent.q(view, batch["action"]))
        loss = optimizer_step(self.critic_optimizer, critic_loss)
        if self.updates % cfg.actor_update_frequency == 0:
            loss = loss + self.update_actor_and_alpha(obs, detach_convs=True)  # the convolutions learn from Q only
        if self.updates % cfg.critic_target_update_frequency == 0:
            polyak_update(agent.target_encoder, agent.critic_encoder, cfg.critic_tau)
            polyak_update(agent.critic_target, agent.critic, cfg.critic_tau)
        self.updates += 1
        return loss


def _create_drq(ctx: BuildContext, **kwargs) -> Workload:
    # Smoke: narrower encoder and heads (the 11.5M weights and their Adam updates set the step's
    # cost); every layer, the 84x84 frames and both augmented views kept.
    smoke = {"num_filters": 8, "feature_dim": 16, "hidden_dim": 64} if ctx.smoke else {}
    cfg = DrQConfig(**{**smoke, **kwargs})
    env = MockPixelEnv(ctx, cfg.num_envs if ctx.train else ctx.batch_size, cfg)
    agent = DrQAgent(env.obs_shape, env.action_dim, cfg).to(ctx.device)
    buffer = ReplayBuffer.for_training(
        ctx, cfg.replay_capacity, env.obs_shape, torch.uint8, env.action_dim, update_batch_size=cfg.update_batch_size
    )
    return DrQ(ctx, agent, env, buffer, cfg).warm_up()


@register_model(
    # TorchBench's DEFAULT_TRAIN/EVAL_BSIZE are 1, while its agent update samples config.batch_size
    # = 128 transitions (models/drq/config.py:30): throughput counts those 128 per training step.
    domain="rl", task="continuous_control", batch_size=(1, 1), samples_per_step=(128, None), param_count=11_470_921,
    source="Kostrikov et al., Image Augmentation Is All You Need, 2020; denisyarats/drq (MIT) as in TorchBench",
    notes="Parameters include the critic target and the log-temperature; shared convolutions count once. "
    "Eval batch = envs acting.",
)  # fmt: skip
def drq(ctx: BuildContext, **kwargs) -> Workload:
    """DrQ on 3 stacked 9x84x84 mock frames, 4-conv encoder, 1024-wide actor and twin critics."""
    return _create_drq(ctx, **kwargs)
