"""Proximal Policy Optimization (Schulman, Wolski, Dhariwal, Radford & Klimov, 2017, arXiv:1707.06347).

As CleanRL writes it (vwxyzjn/cleanrl, MIT), in its two reference scripts:

- ``ppo_continuous_action.py`` (MuJoCo, here HalfCheetah's sizes: 17-d observation, 6-d
  action): separate 64-64 tanh MLPs for the critic and the action mean, a state-independent
  log-std parameter, a diagonal ``torch.distributions.Normal`` policy (``log_prob`` and
  ``entropy`` summed over the action dimensions). 1 env x 2048 steps per rollout, 10 epochs
  of 32 minibatches (64 samples), clip 0.2, no entropy bonus (``ent_coef 0``), Adam 3e-4.
- ``ppo_atari.py`` (Breakout, 4 actions): the Nature-CNN torso on ``4 x 84 x 84`` stacked
  frames scaled by 1/255, linear actor and critic heads, a ``torch.distributions.Categorical``
  policy. 8 envs x 128 steps, 4 epochs of 4 minibatches (256 samples), clip 0.1,
  ``ent_coef 0.01``, Adam 2.5e-4.

Both: orthogonal init (gain sqrt 2; 0.01 for the policy head, 1 for the value head), Adam
with eps 1e-5, GAE (gamma 0.99, lambda 0.95), per-minibatch advantage normalisation, the
clipped surrogate, the clipped value loss (``vf_coef 0.5``), ``clip_grad_norm_(0.5)``.

One train step is one PPO iteration's learning phase on a stored rollout: bootstrap value of
the last observation, GAE by the reference's backward loop over time, then ``update_epochs``
passes over ``num_minibatches`` shuffled minibatches (``torch.randperm`` for the reference's
``np.random.shuffle``), each a full zero_grad/forward/loss/backward/clip/Adam update. The
rollout is synthetic and made once at build time (no MuJoCo / ALE): Gaussian observations
(continuous) or random frames (Atari, stored as float as CleanRL's buffer), actions, log-probs
and values from the initial policy, unit-Gaussian rewards, episode ends with probability 1/1000
(continuous, HalfCheetah's 1000-step episodes) or 1/100 (Atari). Eval step = the rollout's
acting step: ``get_action_and_value`` on one observation per env under ``no_grad``.

``ppo_beta_continuous`` swaps the Gaussian for the Beta policy of Chou, Maturana & Scherer
("Improving Stochastic Policy Gradients in Continuous Control with Deep Reinforcement Learning
using the Beta Distribution", ICML 2017): the actor's last layer outputs ``2 * action_dim``
values, ``alpha = softplus + 1`` and ``beta = softplus + 1`` (both >= 1, so the Beta is
unimodal), a ``torch.distributions.Beta`` over ``[0, 1]`` gives sample / ``log_prob`` /
``entropy`` (summed over the action dimensions, as the Normal's), and the acting step maps the
sample affinely onto the action bounds (HalfCheetah's ``[-1, 1]``). The rollout keeps the
``[0, 1]`` sample, whose Beta density the ratio uses (the affine map's Jacobian cancels in it).
Everything else is ppo_continuous's: the paper uses TRPO/ACER, and there is no reference PPO
script for it; here it is CleanRL's PPO with only the policy distribution changed.

Differences: the learning-rate annealing and the logged statistics (approximate KL, clip
fraction; ``.item()`` each minibatch) are left out; the batch (``num_envs * num_steps``,
CleanRL's ``batch_size``) is the train batch size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.distributions import Beta, Categorical, Normal
from torch.nn import functional as F

from ...registry import register_model
from ...workload import BuildContext, Workload
from .envs import device_generator

__all__ = ["AtariAgent", "BetaAgent", "ContinuousAgent", "PPOConfig", "RolloutBuffer", "gae", "layer_init", "tanh_mlp"]


@dataclass(frozen=True)
class PPOConfig:
    """ppo_continuous_action.py defaults; :data:`ATARI` overrides them with ppo_atari.py's."""

    obs_dim: int = 17  # HalfCheetah-v4
    action_dim: int = 6  # HalfCheetah-v4 (continuous) / Breakout's 4 actions (discrete)
    discrete: bool = False
    beta_policy: bool = False  # Beta policy over the action bounds (Chou et al. 2017) instead of the Normal
    action_bound: float = 1.0  # continuous actions lie in [-action_bound, action_bound] (HalfCheetah: 1)
    num_envs: int = 1
    num_minibatches: int = 32
    update_epochs: int = 10
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    done_prob: float = 1e-3  # synthetic episode ends: HalfCheetah's 1000-step episodes
    frame_size: int = 84  # Atari frames are frame_size x frame_size (84 in the reference)


