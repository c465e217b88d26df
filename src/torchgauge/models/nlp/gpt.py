"""GPT-2 (124M) as written in Karpathy's nanoGPT.

Reference: karpathy/nanoGPT ``model.py`` (MIT license), which follows OpenAI's GPT-2 (Radford
et al., 2019) and Hugging Face's ``modeling_gpt2.py``: learned positions, pre-LN blocks with a
fused q/k/v projection and a 4x GELU MLP, final LayerNorm, LM head tied to the token embedding.
Training uses nanoGPT's ``train.py`` defaults (12 x 1024 tokens, AdamW with betas (0.9, 0.95) and
weight decay on matrices only); eval is the TorchBench workload: sample 32 new tokens
(temperature 0.8, top-k 200) after a 64-token prompt, without a KV cache, as nanoGPT generates.

The pre-LN ``Block`` is shared with ``bert.py``: BERT_pytorch's block is the same without the
causal mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["GPT", "GPTConfig", "Block"]


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 1024  # longest context; positions are learned up to here
    vocab_size: int = 50304  # GPT-2's 50,257 BPE tokens padded to a multiple of 64 for fast matmuls
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0  # nanoGPT pretrains without dropout
    bias: bool = True  # biases in Linear and LayerNorm, as GPT-2


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused q/k/v projection; causal, or with a key mask."""

    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool, causal: bool) -> None:
        super().__init__()
        self.n_head, self.dropout, self.causal = n_head, dropout, causal
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=key_mask, is_causal=self.causal, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).reshape(B, T, C)  # re-assemble all head outputs side by side
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd: int, dropout: float, bias: bool, gelu_approximate: str) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU(approximate=gelu_approximate)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LN transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        dropout: float = 0.0,
        bias: bool = True,
        causal: bool = True,
        ln_eps: float = 1e-5,
        gelu_approximate: str = "none",
    ) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=ln_eps, bias=bias)
        self.attn = SelfAttention(n_embd, n_head, dropout, bias, causal)
        self.ln_2 = nn.LayerNorm(n_embd, eps=ln_eps, bias=bias)
        self.mlp = MLP(n_embd, dropout, bias, gelu_approximate)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), key_mask)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(
            Block(config.n_embd, config.n_head, config.dropout, config.bias) for _ in range(config.n_layer)
        )
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying: module.parameters() yields it once
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Token ids ``(B, T)`` to logits ``(B, T, V)``, or ``(B, 1, V)`` for the last position only."""
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return self.lm_head(x[:, -1:] if last_only else x)

    def generate(
        self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``max_new_tokens`` after ``idx (B, T)``; returns all ids and the last step's probabilities."""
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.config.block_size :], last_only=True)[:, -1] / temperature  # (B, V)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx, probs


class GenerationWorkload(Workload):
    """Eval = sampling new tokens after a prompt (one step = the whole generation)."""

    def __init__(
        self,
        ctx: BuildContext,
        module: GPT,
        prompt: torch.Tensor,
        *,
        max_new_tokens: int,
        temperature: float,
        top_k: int,
    ) -> None:
        super().__init__(ctx, module, (prompt,))
        self.generate_kwargs = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k)

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module.generate(*self.inputs, **self.generate_kwargs)


def _create_gpt(ctx: BuildContext, **kwargs) -> Workload:
    # Smoke: the same layers at toy width (124M parameters would not fit a 2 s CPU budget).
    smoke = dict(n_layer=2, n_head=2, n_embd=64, vocab_size=512, block_size=64) if ctx.smoke else {}
    config = GPTConfig(**(smoke | kwargs))
    model = GPT(config)
    if not ctx.train:
        prompt = ctx.randint(0, config.vocab_size, (ctx.batch_size, ctx.pick(64, 8)))
        return GenerationWorkload(ctx, model, prompt, max_new_tokens=ctx.pick(32, 4), temperature=0.8, top_k=200)
    # TorchBench's training step: the same 64-token prompt, nanoGPT's inference-time forward
    # (last position's logits only, no targets) and the loss logits.sum() / logits.numel().
    prompt = ctx.randint(1, config.vocab_size, (ctx.batch_size, ctx.pick(64, 8)))
    decay = [p for p in model.parameters() if p.dim() >= 2]  # nanoGPT: no weight decay on biases and norms
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=6e-4, betas=(0.9, 0.95)
    )
    return LastLogitsWorkload(ctx, model, (prompt,), optimizer=optimizer)


class LastLogitsWorkload(Workload):
    """TorchBench's nanogpt train step: loss = mean of the last position's logits, AdamW step."""

    def forward(self) -> torch.Tensor:
        (idx,) = self.inputs
        return self.module(idx, last_only=True)

    def compute_loss(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.sum() / logits.numel()


@register_model(
    domain="nlp",
    task="language_modeling",
    batch_size=(1, 1),
    param_count=124_439_808,
    source="Radford et al. 2019 (GPT-2); karpathy/nanoGPT; TorchBench nanogpt",
    tags=("generation",),
    notes="vocab padded to 50,304 as nanoGPT trains it: 36,096 parameters above GPT-2's published count; "
    "as TorchBench: train = mean of the last logits of a 64-token prompt, eval samples 32 tokens",
)
def nanogpt(ctx: BuildContext, **kwargs) -> Workload:
    """GPT-2 124M (12 layers, 12 heads, 768 wide); TorchBench's 64-token-prompt train step, eval = generation."""
    return _create_gpt(ctx, **kwargs)
