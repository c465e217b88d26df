"""RNN-Transducer of the MLPerf speech-recognition benchmark, with the transducer loss in plain PyTorch.

Graves, "Sequence Transduction with Recurrent Neural Networks" (2012); model as in the MLPerf
training reference ``rnn_speech_recognition/pytorch`` (Apache-2.0, config
``baseline_v3-1023sp.yaml``): 80 log-mel filterbanks stacked 3 frames at a time (240 features
per 30 ms), encoder of 2 LSTM layers (1024), time-stacking by 2, then 3 LSTM layers (1024);
prediction network of an embedding (512) and 2 LSTM layers (512) over the previous labels,
<blank> first; joint network ``Linear(ReLU(enc + pred))`` over 1,023 sentencepiece tokens plus
blank (the last index). LSTMs start with forget-gate bias 1 and use dropout on their outputs.

``transducer_loss`` computes the negative log-likelihood over all alignments with the forward
(alpha) recursion: sequential over time frames only, vectorised over the batch and the label
axis (within a frame, emitting labels is a cumulative sum, so the recursion along the labels is
a ``logcumsumexp``). The reference uses a fused CUDA loss (apex) and the LAMB optimizer; here
AdamW (``torch.optim`` has no LAMB). Eval runs the same teacher-forced forward to the joint
logits (MLPerf's greedy decoding emits as many symbols as random weights happen to predict).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import random_lengths

__all__ = ["RNNT", "transducer_loss"]


class _LSTM(nn.Module):
    """Time-major ``nn.LSTM`` with the forget-gate bias set to ``forget_gate_bias`` and output dropout."""

    def __init__(
        self, input_size: int, hidden_size: int, num_layers: int, dropout: float, forget_gate_bias: float = 1.0
    ) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, dropout=dropout)
        self.dropout = nn.Dropout(dropout)
        for name, bias in self.lstm.named_parameters():  # gates are ordered input, forget, cell, output
            if name.startswith("bias_ih"):
                nn.init.constant_(bias[hidden_size : 2 * hidden_size], forget_gate_bias)
            elif name.startswith("bias_hh"):
                nn.init.zeros_(bias[hidden_size : 2 * hidden_size])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.lstm(x)[0])


def stack_time(x: torch.Tensor, lengths: torch.Tensor, factor: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(T, B, H)`` to ``(ceil(T / factor), B, factor * H)``: consecutive frames concatenated."""
    T, B, H = x.shape
    x = F.pad(x, (0, 0, 0, 0, 0, -T % factor))
    x = x.transpose(0, 1).reshape(B, -1, factor * H).transpose(0, 1)
    return x, (lengths + factor - 1) // factor  # as MLPerf's (lengths + 2 * factor - 1) // factor - 1


