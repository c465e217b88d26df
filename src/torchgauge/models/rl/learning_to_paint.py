"""Learning to Paint: a DDPG painter with a differentiable neural stroke renderer.

Huang, Heng & Zhou, "Learning to Paint With Model-based Deep Reinforcement Learning", ICCV
2019 (arXiv:1903.04411); megvii-research/ICCV2019-LearningToPaint ``baseline`` (MIT license)
as in TorchBench's ``LearningToPaint``. The actor is a ResNet-18 (BatchNorm) over 9 channels
(canvas, target, step, 2 coordinate maps) that outputs 5 strokes of 13 numbers (10 shape
parameters, 3 colours); the renderer, an FCN mapping 10 shape parameters to a 128x128 stroke
map (4 linear layers, then convolutions with pixel shuffle), paints them on the canvas; the
critic is a ResNet-18 with weight norm and TReLU over 12 channels (both canvases, target,
step, coordinates); the reward comes from a WGAN-GP discriminator's target network. A train
step paints one step in a batch of environments, stores the transitions, samples a batch,
updates the discriminator, the critic and the actor (the actor's gradient passes through the
frozen renderer) and moves every target network. Target images are synthetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.parametrizations import weight_norm

from ...registry import register_model
from ...workload import BuildContext, Workload
from .envs import ReplayBuffer, device_generator
from .sac import frozen_copy, optimizer_step, polyak_update

__all__: list[str] = []

_STROKES = 5  # strokes per action
_STROKE_PARAMS = 10 + 3  # shape parameters + RGB colour


@dataclass(frozen=True)
class PaintConfig:
    """The reference's training options (baseline/train.py and TorchBench)."""

    canvas_size: int = 128  # the renderer paints 128x128 strokes
    network_width: int = 64  # first-stage channels of the actor and critic ResNet-18s (stages x1, x2, x4, x8)
    renderer_width: int = 512  # first hidden layer of the renderer's MLP (then x2, x4)
    max_step: int = 40  # strokes-steps per episode
    validate_episodes: int = 5  # episodes of one TorchBench eval call (its Evaluator)
    discount: float = 0.95**5
    tau: float = 0.001  # Polyak rate of every target network
    actor_lr: float = 1e-3
    critic_lr: float = 3e-4
    discriminator_lr: float = 3e-4
    gradient_penalty: float = 10.0  # WGAN-GP lambda
    num_images: int = 2000  # synthetic target images (TorchBench: 2000 random tensors)
    replay_capacity: int = 2000  # the reference keeps 800 episodes x 40 steps; capacity is memory only


class TReLU(nn.Module):
    """ReLU with a learned threshold: ``relu(x - a) + a``."""

    def __init__(self) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x - self.alpha) + self.alpha


class BasicBlock(nn.Module):
    """ResNet basic block: BatchNorm + ReLU (actor), or weight-normed biased convs + TReLU (critic)."""

    def __init__(self, in_planes: int, planes: int, stride: int, batch_norm: bool) -> None:
        super().__init__()
        self.conv1 = _conv(in_planes, planes, 3, stride, batch_norm)
        self.conv2 = _conv(planes, planes, 3, 1, batch_norm)
        self.act1 = nn.ReLU() if batch_norm else TReLU()
        self.act2 = nn.ReLU() if batch_norm else TReLU()
        needs_projection = stride != 1 or in_planes != planes
        self.shortcut = _conv(in_planes, planes, 1, stride, batch_norm) if needs_projection else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act2(self.conv2(self.act1(self.conv1(x))) + self.shortcut(x))


