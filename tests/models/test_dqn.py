"""Nature DQN: epsilon-greedy, the Huber TD loss by hand, target refreshes, learning on a fixed batch."""

from __future__ import annotations

import torch
from torch.nn import functional as F

import torchgauge
from torchgauge.models.rl.dqn import epsilon_greedy


def test_epsilon_greedy_extremes_and_rate() -> None:
    q = torch.tensor([[0.0, 3.0, 1.0, 2.0]]).expand(20_000, 4)
    g = torch.Generator().manual_seed(0)
    assert (epsilon_greedy(q, 0.0, g) == 1).all()
    uniform = torch.bincount(epsilon_greedy(q, 1.0, g), minlength=4) / 20_000
    torch.testing.assert_close(uniform, torch.full((4,), 0.25), atol=0.02, rtol=0)
    not_greedy = (epsilon_greedy(q, 0.05, g) != 1).float().mean()
    assert abs(not_greedy - 0.05 * 3 / 4) < 0.01  # a random action is the greedy one 1/4 of the time


def _fixed_batch(w) -> dict[str, torch.Tensor]:
    batch = w.buffer.sample(w.batch_size)
    w.buffer.sample = lambda n: batch  # the same minibatch every step
    return batch


def test_loss_is_huber_of_the_td_error_against_the_target_network() -> None:
    w = torchgauge.create("dqn_nature", mode="train", size="smoke")
    batch = _fixed_batch(w)
    with torch.no_grad():
        w.module.target_network.network[-1].bias.add_(0.5)  # target differs from online
        q_next = w.module.target_network(batch["next_obs"]).max(1).values
        target = batch["reward"][:, 0] + 0.99 * q_next * (1 - batch["terminal"][:, 0])
        q = w.module.q_network(batch["obs"]).gather(1, batch["action"])[:, 0]
        err = (q - target).abs()
        expected = torch.where(err < 1, 0.5 * err**2, err - 0.5).mean()
    torch.testing.assert_close(w.step(), expected)
    assert torch.isclose(expected, F.smooth_l1_loss(q, target))


def test_target_network_is_refreshed_every_target_update_steps() -> None:
    w = torchgauge.create("dqn_nature", mode="train", size="smoke", target_update=2)
    online, target = w.module.q_network, w.module.target_network

    def same() -> bool:
        return all(torch.equal(a, b) for a, b in zip(online.parameters(), target.parameters()))

    w.step()  # update 0: refresh after the step
    assert same()
    w.step()  # update 1: online moved, target kept
    assert not same()
    w.step()  # update 2: refresh
    assert same()
    assert not any(p.requires_grad for p in target.parameters())


def test_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("dqn_nature", mode="train", size="smoke")
    _fixed_batch(w)
    losses = [w.step().item() for _ in range(30)]
    assert losses[-1] < 0.75 * losses[0]