class RNNT(nn.Module):
    def __init__(
        self,
        n_classes: int = 1024,
        in_feats: int = 240,
        enc_n_hid: int = 1024,
        enc_pre_rnn_layers: int = 2,
        enc_post_rnn_layers: int = 3,
        enc_stack_time_factor: int = 2,
        enc_dropout: float = 0.1,
        pred_n_hid: int = 512,
        pred_rnn_layers: int = 2,
        pred_dropout: float = 0.3,
        joint_n_hid: int = 512,
        joint_dropout: float = 0.3,
    ) -> None:
        super().__init__()
        self.blank = n_classes - 1
        self.stack_factor = enc_stack_time_factor
        self.pre_rnn = _LSTM(in_feats, enc_n_hid, enc_pre_rnn_layers, enc_dropout)
        self.post_rnn = _LSTM(enc_stack_time_factor * enc_n_hid, enc_n_hid, enc_post_rnn_layers, enc_dropout)
        self.embed = nn.Embedding(n_classes - 1, pred_n_hid)  # <blank> is never an input label
        self.dec_rnn = _LSTM(pred_n_hid, pred_n_hid, pred_rnn_layers, pred_dropout)
        self.joint_pred = nn.Linear(pred_n_hid, joint_n_hid)
        self.joint_enc = nn.Linear(enc_n_hid, joint_n_hid)
        self.joint_net = nn.Sequential(nn.ReLU(), nn.Dropout(joint_dropout), nn.Linear(joint_n_hid, n_classes))

    def encode(self, x: torch.Tensor, x_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``(T, B, in_feats)`` to ``(B, T', enc_n_hid)`` and their lengths."""
        x, x_lens = stack_time(self.pre_rnn(x), x_lens, self.stack_factor)
        return self.post_rnn(x).transpose(0, 1), x_lens

    def predict(self, labels: torch.Tensor) -> torch.Tensor:
        """Labels ``(B, U)`` to prediction states ``(B, U + 1, pred_n_hid)``, the first before any label."""
        y = self.embed(labels)  # (B, U, H)
        y = torch.cat((y.new_zeros(y.size(0), 1, y.size(2)), y), dim=1)  # start state: zero input
        return self.dec_rnn(y.transpose(0, 1)).transpose(0, 1)

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint logits ``(B, T', U + 1, n_classes)`` and the encoder lengths ``(B,)``."""
        f, f_lens = self.encode(x, x_lens)
        g = self.predict(labels)
        logits = self.joint_net(self.joint_enc(f)[:, :, None] + self.joint_pred(g)[:, None])
        return logits, f_lens


def transducer_loss(
    log_probs: torch.Tensor, labels: torch.Tensor, logit_lens: torch.Tensor, label_lens: torch.Tensor, blank: int
) -> torch.Tensor:
    """Negative log-likelihood ``(B,)`` of each label sequence, summed over all RNN-T alignments.

    Args:
        log_probs: ``(B, T, U + 1, V)`` log-softmax of the joint network.
        labels: ``(B, U)`` label ids (padding beyond ``label_lens`` is ignored).
        logit_lens: ``(B,)`` valid frames per sample, ``1 <= logit_lens <= T``.
        label_lens: ``(B,)`` valid labels per sample, ``<= U``.
        blank: index of the blank symbol.

    ``alpha[t, u]`` (log-probability of having emitted ``u`` labels by frame ``t``) satisfies
    ``alpha[t, u] = logaddexp(alpha[t-1, u] + blank[t-1, u], alpha[t, u-1] + emit[t, u-1])``.
    Within frame ``t`` the second term only accumulates emissions, so with ``c[u] = sum_{k<u}
    emit[t, k]``: ``alpha[t, u] = c[u] + logcumsumexp_u(alpha[t-1, u] + blank[t-1, u] - c[u])``.
    """
    B, T, U1, _ = log_probs.shape
    blank_lp = log_probs[..., blank]  # (B, T, U+1)
    emit_lp = log_probs[:, :, :-1].gather(3, labels[:, None, :, None].expand(B, T, U1 - 1, 1)).squeeze(3)  # (B, T, U)
    emit_cum = F.pad(emit_lp.cumsum(dim=2), (1, 0))  # (B, T, U+1): c[u] per frame
    alphas = [emit_cum[:, 0]]  # frame 0: only emissions
    for t in range(1, T):
        arrive = alphas[-1] + blank_lp[:, t - 1]  # (B, U+1): reach frame t by a blank
        alphas.append(emit_cum[:, t] + torch.logcumsumexp(arrive - emit_cum[:, t], dim=1))
    alpha = torch.stack(alphas, dim=1)  # (B, T, U+1)
    batch, last = torch.arange(B, device=log_probs.device), logit_lens - 1
    return -(alpha[batch, last, label_lens] + blank_lp[batch, last, label_lens])


class TransducerWorkload(Workload):
    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        logits, logit_lens = outputs
        labels, label_lens = self.targets
        log_probs = F.log_softmax(logits.float(), dim=-1)
        return transducer_loss(log_probs, labels, logit_lens, label_lens, self.module.blank).mean()


def _create_rnnt(ctx: BuildContext, **kwargs) -> Workload:
    # Smoke: the same layers at toy width (49M parameters and their optimizer state take seconds on a CPU).
    smoke = dict(n_classes=32, enc_n_hid=64, pred_n_hid=32, joint_n_hid=32) if ctx.smoke else {}
    model = RNNT(**(smoke | kwargs))
    # LibriSpeech training utterances: up to 16.7 s; 15 s is 500 stacked frames and about 60 tokens.
    frames, tokens = ctx.pick(500, 12), ctx.pick(60, 4)
    frame_lens = random_lengths(ctx, ctx.batch_size, frames, min_len=frames // 2)
    feats = ctx.randn(frames, ctx.batch_size, model.pre_rnn.lstm.input_size)  # time-major, as the reference
    label_lens = random_lengths(ctx, ctx.batch_size, tokens, min_len=tokens // 2)
    labels = ctx.randint(0, model.blank, (ctx.batch_size, tokens))
    opt = ctx.optimizer(model.parameters(), "adamw", lr=1e-3, weight_decay=1e-3) if ctx.train else None
    return TransducerWorkload(ctx, model, (feats, frame_lens, labels), (labels, label_lens), optimizer=opt)


@register_model(
    domain="speech",
    task="recognition",
    batch_size=(16, 16),
    param_count=49_006_080,
    tags=("mlperf",),
    source="Graves 2012; MLPerf training rnn_speech_recognition reference",
    notes="train batch: MLPerf's 1024 over 8 GPUs and 8 accumulation steps; eval = teacher-forced joint logits",
)
def rnnt(ctx: BuildContext, **kwargs) -> Workload:
    """RNN-T (5x1024 LSTM encoder, 2x512 LSTM predictor, joint 512, 1,024 classes), plain-PyTorch loss."""
    return _create_rnnt(ctx, **kwargs)
