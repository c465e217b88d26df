"""expRNN: the exponential of the skew parameter is orthogonal, Cayley blocks rotate, modReLU by hand."""

from __future__ import annotations

import math

import torch

import torchgauge
from torchgauge.models.other.sequence.exprnn import ExpRNN, ExpRNNConfig, ModReLU, cayley_init_, henaff_init_

F64 = torch.float64


def test_cayley_init_is_block_skew_with_tangent_half_angles() -> None:
    torch.manual_seed(0)
    a = cayley_init_(torch.empty(6, 6, dtype=F64))
    torch.testing.assert_close(a, -a.T)
    s = a.diagonal(1)[::2]
    assert (s <= 0).all() and (s >= -1).all()  # -tan(t / 2) for t in [0, pi / 2]
    mask = torch.zeros(6, 6, dtype=torch.bool)
    for k in range(3):
        mask[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = True
    assert (a[~mask] == 0).all()


def test_matrix_exp_of_a_block_skew_matrix_is_the_block_rotation() -> None:
    torch.manual_seed(0)
    a = henaff_init_(torch.empty(4, 4, dtype=F64))
    expected = torch.zeros(4, 4, dtype=F64)
    for k in range(2):
        s = a[2 * k, 2 * k + 1]
        expected[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = torch.stack(
            [torch.stack([s.cos(), s.sin()]), torch.stack([-s.sin(), s.cos()])]
        )
    torch.testing.assert_close(torch.linalg.matrix_exp(a), expected)


def test_recurrent_weight_starts_at_exp_of_the_init_and_stays_orthogonal_in_training() -> None:
    torch.manual_seed(0)
    model = ExpRNN(ExpRNNConfig(hidden_size=8, seq_len=12)).double()
    skew = model.rnn.skew_parameter.detach()
    a = skew.tril() - skew.tril().T
    torch.testing.assert_close(model.rnn.recurrent_kernel.weight, torch.linalg.matrix_exp(a))
    opt = torch.optim.RMSprop([model.rnn.skew_parameter], lr=0.05)
    pixels, labels = torch.rand(4, 12, dtype=F64), torch.tensor([0, 1, 2, 3])
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(pixels), labels).backward()
        opt.step()
    w = model.rnn.recurrent_kernel.weight.detach()
    assert not torch.allclose(w, torch.linalg.matrix_exp(a))  # it moved
    torch.testing.assert_close(w @ w.T, torch.eye(8, dtype=F64))


def test_cached_forward_matches_a_hand_unrolled_recurrence() -> None:
    torch.manual_seed(0)
    model = ExpRNN(ExpRNNConfig(hidden_size=6, seq_len=5)).double()
    pixels = torch.rand(3, 5, dtype=F64)
    skew = model.rnn.skew_parameter.detach()
    b = torch.linalg.matrix_exp(skew.tril() - skew.tril().T)
    w_in, bias = model.rnn.input_kernel.weight.detach(), model.rnn.nonlinearity.b.detach()
    h = torch.zeros(3, 6, dtype=F64)
    for t in model.permutation:
        z = pixels[:, t, None] @ w_in.T + h @ b.T
        h = torch.sign(z) * torch.clamp(z.abs() + bias, min=0)
    expected = model.lin(h)
    torch.testing.assert_close(model(pixels), expected)


def test_modrelu_by_hand() -> None:
    act = ModReLU(3)
    with torch.no_grad():
        act.b.copy_(torch.tensor([-1.0, -1.0, 0.5]))
    torch.testing.assert_close(act(torch.tensor([[-2.0, 0.5, 3.0]])), torch.tensor([[-1.0, 0.0, 3.5]]))


def test_two_optimizers_split_the_parameters_with_the_reference_learning_rates() -> None:
    w = torchgauge.create("exprnn_pmnist", mode="train", size="smoke")
    orth = w.module.rnn.skew_parameter
    assert [g["lr"] for g in w.optimizer.param_groups] == [7e-4]
    assert w.orth_optimizer.param_groups[0]["params"] == [orth] and w.orth_optimizer.param_groups[0]["lr"] == 7e-5
    assert all(p is not orth for p in w.optimizer.param_groups[0]["params"])
    before = orth.detach().clone()
    losses = [w.step().item() for _ in range(10)]
    assert not torch.equal(before, orth.detach())
    assert losses[-1] < losses[0]
    assert math.isfinite(losses[-1])
