"""Building blocks of the plain-PyTorch NLP models (nlp/bert, gpt, llama, transformer)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchgauge
from torchgauge.models.common.padding import length_mask, random_lengths
from torchgauge.models.common.transformer_layers import sinusoid_table
from torchgauge.models.nlp.bert import BERT, PAD
from torchgauge.models.nlp.gpt import GPT, GPTConfig
from torchgauge.models.nlp.llama import Attention, RMSNorm, apply_rotary, rotary_tables
from torchgauge.models.nlp.transformer import Transformer
from torchgauge.workload import BuildContext


def test_sinusoid_table_hand_values() -> None:
    table = sinusoid_table(3, 4)
    assert torch.allclose(table[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    # position 1: channel pair 0 at frequency 1, pair 1 at 10000^(-2/4) = 0.01
    expected = torch.tensor([math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)])
    assert torch.allclose(table[1], expected, atol=1e-6)


def test_padding_lengths_and_mask() -> None:
    ctx = BuildContext(name="padding", mode="train", device=torch.device("cpu"), batch_size=5, size="full")
    lengths = random_lengths(ctx, 5, max_len=9, min_len=3)
    assert lengths[0] == 9 and (lengths[1:] <= lengths[:-1]).all() and (lengths >= 3).all()
    mask = length_mask(torch.tensor([2, 0, 3]), 3)
    assert mask.tolist() == [[True, True, False], [False, False, False], [True, True, True]]


def test_rms_norm_hand_computed() -> None:
    norm = RMSNorm(2, eps=0.0)
    out = norm(torch.tensor([[3.0, 4.0]]))
    assert torch.allclose(out, torch.tensor([[3.0, 4.0]]) / math.sqrt(12.5))


def test_rotary_preserves_norms_and_encodes_relative_position() -> None:
    torch.manual_seed(0)
    cos, sin = rotary_tables(head_dim=8, seq_len=16)
    q = torch.randn(1, 1, 1, 8).expand(1, 1, 16, 8)  # the same vector at every position
    k = torch.randn(1, 1, 1, 8).expand(1, 1, 16, 8)
    rq, rk = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    assert torch.allclose(rq[..., 0, :], q[..., 0, :])  # position 0 is not rotated
    # <R_m q, R_n k> depends on m - n only
    scores = rq[0, 0] @ rk[0, 0].T  # (16, 16)
    assert torch.allclose(scores[5, 2], scores[13, 10], atol=1e-5)
    assert torch.allclose(scores[3, 7], scores[9, 13], atol=1e-5)


def _identity_rotary(T: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(T, head_dim), torch.zeros(T, head_dim)


def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention() -> None:
    torch.manual_seed(0)
    dim, heads, T = 16, 4, 6
    attn = Attention(dim, n_heads=heads, n_kv_heads=heads)
    reference = nn.MultiheadAttention(dim, heads, bias=False, batch_first=True)
    with torch.no_grad():
        reference.in_proj_weight.copy_(torch.cat((attn.wq.weight, attn.wk.weight, attn.wv.weight)))
        reference.out_proj.weight.copy_(attn.wo.weight)
    x = torch.randn(2, T, dim)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # True = not allowed
    expected, _ = reference(x, x, x, attn_mask=future, need_weights=False)
    assert torch.allclose(attn(x, *_identity_rotary(T, dim // heads)), expected, atol=1e-5)


def test_gqa_equals_multi_head_attention_with_shared_key_value_heads() -> None:
    torch.manual_seed(0)
    dim, heads, kv_heads, T = 24, 6, 2, 5
    head_dim = dim // heads
    gqa = Attention(dim, n_heads=heads, n_kv_heads=kv_heads)
    mha = Attention(dim, n_heads=heads, n_kv_heads=heads)
    with torch.no_grad():  # each kv head serves heads // kv_heads consecutive query heads
        for name in ("wk", "wv"):
            per_head = getattr(gqa, name).weight.view(kv_heads, head_dim, dim)
            getattr(mha, name).weight.copy_(per_head.repeat_interleave(heads // kv_heads, dim=0).reshape(dim, dim))
        mha.wq.weight.copy_(gqa.wq.weight)
        mha.wo.weight.copy_(gqa.wo.weight)
    cos, sin = rotary_tables(head_dim, T)
    x = torch.randn(3, T, dim)
    assert torch.allclose(gqa(x, cos, sin), mha(x, cos, sin), atol=1e-5)


def test_gpt_ties_the_lm_head_and_counts_it_once() -> None:
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=8, vocab_size=16, block_size=8))
    assert model.lm_head.weight is model.wte.weight
    per_layer = 2 * 8 + (8 * 24 + 24) + (8 * 8 + 8) + 2 * 8 + (8 * 32 + 32) + (32 * 8 + 8)
    assert sum(p.numel() for p in model.parameters()) == 16 * 8 + 8 * 8 + per_layer + 2 * 8


def test_gpt_is_causal() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, vocab_size=32, block_size=8)).eval()
    idx = torch.randint(0, 32, (1, 8))
    changed = idx.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % 32
    assert torch.allclose(model(idx)[:, :5], model(changed)[:, :5], atol=1e-6)


def test_nanogpt_eval_generates_new_tokens() -> None:
    w = torchgauge.create("nanogpt", mode="eval", size="smoke")
    prompt = w.inputs[0]
    tokens, probs = w.step()
    assert tokens.shape == (prompt.size(0), prompt.size(1) + 4)
    assert torch.equal(tokens[:, : prompt.size(1)], prompt)
    assert torch.allclose(probs.sum(-1), torch.ones(prompt.size(0)))
    assert ((probs > 0).sum(-1) <= 200).all()  # top-k 200 sampling


def test_bert_ignores_padding() -> None:
    torch.manual_seed(0)
    model = BERT(vocab_size=30, hidden=16, n_layers=2, attn_heads=2).eval()
    tokens = torch.tensor([[3, 7, 8, 2, 9, 2]])
    segments = torch.tensor([[1, 1, 1, 1, 2, 2]])
    padded_tokens = torch.cat((tokens, torch.full((1, 3), PAD)), dim=1)
    padded_segments = torch.cat((segments, torch.zeros(1, 3, dtype=torch.long)), dim=1)
    next_a, lm_a = model(tokens, segments)
    next_b, lm_b = model(padded_tokens, padded_segments)
    assert torch.allclose(next_a, next_b, atol=1e-5)
    assert torch.allclose(lm_a, lm_b[:, :6], atol=1e-5)


def test_transformer_decoder_is_causal_and_ignores_source_padding() -> None:
    torch.manual_seed(0)
    model = Transformer(vocab_size=20, pad_idx=1, d_model=16, d_inner=32, n_layers=2, n_head=2, d_k=8, d_v=8).eval()
    src = torch.tensor([[2, 5, 6, 7, 3]])
    trg = torch.tensor([[2, 9, 10, 11]])
    logits = model(src, trg)
    future = trg.clone()
    future[0, 3] = 12
    assert torch.allclose(model(src, future)[:, :3], logits[:, :3], atol=1e-5)
    padded_src = torch.cat((src, torch.ones(1, 2, dtype=torch.long)), dim=1)
    assert torch.allclose(model(padded_src, trg), logits, atol=1e-5)


@pytest.mark.parametrize("name", ["BERT_pytorch", "attention_is_all_you_need_pytorch"])
def test_padded_batches_have_some_padding(name: str) -> None:
    w = torchgauge.create(name, mode="train", size="smoke", batch_size=4)
    pad = PAD if name == "BERT_pytorch" else 1
    tokens = w.inputs[0]
    assert (tokens[0] != pad).all()  # the longest sample fills the batch width
    assert (tokens == pad).any()
