"""Deep Q-Network (Mnih et al., "Human-level control through deep reinforcement learning", Nature 2015).

The Nature agent as its paper and DeepMind's released code (``NeuralQLearner.lua``) describe
it, in the layout of CleanRL's ``dqn_atari.py`` (vwxyzjn/cleanrl, MIT): the Nature CNN
(``4 x 84 x 84`` frames scaled by 1/255, convolutions 32x8x8/4, 64x4x4/2, 64x3x3/1, a
512-unit layer, one output per action; PyTorch's default init), a target network that is a
frozen copy refreshed every 10,000 updates, and uniform experience replay with minibatches of
32. The loss is the paper's: the TD error clipped to [-1, 1] in the gradient, i.e. the Huber
loss (``F.huber_loss``, delta 1) between ``Q(s, a)`` and ``r + 0.99 (1 - done) max_a' Q_target(s', a')``.
The optimizer is the paper's RMSProp (lr 2.5e-4, squared- and plain-gradient momentum 0.95,
min squared gradient 0.01): ``torch.optim.RMSprop(alpha=0.95, eps=0.01, centered=True)``.
DeepMind's variant adds the 0.01 inside the square root (``g / sqrt(E[g^2] - E[g]^2 + 0.01)``),
torch's outside (``g / (sqrt(E[g^2] - E[g]^2) + 0.01)``); the work per step is the same.
(CleanRL instead uses Adam 1e-4 and the squared error, Dopamine's Rainbow Adam; we follow the paper.)

One train step is one learning update (the reference's every-4th-frame update): sample 32
transitions from replay, the target network's bootstrap, the Huber loss, RMSProp, and the
target refresh check. The replay memory (10,000 transitions on the device, uint8 frames as
the reference stores them; the paper keeps 1M in host memory, which changes only the sampling
range) is filled at build time with a synthetic trajectory: random frames, each observation
the last 4 of them, random actions, rewards clipped to {-1, 0, 1} as the paper does, episode
ends with probability 1/100. No emulator. Eval step = the paper's evaluation policy for a
batch of environments: epsilon-greedy with epsilon 0.05 on the Q-network's outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from ...registry import register_model
from ...workload import BuildContext, Workload
from .envs import ReplayBuffer, device_generator
from .ppo import FRAME_STACK, nature_cnn_side
from .sac import frozen_copy

__all__ = ["DQNConfig", "QNetwork", "epsilon_greedy"]


@dataclass(frozen=True)
class DQNConfig:
    """Nature DQN hyperparameters (Extended Data Table 1)."""

    num_actions: int = 4  # Breakout's minimal action set
    frame_size: int = 84
    gamma: float = 0.99
    learning_rate: float = 2.5e-4
    rmsprop_momentum: float = 0.95  # squared- and plain-gradient momentum (torch's alpha)
    min_squared_gradient: float = 0.01  # torch's eps
    target_update: int = 10_000  # updates between target-network refreshes
    eval_epsilon: float = 0.05
    replay_capacity: int = 10_000  # on the device (the paper: 1M in host memory)
    terminal_prob: float = 0.01  # synthetic episode ends


class QNetwork(nn.Module):
    """Frames ``(B, 4, S, S)`` with values in [0, 255] -> action values ``(B, num_actions)``."""

    def __init__(self, num_actions: int, frame_size: int = 84) -> None:
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(FRAME_STACK, 32, 8, stride=4), nn.ReLU(),  # (B, 32, 20, 20)
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),  # (B, 64, 9, 9)
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),  # (B, 64, 7, 7)
            nn.Flatten(),
            nn.Linear(64 * nature_cnn_side(frame_size) ** 2, 512), nn.ReLU(),
            nn.Linear(512, num_actions),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x / 255.0)


class DQNAgent(nn.Module):
    """The online Q-network and its frozen target copy."""

    def __init__(self, cfg: DQNConfig) -> None:
        super().__init__()
        self.q_network = QNetwork(cfg.num_actions, cfg.frame_size)
        self.target_network = frozen_copy(self.q_network)


def epsilon_greedy(q_values: torch.Tensor, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    """Per row: a uniformly random action with probability ``epsilon``, else ``argmax Q`` ``(B,)``."""
    b, num_actions = q_values.shape
    explore = torch.rand(b, generator=generator, device=q_values.device) < epsilon
    random_actions = torch.randint(0, num_actions, (b,), generator=generator, device=q_values.device)
    return torch.where(explore, random_actions, q_values.argmax(dim=1))


class DQN(Workload):
    """Train: one replay update of the online network; eval: epsilon-greedy actions for a batch of envs."""

    eval_grad_mode = "no_grad"  # acting runs under torch.no_grad()

    def __init__(
        self, ctx: BuildContext, agent: DQNAgent, obs: torch.Tensor, buffer: ReplayBuffer | None, cfg: DQNConfig
    ) -> None:
        opt = None
        if ctx.train:
            opt = torch.optim.RMSprop(agent.q_network.parameters(), lr=cfg.learning_rate, alpha=cfg.rmsprop_momentum,
                                      eps=cfg.min_squared_gradient, centered=True)  # fmt: skip
        super().__init__(ctx, agent, (obs,), optimizer=opt)
        self.buffer, self.cfg = buffer, cfg
        self.generator = device_generator(ctx)
        self.updates = 0

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions ``(B,)`` and the action values ``(B, A)`` they were chosen from."""
        q_values = self.module.q_network(self.inputs[0])
        return epsilon_greedy(q_values, self.cfg.eval_epsilon, self.generator), q_values

    def train_step(self) -> torch.Tensor:
        agent, cfg = self.module, self.cfg
        data = self.buffer.sample(self.batch_size)
        with self.autocast():
            with torch.no_grad():
                target_max, _ = agent.target_network(data["next_obs"]).max(dim=1)
                td_target = data["reward"].flatten() + cfg.gamma * target_max * (1 - data["terminal"].flatten())
            old_val = agent.q_network(data["obs"]).gather(1, data["action"]).squeeze(1)
            loss = F.huber_loss(old_val, td_target)
        self.optimizer.zero_grad()
        self.backward_and_step(loss)
        if self.updates % cfg.target_update == 0:
            agent.target_network.load_state_dict(agent.q_network.state_dict())
        self.updates += 1
        return loss.detach()