ATARI = dict(action_dim=4, discrete=True, num_envs=8, num_minibatches=4, update_epochs=4, learning_rate=2.5e-4,
             clip_coef=0.1, ent_coef=0.01, done_prob=1e-2)  # fmt: skip
FRAME_STACK = 4  # Atari observations: the last 4 grey frames


def nature_cnn_side(frame_size: int) -> int:
    """Side of the Nature-CNN's last feature map: 84 -> 20 -> 9 -> 7."""
    return ((frame_size - 8) // 4 + 1 - 4) // 2 + 1 - 2


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    """CleanRL's init: orthogonal weights with gain ``std``, constant bias."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def tanh_mlp(in_dim: int, hidden: int, out_dim: int, out_std: float) -> nn.Sequential:
    """CleanRL's two-hidden-layer tanh MLP, orthogonal init (output layer scaled by ``out_std``)."""
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden)), nn.Tanh(),
        layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
        layer_init(nn.Linear(hidden, out_dim), std=out_std),
    )  # fmt: skip


class ContinuousAgent(nn.Module):
    """Observations ``(B, obs_dim)`` -> diagonal Normal policy over ``(B, action_dim)`` and value ``(B, 1)``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.critic = tanh_mlp(obs_dim, hidden, 1, out_std=1.0)
        self.actor_mean = tanh_mlp(obs_dim, hidden, action_dim, out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Action ``(B, A)`` (sampled if not given), its log-prob ``(B,)``, entropy ``(B,)``, value ``(B, 1)``."""
        action_mean = self.actor_mean(x)
        action_std = torch.exp(self.actor_logstd.expand_as(action_mean))
        probs = Normal(action_mean, action_std)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


class BetaAgent(nn.Module):
    """Observations ``(B, obs_dim)`` -> Beta policy over ``[0, 1]^action_dim`` and value ``(B, 1)``.

    Same critic and actor MLPs as :class:`ContinuousAgent`; the actor's head outputs ``alpha`` and
    ``beta`` for each action dimension and there is no log-std parameter.
    """

    def __init__(self, obs_dim: int, action_dim: int, action_bound: float = 1.0, hidden: int = 64) -> None:
        super().__init__()
        self.critic = tanh_mlp(obs_dim, hidden, 1, out_std=1.0)
        self.actor = tanh_mlp(obs_dim, hidden, 2 * action_dim, out_std=0.01)
        self.action_bound = action_bound

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def distribution(self, x: torch.Tensor) -> Beta:
        alpha, beta = self.actor(x).chunk(2, dim=-1)  # (B, A) each
        return Beta(F.softplus(alpha) + 1.0, F.softplus(beta) + 1.0)  # alpha, beta >= 1: unimodal

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Action ``(B, A)`` in [0, 1] (sampled if not given), log-prob ``(B,)``, entropy ``(B,)``, value ``(B, 1)``."""
        probs = self.distribution(x)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)

    def scale_action(self, action: torch.Tensor) -> torch.Tensor:
        """``[0, 1]`` -> ``[-action_bound, action_bound]``, the environment's action."""
        return (2.0 * action - 1.0) * self.action_bound


class AtariAgent(nn.Module):
    """Frames ``(B, 4, 84, 84)`` in [0, 255] -> Categorical policy over the actions and value ``(B, 1)``."""

    def __init__(self, num_actions: int, frame_size: int = 84) -> None:
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),  # (B, 32, 20, 20)
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),  # (B, 64, 9, 9)
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),  # (B, 64, 7, 7)
            nn.Flatten(),
            layer_init(nn.Linear(64 * nature_cnn_side(frame_size) ** 2, 512)), nn.ReLU(),
        )  # fmt: skip
        self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1.0)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.network(x / 255.0))

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Action ``(B,)`` (sampled if not given), its log-prob ``(B,)``, entropy ``(B,)``, value ``(B, 1)``."""
        hidden = self.network(x / 255.0)
        probs = Categorical(logits=self.actor(hidden))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


@dataclass
class RolloutBuffer:
    """One rollout, time-major ``(num_steps, num_envs, ...)``, plus the observation after it."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor  # dones[t] = 1 if obs[t] starts a new episode (CleanRL's next_done at step t)
    values: torch.Tensor
    next_obs: torch.Tensor  # (num_envs, ...)
    next_done: torch.Tensor  # (num_envs,)


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    next_done: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and returns ``(T, N)`` by the reference's backward loop."""
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    num_steps = rewards.size(0)
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal, nextvalues = 1.0 - next_done, next_value
        else:
            nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