def _conv(in_planes: int, planes: int, kernel: int, stride: int, batch_norm: bool) -> nn.Module:
    """Conv without bias + BatchNorm, or weight-normed conv with bias."""
    conv = nn.Conv2d(in_planes, planes, kernel, stride, padding=kernel // 2, bias=not batch_norm)
    return nn.Sequential(conv, nn.BatchNorm2d(planes)) if batch_norm else weight_norm(conv)


class PaintResNet(nn.Module):
    """ResNet-18 (stride-2 stem and four stride-2 stages) -> global average -> linear."""

    def __init__(self, in_channels: int, num_outputs: int, batch_norm: bool, width: int = 64) -> None:
        super().__init__()
        self.stem = _conv(in_channels, width, 3, 2, batch_norm)
        self.stem_act = nn.ReLU() if batch_norm else TReLU()
        stages, in_planes = [], width
        for planes in (width, 2 * width, 4 * width, 8 * width):  # 64 .. 512
            stages += [BasicBlock(in_planes, planes, 2, batch_norm), BasicBlock(planes, planes, 1, batch_norm)]
            in_planes = planes
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(in_planes, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem_act(self.stem(x)))  # (B, 512, S/32, S/32): 4x4 at 128
        return self.fc(x.mean((2, 3)))  # the reference's avg_pool2d(x, 4) at 128x128


class StrokeRenderer(nn.Module):
    """Neural renderer: stroke parameters ``(N, 10)`` -> ``1 - stroke`` maps ``(N, S, S)``."""

    def __init__(self, canvas_size: int = 128, width: int = 512) -> None:
        super().__init__()
        self.base = canvas_size // 8  # 16 at 128: three pixel shuffles double it thrice
        w = width  # 512: the reference's 512-1024-2048 MLP
        self.fc = nn.Sequential(
            nn.Linear(10, w), nn.ReLU(), nn.Linear(w, 2 * w), nn.ReLU(),
            nn.Linear(2 * w, 4 * w), nn.ReLU(), nn.Linear(4 * w, 16 * self.base**2), nn.ReLU(),
        )  # fmt: skip
        self.convs = nn.Sequential(
            nn.Conv2d(16, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 32, 3, 1, 1), nn.PixelShuffle(2),  # (N, 8, 2b, 2b)
            nn.Conv2d(8, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, 1, 1), nn.PixelShuffle(2),  # (N, 4, 4b, 4b)
            nn.Conv2d(4, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 4, 3, 1, 1), nn.PixelShuffle(2),  # (N, 1, 8b, 8b)
        )  # fmt: skip

    def forward(self, params: torch.Tensor) -> torch.Tensor:
        x = self.fc(params).view(-1, 16, self.base, self.base)
        return 1 - torch.sigmoid(self.convs(x)).squeeze(1)


class Discriminator(nn.Module):
    """WGAN critic over (target, canvas) pairs ``(B, 6, S, S)`` -> ``(B, 1)``."""

    def __init__(self) -> None:
        super().__init__()
        widths = (6, 16, 32, 64, 128)
        layers: list[nn.Module] = []
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [weight_norm(nn.Conv2d(a, b, 5, 2, 2)), TReLU()]
        self.net = nn.Sequential(*layers, weight_norm(nn.Conv2d(128, 1, 5, 2, 2)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).mean((2, 3))  # the reference's avg_pool2d(x, 4) at 128x128


def paint(actions: torch.Tensor, canvas: torch.Tensor, renderer: StrokeRenderer) -> torch.Tensor:
    """Composite 5 rendered strokes per action ``(B, 65)`` onto ``canvas`` ``(B, 3, S, S)`` in [0, 1]."""
    strokes = actions.view(-1, _STROKE_PARAMS)  # (B*5, 13)
    alpha = 1 - renderer(strokes[:, :10])  # (B*5, S, S) stroke opacity
    size = alpha.shape[-1]
    alpha = alpha.view(-1, _STROKES, 1, size, size)
    color = alpha * strokes[:, 10:].reshape(-1, _STROKES, 3, 1, 1)  # (B, 5, 3, S, S)
    for i in range(_STROKES):
        canvas = canvas * (1 - alpha[:, i]) + color[:, i]
    return canvas


class PaintAgent(nn.Module):
    """Actor, critic, renderer, discriminator and the target networks, in one module."""

    def __init__(self, canvas_size: int, network_width: int = 64, renderer_width: int = 512) -> None:
        super().__init__()
        # canvas, target, step, coords -> 5 strokes of parameters in [0, 1]
        actor = PaintResNet(9, _STROKES * _STROKE_PARAMS, batch_norm=True, width=network_width)
        self.actor = nn.Sequential(actor, nn.Sigmoid())
        self.critic = PaintResNet(12, 1, batch_norm=False, width=network_width)  # + the canvas after the action
        self.discriminator = Discriminator()
        self.actor_target = frozen_copy(self.actor)
        self.critic_target = frozen_copy(self.critic)
        self.discriminator_target = frozen_copy(self.discriminator)
        # Pretrained and frozen in the reference: gradients pass through it, it is never updated.
        self.renderer = StrokeRenderer(canvas_size, renderer_width).requires_grad_(False)
        axis = torch.linspace(0, 1, canvas_size)
        coords = torch.stack(torch.meshgrid(axis, axis, indexing="ij")).unsqueeze(0)  # (1, 2, S, S): row, column
        self.register_buffer("coords", coords, persistent=False)


class CanvasEnv:
    """A batch of canvases each painting towards a target image; the reference's ``Paint`` env.

    State ``(B, 7, S, S)`` uint8: canvas, target, step number. All envs run in lockstep, so the
    episode boundary is a host counter and never syncs the device.
    """

    def __init__(
        self, images: torch.Tensor, batch: int, max_step: int, renderer: StrokeRenderer, generator: torch.Generator
    ) -> None:
        self.images, self.batch, self.max_step = images, batch, max_step
        self.renderer, self.generator = renderer, generator

    def reset(self) -> torch.Tensor:
        num_images, device = self.images.shape[0], self.images.device
        pick = torch.randint(0, num_images, (self.batch,), generator=self.generator, device=device)
        self.target = self.images[pick]
        self.canvas = torch.zeros_like(self.target)
        self.steps = 0
        self.last_distance = self.initial_distance = self._distance()
        return self.observation()

    def observation(self) -> torch.Tensor:
        step = torch.full_like(self.canvas[:, :1], self.steps)
        return torch.cat([self.canvas, self.target, step], dim=1)

    def _distance(self) -> torch.Tensor:
        return (((self.canvas.float() - self.target.float()) / 255) ** 2).mean((1, 2, 3))

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Paint one action per env; returns (next state, reward (B, 1), episode done)."""
        self.canvas = (paint(actions, self.canvas.float() / 255, self.renderer) * 255).byte()
        self.steps += 1
        distance = self._distance()
        reward = (self.last_distance - distance) / (self.initial_distance + 1e-8)  # relative L2 gain
        self.last_distance = distance
        return self.observation(), reward.unsqueeze(1), self.steps == self.max_step


class DDPGPainter(Workload):
    """DDPG painter: train = one env step + discriminator, critic and actor updates; eval = one painting step."""

    needs_optimizer = False
    eval_grad_mode = "no_grad"  # the reference's select_action runs under torch.no_grad()

    def __init__(
        self, ctx: BuildContext, agent: PaintAgent, env: CanvasEnv, buffer: ReplayBuffer | None, cfg: PaintConfig
    ) -> None:
        super().__init__(ctx, agent)
        self.env, self.buffer, self.cfg = env, buffer, cfg
        self.obs = env.reset()
        if ctx.train:
            self.actor_optimizer = torch.optim.Adam(agent.actor.parameters(), lr=cfg.actor_lr)
            self.critic_optimizer = torch.optim.Adam(agent.critic.parameters(), lr=cfg.critic_lr)
            self.discriminator_optimizer = torch.optim.Adam(
                agent.discriminator.parameters(), lr=cfg.discriminator_lr, betas=(0.5, 0.999)
            )

    def actor_input(self, state: torch.Tensor) -> torch.Tensor:
        """uint8 state ``(B, 7, S, S)`` -> actor input ``(B, 9, S, S)``: images in [0, 1], step / max_step, coords."""
        coords = self.module.coords.expand(state.shape[0], -1, -1, -1)
        return torch.cat([state[:, :6].float() / 255, state[:, 6:7].float() / self.cfg.max_step, coords], 1)

    def gan_reward(self, canvas: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.module.discriminator_target(torch.cat([target, canvas], 1))

    def evaluate(self, state: torch.Tensor, actions: torch.Tensor, target: bool = False) -> tuple[torch.Tensor, ...]:
        """Q of painting ``actions`` in ``state`` plus the discriminator's reward for it; returns (Q + r, r)."""
        agent = self.module
        canvas0, goal = state[:, :3].float() / 255, state[:, 3:6].float() / 255
        canvas1 = paint(actions, canvas0, agent.renderer)
        reward = self.gan_reward(canvas1, goal) - self.gan_reward(canvas0, goal)
        step = (state[:, 6:7].float() + 1) / self.cfg.max_step
        merged = torch.cat([canvas0, canvas1, goal, step, agent.coords.expand(state.shape[0], -1, -1, -1)], 1)
        q = (agent.critic_target if target else agent.critic)(merged)
        return q + reward, reward

    def forward(self) -> torch.Tensor:
        """The actor proposes strokes for every canvas and the renderer paints them; returns the canvases."""
        actions = self.module.actor(self.actor_input(self.obs))
        self.obs, _, done = self.env.step(actions)
        if done:
            self.obs = self.env.reset()
        return self.env.canvas.float() / 255

    def update_discriminator(self, state: torch.Tensor) -> torch.Tensor:
        """WGAN-GP step: (target, target) pairs are real, (target, canvas) fake."""
        agent = self.module
        canvas, goal = state[:, :3].float() / 255, state[:, 3:6].float() / 255
        real, fake = torch.cat([goal, goal], 1), torch.cat([goal, canvas], 1)
        mix = torch.rand(real.shape[0], 1, 1, 1, generator=self.buffer.generator, device=self.device)
        interpolates = (mix * real + (1 - mix) * fake).requires_grad_(True)
        with self.autocast():
            d_real, d_fake = agent.discriminator(real), agent.discriminator(fake)
            d_mix = agent.discriminator(interpolates)
        (grads,) = torch.autograd.grad(d_mix.sum(), interpolates, create_graph=True)
        penalty = ((grads.flatten(1).norm(2, dim=1) - 1) ** 2).mean() * self.cfg.gradient_penalty
        loss = optimizer_step(self.discriminator_optimizer, d_fake.mean() - d_real.mean() + penalty)
        polyak_update(agent.discriminator_target, agent.discriminator, self.cfg.tau)
        return loss

    def train_step(self) -> torch.Tensor:
        """Returns the summed discriminator, critic and actor losses."""
        agent, cfg = self.module, self.cfg
        with torch.no_grad():
            actions = agent.actor(self.actor_input(self.obs))
            next_obs, reward, done = self.env.step(actions)
            terminal = torch.full_like(reward, float(done))
            self.buffer.add(obs=self.obs, action=actions, reward=reward, next_obs=next_obs, terminal=terminal)
            self.obs = self.env.reset() if done else next_obs
        batch = self.buffer.sample(self.batch_size)
        state, next_state = batch["obs"], batch["next_obs"]
        d_loss = self.update_discriminator(next_state)

        with torch.no_grad(), self.autocast():
            next_actions = agent.actor_target(self.actor_input(next_state))
            target_q, _ = self.evaluate(next_state, next_actions, target=True)
            target_q = cfg.discount * (1 - batch["terminal"]) * target_q
        with self.autocast():
            current_q, step_reward = self.evaluate(state, batch["action"])
            critic_loss = F.mse_loss(current_q, target_q + step_reward.detach())
        loss = d_loss + optimizer_step(self.critic_optimizer, critic_loss)

        with self.autocast():
            policy_q, _ = self.evaluate(state, agent.actor(self.actor_input(state)))
            actor_loss = -policy_q.mean()
        loss = loss + optimizer_step(self.actor_optimizer, actor_loss)

        polyak_update(agent.actor_target, agent.actor, cfg.tau)
        polyak_update(agent.critic_target, agent.critic, cfg.tau)
        return loss


class PaintingRollout(DDPGPainter):
    """TorchBench's LearningToPaint: train = one acting and painting step, its transitions stored
    (no update); eval = ``validate_episodes`` episodes of ``max_step`` painting steps."""

    updates_parameters = False  # the reference's train() never reaches its update_policy calls
    computes_gradients = False  # ... and acts under no_grad: no gradient either

    def act(self, state: torch.Tensor) -> torch.Tensor:
        """The reference's ``select_action``: the actor in eval mode, under no_grad."""
        actor = self.module.actor
        was_training = actor.training
        actor.eval()
        try:
            with torch.no_grad(), self.autocast():
                return actor(self.actor_input(state))
        finally:
            actor.train(was_training)

    def train_step(self) -> torch.Tensor:
        """One step of every env, transitions stored; returns the mean reward."""
        actions = self.act(self.obs)
        with torch.no_grad():
            next_obs, reward, done = self.env.step(actions)
            terminal = torch.full_like(reward, float(done))
            self.buffer.add(obs=self.obs, action=actions, reward=reward, next_obs=next_obs, terminal=terminal)
        self.obs = next_obs  # the reference never resets here: its episode end is never reached
        return reward.mean()

    def forward(self) -> torch.Tensor:
        """The Evaluator's episodes; returns the last episode's final canvases."""
        for _ in range(self.cfg.validate_episodes):
            self.obs = self.env.reset()
            for _ in range(self.cfg.max_step):
                self.obs, _, _ = self.env.step(self.act(self.obs))
        return self.env.canvas.float() / 255


def _create_learning_to_paint(ctx: BuildContext, workload: type[DDPGPainter], **kwargs) -> Workload:
    # Smoke: 32x32 canvases and a quarter of the actor, critic and renderer-MLP widths (their 22M
    # and 2.6M weights, with Adam and the Polyak updates of the targets, set the smoke step's
    # cost); every layer kept; an evaluation of 2 episodes of 2 steps.
    smoke = {"network_width": 16, "renderer_width": 128, "max_step": 2, "validate_episodes": 2} if ctx.smoke else {}
    cfg = PaintConfig(**{**smoke, **kwargs})
    size = ctx.pick(cfg.canvas_size, 32)
    agent = PaintAgent(size, cfg.network_width, cfg.renderer_width).to(ctx.device)
    images = ctx.randint(0, 256, (ctx.pick(cfg.num_images, 8), 3, size, size), dtype=torch.uint8)
    env = CanvasEnv(images, ctx.batch_size, cfg.max_step, agent.renderer, device_generator(ctx))
    action_dim = _STROKES * _STROKE_PARAMS
    buffer = ReplayBuffer.for_training(ctx, cfg.replay_capacity, (7, size, size), torch.uint8, action_dim)
    return workload(ctx, agent, env, buffer, cfg)


@register_model(
    domain="rl", task="painting", batch_size=(96, 96), param_count=56_367_838,
    source="Huang et al., Learning to Paint With Model-based Deep RL, ICCV 2019; "
    "megvii-research/ICCV2019-LearningToPaint (MIT) as in TorchBench",
    notes="Parameters include renderer, discriminator and all target networks. Batch = canvases painted at once. "
    "Train: one acting/painting step (TorchBench's train never updates); eval: 5 episodes of 40 steps.",
)  # fmt: skip
def LearningToPaint(ctx: BuildContext, **kwargs) -> Workload:  # noqa: N802  (TorchBench's model name)
    """TorchBench's painter rollout: ResNet-18 actor and neural renderer on 128x128 canvases."""
    return _create_learning_to_paint(ctx, PaintingRollout, **kwargs)


@register_model(
    domain="rl", task="painting", batch_size=(96, 96), param_count=56_367_838,
    source="Huang et al., Learning to Paint With Model-based Deep RL, ICCV 2019; "
    "megvii-research/ICCV2019-LearningToPaint (MIT)",
    notes="Train: one env step + a DDPG update (discriminator, critic, actor, targets); eval: one painting step.",
)  # fmt: skip
def learning_to_paint_ddpg(ctx: BuildContext, **kwargs) -> Workload:
    """DDPG painter: ResNet-18 actor and critic, WGAN-GP reward, neural renderer, 128x128 canvases."""
    return _create_learning_to_paint(ctx, DDPGPainter, **kwargs)