def _fill_replay(ctx: BuildContext, cfg: DQNConfig, capacity: int) -> ReplayBuffer:
    """A replay memory holding ``capacity`` transitions of one synthetic trajectory."""
    shape = (FRAME_STACK, cfg.frame_size, cfg.frame_size)
    buffer = ReplayBuffer(capacity, ctx.device, device_generator(ctx), obs=(shape, torch.uint8),
                          next_obs=(shape, torch.uint8), action=((1,), torch.long), reward=((1,), torch.float32),
                          terminal=((1,), torch.float32))  # fmt: skip
    frames = ctx.randint(0, 256, (capacity + FRAME_STACK, cfg.frame_size, cfg.frame_size), dtype=torch.uint8)
    stacks = frames.unfold(0, FRAME_STACK, 1).permute(0, 3, 1, 2)  # (capacity + 1, 4, S, S): frames t .. t + 3
    chunk = 1024  # add in slices to bound the temporary copies
    for start in range(0, capacity, chunk):
        n = min(chunk, capacity - start)
        buffer.add(obs=stacks[start : start + n], next_obs=stacks[start + 1 : start + 1 + n],
                   action=ctx.randint(0, cfg.num_actions, (n, 1)), reward=ctx.randint(-1, 2, (n, 1)).float(),
                   terminal=(ctx.rand(n, 1) < cfg.terminal_prob).float())  # fmt: skip
    return buffer


def _create_dqn(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(frame_size=36, replay_capacity=64) if ctx.smoke else {}  # 36x36: a 1x1 last feature map
    cfg = replace(DQNConfig(), **{**smoke, **kwargs})
    agent = DQNAgent(cfg).to(ctx.device)
    buffer = _fill_replay(ctx, cfg, cfg.replay_capacity) if ctx.train else None
    obs = ctx.randint(0, 256, (ctx.batch_size, FRAME_STACK, cfg.frame_size, cfg.frame_size), dtype=torch.uint8)
    return DQN(ctx, agent, obs, buffer, cfg)


@register_model(
    domain="rl",
    task="atari",
    batch_size=(32, 32),
    param_count=3_372_360,
    source="Mnih et al., Human-level control through deep reinforcement learning, Nature 2015; "
    "CleanRL dqn_atari.py (MIT) layout",
    unsupported_precisions=("fp16", "bf16"),
    notes="Parameters include the target network (2 x 1,686,180, Breakout's 4 actions). Train batch = "
    "replay minibatch; eval batch = envs acting epsilon-greedily (0.05). Synthetic replay of "
    "10,000 random-frame transitions. fp16/bf16 unsupported: the uint8 frames / 255 give fp32 "
    "inputs, as in the reference (amp works).",
)
def dqn_nature(ctx: BuildContext, **kwargs) -> Workload:
    """Nature DQN: Nature CNN, Huber loss, centered RMSProp, target network, uniform replay."""
    return _create_dqn(ctx, **kwargs)
