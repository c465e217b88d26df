"""Word-level language models of pytorch/examples ``word_language_model`` (BSD-3-Clause).

The reference's ``model.py`` has two classes, written again here from its description:

- ``RNNModel``: embedding -> dropout -> 2-layer ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (tanh or
  ReLU) with inter-layer dropout -> dropout -> linear decoder -> ``log_softmax``; the hidden
  state is carried from one 35-token chunk to the next and detached in between
  (``repackage_hidden``: truncated back-propagation through time).
- ``TransformerModel``: embedding scaled by ``sqrt(d)`` + sinusoidal positions (dropout),
  ``nn.TransformerEncoder`` of post-LN ``nn.TransformerEncoderLayer`` (2 heads, ReLU FFN),
  square subsequent (causal, additive ``-inf``) mask, linear decoder -> ``log_softmax``.

Everything is time-major ``(T, B)`` as the reference's ``batchify``. Sizes are ``main.py``'s
defaults on Wikitext-2: vocabulary 33,278, ``--emsize 200 --nhid 200 --nlayers 2 --nhead 2
--dropout 0.2 --bptt 35 --batch_size 20`` (eval batch 10), untied weights, the reference's
uniform(-0.1, 0.1) init of the embedding and decoder.

Train step = ``main.py``'s ``train()`` body: ``model.zero_grad()``, forward, ``nn.NLLLoss``
on the log-probabilities, backward, ``clip_grad_norm_(0.25)``, then plain SGD at lr 20 as the
reference writes it (``p.data.add_(p.grad, alpha=-lr)`` per parameter; no torch.optim
optimizer, hence no GradScaler under fp16 AMP either). Eval step = ``evaluate()``'s body under
``no_grad``: forward with the carried hidden state and the NLL of the chunk.

Differences: the reference's current ``TransformerModel`` subclasses ``nn.Transformer`` and so
also builds an (unused) 6-layer decoder and a final encoder LayerNorm; we build the
``nn.TransformerEncoder`` alone, as the reference did before that change, so every parameter
is used. The mask comes from ``nn.Transformer.generate_square_subsequent_mask`` (the library
spelling of the reference's ``log(tril(ones))``; same values). Token ids are random
(synthetic Wikitext-2-sized vocabulary), the same chunk every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["PositionalEncoding", "RNNModel", "TransformerModel", "WordLMConfig", "repackage_hidden"]

# Wikitext-2's vocabulary (the reference's data.Corpus on wikitext-2, <eos> included).
WIKITEXT2_VOCAB = 33_278
Hidden = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class WordLMConfig:
    rnn_type: str = "LSTM"  # LSTM, GRU, RNN_TANH, RNN_RELU or Transformer (main.py --model)
    ntoken: int = WIKITEXT2_VOCAB
    emsize: int = 200  # embedding size (d_model of the transformer)
    nhid: int = 200  # RNN hidden size / transformer feed-forward size
    nlayers: int = 2
    nhead: int = 2  # transformer heads
    dropout: float = 0.2
    bptt: int = 35  # tokens per chunk
    lr: float = 20.0  # main.py --lr: plain SGD
    clip: float = 0.25  # main.py --clip: gradient-norm clipping


class RNNModel(nn.Module):
    """Token ids ``(T, B)`` and hidden state -> log-probabilities ``(T * B, V)`` and the new state."""

    def __init__(self, cfg: WordLMConfig) -> None:
        super().__init__()
        self.rnn_type, self.nlayers, self.nhid, self.ntoken = cfg.rnn_type, cfg.nlayers, cfg.nhid, cfg.ntoken
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.Embedding(cfg.ntoken, cfg.emsize)
        if cfg.rnn_type in ("LSTM", "GRU"):
            self.rnn = getattr(nn, cfg.rnn_type)(cfg.emsize, cfg.nhid, cfg.nlayers, dropout=cfg.dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[cfg.rnn_type]
            self.rnn = nn.RNN(cfg.emsize, cfg.nhid, cfg.nlayers, nonlinearity=nonlinearity, dropout=cfg.dropout)
        self.decoder = nn.Linear(cfg.nhid, cfg.ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, ids: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
        emb = self.drop(self.encoder(ids))  # (T, B, E)
        output, hidden = self.rnn(emb, hidden)  # (T, B, H); (L, B, H) or a pair of them
        decoded = self.decoder(self.drop(output)).view(-1, self.ntoken)  # (T * B, V)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, batch_size: int) -> Hidden:
        """Zero state ``(L, B, H)`` (a pair for the LSTM) in the parameters' dtype and device."""
        weight = next(self.parameters())
        zeros = lambda: weight.new_zeros(self.nlayers, batch_size, self.nhid)
        return (zeros(), zeros()) if self.rnn_type == "LSTM" else zeros()


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table ``(max_len, 1, d)`` to ``(T, B, d)``, then dropout."""

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[: x.size(0)])


class TransformerModel(nn.Module):
    """Token ids ``(T, B)`` -> log-probabilities ``(T * B, V)`` under a causal mask."""

    def __init__(self, cfg: WordLMConfig) -> None:
        super().__init__()
        self.ntoken, self.ninp = cfg.ntoken, cfg.emsize
        self.input_emb = nn.Embedding(cfg.ntoken, cfg.emsize)
        self.pos_encoder = PositionalEncoding(cfg.emsize, cfg.dropout)
        layer = nn.TransformerEncoderLayer(cfg.emsize, cfg.nhead, cfg.nhid, cfg.dropout)  # time-major, post-LN
        # nested tensors need batch_first and a padding mask: neither here, so say so (no warning)
        self.encoder = nn.TransformerEncoder(layer, cfg.nlayers, enable_nested_tensor=False)
        self.decoder = nn.Linear(cfg.emsize, cfg.ntoken)
        self.src_mask: torch.Tensor | None = None  # cached per length, as the reference
        nn.init.uniform_(self.input_emb.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        src = self.pos_encoder(self.input_emb(ids) * math.sqrt(self.ninp))  # (T, B, d)
        if self.src_mask is None or self.src_mask.size(0) != len(ids) or self.src_mask.dtype != src.dtype:
            # (T, T): 0 on and below the diagonal, -inf above; in the activations' dtype (fp16/bf16 runs)
            self.src_mask = nn.Transformer.generate_square_subsequent_mask(len(ids), ids.device, src.dtype)
        output = self.decoder(self.encoder(src, mask=self.src_mask))  # (T, B, V)
        return F.log_softmax(output, dim=-1).view(-1, self.ntoken)


def repackage_hidden(h: Hidden) -> Hidden:
    """Detach the hidden state from the graph of the previous chunk."""
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


class WordLanguageModel(Workload):
    """Inputs ``(data (T, B), targets (T * B,))``; RNNs carry their hidden state across steps."""

    needs_optimizer = False  # the reference updates parameters by hand
    eval_grad_mode = "no_grad"  # evaluate() runs under torch.no_grad(); the state outlives the step

    def __init__(self, ctx: BuildContext, module: nn.Module, inputs: tuple, cfg: WordLMConfig) -> None:
        super().__init__(ctx, module, inputs)
        self.cfg = cfg
        self.hidden: Hidden | None = None  # made by init_hidden on the first step (in the model's dtype)

    def forward(self) -> torch.Tensor:
        data, _ = self.inputs
        if isinstance(self.module, TransformerModel):
            return self.module(data)
        if self.hidden is None:
            self.hidden = self.module.init_hidden(data.size(1))
        output, hidden = self.module(data, repackage_hidden(self.hidden))
        self.hidden = hidden
        return output

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return F.nll_loss(outputs, self.inputs[1])  # nn.NLLLoss(): mean over the T * B tokens

    def train_step(self) -> torch.Tensor:
        self.module.zero_grad()
        with self.autocast():
            loss = self.compute_loss(self.forward())
        loss.backward()
        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        nn.utils.clip_grad_norm_(self.module.parameters(), self.cfg.clip)
        for p in self.module.parameters():
            p.data.add_(p.grad, alpha=-self.cfg.lr)
        return loss.detach()

    def eval_step(self) -> torch.Tensor:
        with torch.no_grad(), self.autocast():
            return self.compute_loss(self.forward())


def _create_word_lm(ctx: BuildContext, rnn_type: str, **kwargs) -> Workload:
    smoke = dict(ntoken=100, emsize=16, nhid=16, bptt=8) if ctx.smoke else {}
    cfg = replace(WordLMConfig(rnn_type=rnn_type), **{**smoke, **kwargs})
    model = TransformerModel(cfg) if cfg.rnn_type == "Transformer" else RNNModel(cfg)
    ids = ctx.randint(0, cfg.ntoken, (cfg.bptt + 1, ctx.batch_size))  # a (bptt + 1, B) slice of the batchified text
    data, targets = ids[:-1].contiguous(), ids[1:].reshape(-1)  # get_batch(): targets are the next tokens
    return WordLanguageModel(ctx, model, (data, targets), cfg)


_SOURCE = "pytorch/examples word_language_model (BSD-3-Clause), main.py defaults on Wikitext-2"
_NOTES = (
    "Synthetic token ids over Wikitext-2's 33,278-word vocabulary; bptt 35. Plain SGD (lr 20) by hand after "
    "clip_grad_norm_(0.25), as the reference: fp16 AMP training gets no loss scaling."
)
_COUNT_NOTE = "counted from the reference model.py at main.py's defaults (emsize = nhid = 200, 2 layers, untied)"
_RNN_TRAIN_EVAL_BATCH = (20, 10)  # main.py --batch_size 20, eval_batch_size 10


@register_model(
    domain="nlp",
    task="language_modeling",
    source=_SOURCE,
    batch_size=_RNN_TRAIN_EVAL_BATCH,
    tags=("rnn",),
    param_count=13_987_678,
    unsupported_precisions=("amp",),
    notes=f"{_NOTES} Parameter count {_COUNT_NOTE}. amp unsupported: on CPU oneDNN cannot build the LSTM "
    "primitive under bf16 autocast (torch 2.13); plain bf16/fp16 work.",
)
def word_language_model_lstm(ctx: BuildContext, **kwargs) -> Workload:
    """2-layer LSTM language model (200 units), Wikitext-2 vocabulary."""
    return _create_word_lm(ctx, "LSTM", **kwargs)


@register_model(
    domain="nlp",
    task="language_modeling",
    source=_SOURCE,
    batch_size=_RNN_TRAIN_EVAL_BATCH,
    tags=("rnn",),
    param_count=13_826_878,
    notes=f"{_NOTES} Parameter count {_COUNT_NOTE}.",
)
def word_language_model_gru(ctx: BuildContext, **kwargs) -> Workload:
    """2-layer GRU language model (200 units), Wikitext-2 vocabulary."""
    return _create_word_lm(ctx, "GRU", **kwargs)


@register_model(
    domain="nlp",
    task="language_modeling",
    source=_SOURCE,
    batch_size=_RNN_TRAIN_EVAL_BATCH,
    tags=("rnn",),
    param_count=13_505_278,
    notes=f"{_NOTES} Parameter count {_COUNT_NOTE}.",
)
def word_language_model_rnn_tanh(ctx: BuildContext, **kwargs) -> Workload:
    """2-layer Elman RNN (tanh) language model (200 units), Wikitext-2 vocabulary."""
    return _create_word_lm(ctx, "RNN_TANH", **kwargs)


@register_model(
    domain="nlp",
    task="language_modeling",
    source=_SOURCE,
    batch_size=_RNN_TRAIN_EVAL_BATCH,
    tags=("rnn",),
    param_count=13_505_278,
    notes=f"{_NOTES} Parameter count {_COUNT_NOTE}.",
)
def word_language_model_rnn_relu(ctx: BuildContext, **kwargs) -> Workload:
    """2-layer Elman RNN (ReLU) language model (200 units), Wikitext-2 vocabulary."""
    return _create_word_lm(ctx, "RNN_RELU", **kwargs)


@register_model(
    domain="nlp",
    task="language_modeling",
    source=_SOURCE,
    batch_size=_RNN_TRAIN_EVAL_BATCH,
    tags=("transformer",),
    param_count=13_828_478,
    notes=f"{_NOTES} Parameter count {_COUNT_NOTE}, encoder only (2 heads, FFN 200).",
)
def word_language_model_transformer(ctx: BuildContext, **kwargs) -> Workload:
    """2-layer transformer encoder language model (d 200, 2 heads, FFN 200) with a causal mask."""
    return _create_word_lm(ctx, "Transformer", **kwargs)
