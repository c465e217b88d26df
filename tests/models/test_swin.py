"""Swin Transformer: window bookkeeping, the shift mask, biased window attention against a slow loop."""

from __future__ import annotations

import torch

import torchgauge
from torchgauge.models.vision.swin import (
    MASK_VALUE,
    PatchMerging,
    SwinConfig,
    SwinTransformer,
    WindowAttention,
    _param_groups,
    drop_path,
    relative_position_index,
    shifted_window_mask,
    window_partition,
    window_reverse,
)

F64 = torch.float64


def test_window_partition_cuts_row_major_windows_and_reverse_undoes_it() -> None:
    x = torch.randn(2, 6, 9, 4)
    windows = window_partition(x, 3)  # 2 x 3 windows per image
    assert windows.shape == (12, 3, 3, 4)
    torch.testing.assert_close(windows[6 + 1 * 3 + 2], x[1, 3:6, 6:9])  # image 1, window row 1, column 2
    torch.testing.assert_close(window_reverse(windows, 3, 6, 9), x)


def test_relative_position_index_matches_an_explicit_loop() -> None:
    w = 7
    index = relative_position_index(w)
    for i in range(w * w):
        for j in range(w * w):
            dy, dx = i // w - j // w, i % w - j % w
            assert index[i, j] == (dy + w - 1) * (2 * w - 1) + (dx + w - 1)
    assert (index.diagonal() == (w - 1) * (2 * w - 1) + w - 1).all()  # zero offset: the table's centre row
    assert index.max() == (2 * w - 1) ** 2 - 1


def test_shift_mask_separates_tokens_the_roll_wrapped_around() -> None:
    # Rolling by -s moves the first s rows/columns to the end; two tokens of one window may attend
    # to each other iff both or neither came across the border, in each axis.
    h = w = 8
    win, shift = 4, 2
    mask = shifted_window_mask(h, w, win, shift)
    assert mask.shape == (4, 16, 16)
    for k in range(4):
        r0, c0 = (k // 2) * win, (k % 2) * win
        for i in range(16):
            for j in range(16):
                ri, ci = r0 + i // win, c0 + i % win
                rj, cj = r0 + j // win, c0 + j % win
                same = (ri >= h - shift) == (rj >= h - shift) and (ci >= w - shift) == (cj >= w - shift)
                assert mask[k, i, j] == (0.0 if same else MASK_VALUE)
    assert (mask[0] == 0).all()  # the top-left window holds no wrapped tokens


def test_window_attention_matches_a_slow_per_window_loop() -> None:
    torch.manual_seed(0)
    win, heads, dim = 3, 2, 8
    attn = WindowAttention(dim, win, heads).double()
    with torch.no_grad():
        attn.relative_position_bias_table.normal_()  # large enough to matter
    x = torch.randn(2 * 4, win * win, dim, dtype=F64)  # 2 images x 4 windows
    mask = shifted_window_mask(6, 6, win, 1).double()
    out = attn(x, mask)
    hs = dim // heads
    q, k, v = attn.qkv(x).split(dim, dim=-1)
    expected = torch.empty_like(x)
    for b in range(x.shape[0]):
        heads_out = []
        for h in range(heads):
            qh, kh, vh = (t[b, :, h * hs : (h + 1) * hs] for t in (q, k, v))
            logits = qh @ kh.T / hs**0.5
            for i in range(win * win):
                for j in range(win * win):
                    dy, dx = i // win - j // win, i % win - j % win
                    logits[i, j] += attn.relative_position_bias_table[(dy + win - 1) * (2 * win - 1) + dx + win - 1, h]
            logits = logits + mask[b % 4]
            heads_out.append(logits.softmax(-1) @ vh)
        expected[b] = attn.proj(torch.cat(heads_out, dim=-1))
    torch.testing.assert_close(out, expected)


def test_patch_merging_concatenates_2x2_neighbours_in_the_reference_order() -> None:
    merge = PatchMerging(3, 4)
    merge.norm, merge.reduction = torch.nn.Identity(), torch.nn.Identity()
    x = torch.randn(1, 4, 4, 3)
    out = merge(x.view(1, 16, 3)).view(1, 2, 2, 12)
    i, j = 1, 0
    torch.testing.assert_close(
        out[0, i, j],
        torch.cat([x[0, 2 * i, 2 * j], x[0, 2 * i + 1, 2 * j], x[0, 2 * i, 2 * j + 1], x[0, 2 * i + 1, 2 * j + 1]]),
    )


def test_drop_path_zeroes_or_rescales_whole_samples() -> None:
    torch.manual_seed(0)
    x = torch.ones(1000, 3, 5)
    out = drop_path(x, 0.25, training=True)
    per_sample = out.flatten(1)
    assert ((per_sample == 0).all(1) | (per_sample == 1 / 0.75).all(1)).all()
    assert 0.2 < (per_sample[:, 0] == 0).float().mean() < 0.3
    assert drop_path(x, 0.25, training=False) is x


def test_swin_t_size_and_no_decay_groups() -> None:
    model = SwinTransformer(SwinConfig())
    assert sum(p.numel() for p in model.parameters()) == 28_288_354  # torchvision swin_t
    decay, no_decay = _param_groups(model, 0.05)
    assert all(p.ndim > 1 for p in decay["params"])
    tables = [p for n, p in model.named_parameters() if n.endswith("relative_position_bias_table")]
    assert len(tables) == 12 and all(any(t is p for p in no_decay["params"]) for t in tables)
    assert no_decay["weight_decay"] == 0.0


def test_blocks_shift_only_when_the_map_is_larger_than_a_window() -> None:
    model = SwinTransformer(SwinConfig())
    shifts = [(b.shift, b.window) for stage in model.stages for b in stage if hasattr(b, "shift")]
    assert shifts == [(0, 7), (3, 7)] * 5 + [(0, 7), (0, 7)]  # the 7 x 7 last stage: one window, no shift


def test_training_lowers_the_loss_on_a_fixed_batch() -> None:
    w = torchgauge.create("swin_t", mode="train", size="smoke", batch_size=4)
    w.module.eval()  # no stochastic depth: a deterministic comparison
    first = w.step().item()
    for _ in range(10):
        last = w.step().item()
    assert last < first