class PPO(Workload):
    """Train: GAE + ``update_epochs x num_minibatches`` PPO updates; eval: one acting step per env."""

    eval_grad_mode = "no_grad"  # the rollout acts under torch.no_grad()

    @property
    def max_grad_norm(self) -> float:
        return self.cfg.max_grad_norm  # CleanRL: clip_grad_norm_(agent.parameters(), 0.5) per minibatch

    def __init__(
        self, ctx: BuildContext, agent: nn.Module, obs: torch.Tensor, buffer: RolloutBuffer | None, cfg: PPOConfig
    ) -> None:
        opt = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5) if ctx.train else None
        super().__init__(ctx, agent, (obs,), optimizer=opt)
        self.buffer, self.cfg = buffer, cfg
        self.generator = device_generator(ctx)  # minibatch shuffling

    def forward(self) -> tuple[torch.Tensor, ...]:
        return self.module.get_action_and_value(self.inputs[0])

    def minibatch_loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        logprobs: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
    ) -> torch.Tensor:
        """Clipped surrogate + clipped value loss - entropy bonus on one minibatch."""
        cfg = self.cfg
        _, newlogprob, entropy, newvalue = self.module.get_action_and_value(obs, actions)
        ratio = (newlogprob - logprobs).exp()
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        pg_loss1 = -advantages * ratio
        pg_loss2 = -advantages * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
        pg_loss = torch.max(pg_loss1, pg_loss2).mean()
        newvalue = newvalue.view(-1)
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = values + torch.clamp(newvalue - values, -cfg.clip_coef, cfg.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
        return pg_loss - cfg.ent_coef * entropy.mean() + v_loss * cfg.vf_coef

    def train_step(self) -> torch.Tensor:
        cfg, b, agent = self.cfg, self.buffer, self.module
        with torch.no_grad():
            with self.autocast():
                next_value = agent.get_value(b.next_obs).reshape(1, -1)
            advantages, returns = gae(b.rewards, b.values, b.dones, next_value, b.next_done, cfg.gamma, cfg.gae_lambda)
        batch = b.rewards.numel()
        flat = (b.obs.flatten(0, 1), b.actions.flatten(0, 1), b.logprobs.reshape(-1), advantages.reshape(-1),
                returns.reshape(-1), b.values.reshape(-1))  # fmt: skip
        minibatch = batch // cfg.num_minibatches
        for _ in range(cfg.update_epochs):
            b_inds = torch.randperm(batch, generator=self.generator, device=self.device)
            for start in range(0, batch, minibatch):
                mb_inds = b_inds[start : start + minibatch]
                with self.autocast():
                    loss = self.minibatch_loss(*(t[mb_inds] for t in flat))
                self.optimizer.zero_grad()
                self.backward_and_step(loss)  # gradient norm clipped at cfg.max_grad_norm
        return loss.detach()


class BetaPPO(PPO):
    """PPO with :class:`BetaAgent`: the acting step hands the environment the rescaled action."""

    def forward(self) -> tuple[torch.Tensor, ...]:
        action, logprob, entropy, value = self.module.get_action_and_value(self.inputs[0])
        return self.module.scale_action(action), logprob, entropy, value


def _observations(ctx: BuildContext, cfg: PPOConfig, *batch: int) -> torch.Tensor:
    if cfg.discrete:  # frames as CleanRL's float32 buffer holds them: integers in [0, 255]
        return ctx.randint(0, 256, (*batch, FRAME_STACK, cfg.frame_size, cfg.frame_size)).float()
    return ctx.randn(*batch, cfg.obs_dim)


@torch.no_grad()
def _synthetic_rollout(ctx: BuildContext, agent: nn.Module, cfg: PPOConfig, num_steps: int) -> RolloutBuffer:
    """A rollout of ``num_steps x num_envs`` with the initial policy's actions, log-probs and values."""
    obs = _observations(ctx, cfg, num_steps, cfg.num_envs)
    actions, logprobs, _, values = agent.get_action_and_value(obs.flatten(0, 1))
    shape = (num_steps, cfg.num_envs)
    dones = (ctx.rand(*shape) < cfg.done_prob).float()
    return RolloutBuffer(
        obs=obs, actions=actions.view(*shape, *actions.shape[1:]), logprobs=logprobs.view(shape),
        rewards=ctx.randn(*shape), dones=dones, values=values.view(shape),
        next_obs=_observations(ctx, cfg, cfg.num_envs), next_done=torch.zeros(cfg.num_envs, device=ctx.device),
    )  # fmt: skip


def _create_ppo(ctx: BuildContext, preset: dict, **kwargs) -> Workload:
    # smoke: 36x36 frames (a 1x1 last feature map), 2 epochs x 2 minibatches
    smoke = dict(num_minibatches=2, update_epochs=2, num_envs=min(PPOConfig(**preset).num_envs, 2), frame_size=36)
    cfg = replace(PPOConfig(**preset), **{**(smoke if ctx.smoke else {}), **kwargs})
    if cfg.discrete:
        agent = AtariAgent(cfg.action_dim, cfg.frame_size)
    elif cfg.beta_policy:
        agent = BetaAgent(cfg.obs_dim, cfg.action_dim, cfg.action_bound)
    else:
        agent = ContinuousAgent(cfg.obs_dim, cfg.action_dim)
    agent.to(ctx.device)
    rollout = 16 if ctx.smoke and not ctx.batch_size_given else ctx.batch_size  # num_envs * num_steps
    buffer = _synthetic_rollout(ctx, agent, cfg, max(rollout // cfg.num_envs, 1)) if ctx.train else None
    obs = _observations(ctx, cfg, ctx.batch_size)  # eval: one observation per env acting
    return (BetaPPO if cfg.beta_policy else PPO)(ctx, agent, obs, buffer, cfg)


_NOTES = ("One train step = GAE + every minibatch update of one PPO iteration on a synthetic rollout of "
          "`batch` transitions (made at build time); eval batch = envs acting.")  # fmt: skip


@register_model(domain="rl", task="continuous_control", batch_size=(2048, 1), param_count=11_085,
                source="Schulman et al., Proximal Policy Optimization Algorithms, 2017; CleanRL "
                       "ppo_continuous_action.py (MIT)",
                notes=f"{_NOTES} HalfCheetah sizes (17-d observation, 6-d action); parameter count of the "
                      "reference Agent at those sizes.")  # fmt: skip
def ppo_continuous(ctx: BuildContext, **kwargs) -> Workload:
    """PPO, diagonal-Normal 64-64 tanh actor and critic, 10 epochs x 32 minibatches of a 2048-step rollout."""
    return _create_ppo(ctx, {}, **kwargs)


@register_model(
    domain="rl",
    task="atari",
    batch_size=(1024, 8),
    param_count=1_686_693,
    source="Schulman et al., Proximal Policy Optimization Algorithms, 2017; CleanRL ppo_atari.py (MIT)",
    notes=f"{_NOTES} Breakout's 4 actions; 8 envs x 128 steps; random 4x84x84 frames.",
)
def ppo_atari(ctx: BuildContext, **kwargs) -> Workload:
    """PPO, Nature-CNN with Categorical policy, 4 epochs x 4 minibatches of an 8 x 128-step rollout."""
    return _create_ppo(ctx, ATARI, **kwargs)


@register_model(domain="rl", task="continuous_control", batch_size=(2048, 1), param_count=11_469,
                source="Chou, Maturana & Scherer, Improving Stochastic Policy Gradients in Continuous Control "
                       "with Deep Reinforcement Learning using the Beta Distribution, ICML 2017; PPO as CleanRL "
                       "ppo_continuous_action.py (MIT)",
                unsupported_precisions=("fp16", "bf16", "amp"),
                notes=f"{_NOTES} HalfCheetah sizes; ppo_continuous with a Beta policy (softplus + 1 "
                      "concentrations); parameter count computed from the architecture: the 64-64 critic "
                      "(5,377) and actor with a 12-output head (6,092), no log-std. fp16/bf16/amp unsupported: "
                      "the Beta's sampler (torch._sample_dirichlet) has no half/bfloat16 CPU kernel.")  # fmt: skip
def ppo_beta_continuous(ctx: BuildContext, **kwargs) -> Workload:
    """PPO with a Beta policy over the action bounds, otherwise as ppo_continuous."""
    return _create_ppo(ctx, dict(beta_policy=True), **kwargs)
