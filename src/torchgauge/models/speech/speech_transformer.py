"""Speech-Transformer: an encoder-decoder Transformer for character-level ASR.

Dong, Xu and Xu, "Speech-Transformer: A No-Recurrence Sequence-to-Sequence Model for Speech
Recognition" (ICASSP 2018), as implemented by kaituoxu/Speech-Transformer (MIT license) and run by
TorchBench. Input: 80-dim filterbank frames (10 ms) stacked at a low frame rate (4 frames every
3, 320 dims), a Linear + LayerNorm front-end instead of an embedding, sinusoidal positions,
6 + 6 post-LN layers (d_model 512, 8 heads, d_ff 2048, with biases), character decoder over
AISHELL-1's 4,233 symbols with the output projection tied to the embedding, label-smoothed
(0.1) cross-entropy. The layers are ``common.transformer_layers``' (those of ``nlp.transformer``).
Every weight matrix starts Xavier-uniform, as the reference's ``Transformer.__init__`` sets them.

Train is TorchBench's ``train()`` (its ``config.py`` ``SpeechTransformerTrainConfig.train``): one
training pass over its single prefetched batch with the model in train mode, then its
"cross-validation" pass with the model in eval mode, which also steps the optimizer (its
``cross_valid`` is False): two Adam(betas (0.9, 0.98), eps 1e-9) steps per call, at the Noam
learning rate ``k * d_model^-0.5 * min(n^-0.5, n * warmup^-1.5)`` (k 0.2, warmup 1).

Eval is TorchBench's ``eval()``: ``recognize`` on one utterance, the reference decoder's
``recognize_beam`` with TorchBench's settings (:class:`BeamSearch`: beam 5, 1-best, at most 100
steps). See :meth:`SpeechTransformer.beam_search` for what runs on the device and what on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import length_mask, random_lengths
from ..common.transformer_layers import DecoderLayer, EncoderLayer, causal_mask, sinusoid_table

__all__ = ["BeamSearch", "Recognition", "SpeechTransformer", "stack_low_frame_rate"]

IGNORE_ID = -1  # padding of the decoder targets
NOAM_K, NOAM_WARMUP = 0.2, 1  # TorchBench's TransformerOptimizer settings (k, warmup_steps)


@dataclass(frozen=True)
class BeamSearch:
    """Decoding settings of the reference's ``recognize`` (TorchBench's ``SpeechTransformerEvalConfig``)."""

    beam_size: int = 5  # hypotheses kept per step, and candidates drawn from each
    nbest: int = 1  # finished hypotheses returned, best first
    decode_max_len: int = 100  # steps at most; 0: as many as the utterance has encoder frames

    def max_steps(self, encoder_frames: int) -> int:
        return self.decode_max_len if self.decode_max_len > 0 else encoder_frames


class Recognition(NamedTuple):  # a tuple, so pytrees and the accuracy check see its tensors
    """What :meth:`SpeechTransformer.beam_search` returns.

    ``nbest``: dicts of ``score`` (a device scalar, the summed log-probabilities) and ``yseq``
    (the ids, <sos> first and <eos> last, as a host list), best first. ``steps``: decoding steps
    run; ``decoder_calls``: decoder passes (one per live hypothesis per step).
    """

    nbest: list[dict]
    steps: int
    decoder_calls: int


def stack_low_frame_rate(feats: torch.Tensor, m: int = 4, n: int = 3) -> torch.Tensor:
    """``(B, T, F)`` frames to ``(B, ceil(T / n), m * F)``: every n-th frame stacked with the next m - 1.

    The last frame is repeated where a window runs past the end, as the reference's ``build_LFR_features``.
    """
    T = feats.size(1)
    t_lfr = -(-T // n)
    missing = (t_lfr - 1) * n + m - T
    if missing > 0:
        feats = torch.cat((feats, feats[:, -1:].expand(-1, missing, -1)), dim=1)
    windows = feats.unfold(1, m, n)  # (B, t_lfr, F, m)
    return windows.transpose(2, 3).flatten(2)  # (B, t_lfr, m * F): frames in time order


class SpeechTransformer(nn.Module):
    def __init__(
        self,
        d_input: int = 320,
        vocab_size: int = 4233,
        d_model: int = 512,
        d_inner: int = 2048,
        n_layers_enc: int = 6,
        n_layers_dec: int = 6,
        n_head: int = 8,
        d_k: int = 64,
        d_v: int = 64,
        dropout: float = 0.1,
        pe_maxlen: int = 5000,
    ) -> None:
        super().__init__()
        self.sos_id, self.eos_id = vocab_size - 2, vocab_size - 1  # the dictionary ends with <sos>, <eos>
        self.d_model = d_model
        self.linear_in = nn.Linear(d_input, d_model)  # replaces an input embedding
        self.layer_norm_in = nn.LayerNorm(d_model)
        self.register_buffer("position", sinusoid_table(pe_maxlen, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)
        layer_args = (d_model, d_inner, n_head, d_k, d_v, dropout, True, 1e-5)  # biases, LayerNorm eps 1e-5
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer_args) for _ in range(n_layers_enc))
        self.embedding = nn.Embedding(vocab_size, d_model)  # also the output projection
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(n_layers_dec))
        # The reference's Transformer re-initialises every matrix (embedding included) Xavier-uniform;
        # with random weights this sets the logits' spread, hence which step <eos> wins a beam.
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``feats (B, T, d_input)`` to encoder states ``(B, T, d_model)`` and the key mask ``(B, 1, 1, T)``."""
        T = feats.size(1)
        valid = length_mask(feat_lens, T)
        x = self.dropout(self.layer_norm_in(self.linear_in(feats)) + self.position[:T])
        key_mask, keep = valid[:, None, None, :], valid[..., None].to(x.dtype)
        for layer in self.encoder_layers:
            x = layer(x, key_mask, keep)
        return x, key_mask

    def decode(
        self,
        ys_in: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None,
        ys_valid: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Decoder inputs ``(B, U)`` (<sos> first) to logits ``(B, U, V)``; ``ys_valid`` marks non-padding."""
        U = ys_in.size(1)
        self_mask = causal_mask(U, ys_in.device)
        keep = None
        if ys_valid is not None:
            self_mask = self_mask & ys_valid[:, None, None, :]
            keep = ys_valid[..., None].to(memory.dtype)
        x = self.dropout(self.embedding(ys_in) * self.d_model**0.5 + self.position[:U])
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask, memory_mask, keep)
        return F.linear(x, self.embedding.weight)

    def forward(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, ys_in: torch.Tensor, ys_valid: torch.Tensor
    ) -> torch.Tensor:
        """Teacher-forced logits ``(B, U, V)``."""
        memory, memory_mask = self.encode(feats, feat_lens)
        return self.decode(ys_in, memory, memory_mask, ys_valid)

    def recognize(self, feats: torch.Tensor, feat_len: torch.Tensor, search: BeamSearch) -> Recognition:
        """One utterance ``feats (T, d_input)`` with ``feat_len (1,)``: encode, then :meth:`beam_search`."""
        memory, _ = self.encode(feats[None], feat_len)
        return self.beam_search(memory, search)

    def beam_search(self, memory: torch.Tensor, search: BeamSearch) -> Recognition:
        """Beam search over the decoder for one utterance's encoder states ``memory (1, T, d_model)``.

        The reference's ``recognize_beam``, step for step. Each step decodes every live hypothesis
        on its own (batch 1) over its whole prefix, without a cache, and takes its ``beam_size``
        best next ids; the ``beam_size`` best extensions of all of them by summed log-probability
        survive. At the last step <eos> is appended to each survivor. A hypothesis ending in <eos>
        leaves the beam for good (the beam is not refilled), and decoding stops when none is left.

        What is host-side stays host-side, as in the reference: the beam is a Python list; each
        extension's score is a device scalar (``score + log p``) and its id is read back to the
        host (``int``); the survivors are picked by Python's ``sorted`` on the device scalars
        (each comparison reads one back); the <eos> test reads back each survivor's last id.
        """
        device, beam = memory.device, search.beam_size
        max_steps = search.max_steps(memory.size(1))
        live: list[tuple[float | torch.Tensor, torch.Tensor]] = [
            (0.0, torch.full((1, 1), self.sos_id, dtype=torch.long, device=device))
        ]
        ended: list[tuple[torch.Tensor, torch.Tensor]] = []
        steps = calls = 0
        for step in range(max_steps):
            steps += 1
            survivors: list[tuple[torch.Tensor, torch.Tensor]] = []
            for score, yseq in live:  # (1, i + 1) ids, <sos> first
                calls += 1
                logits = self.decode(yseq, memory, None)[:, -1]  # (1, V)
                top_logp, top_ids = F.log_softmax(logits, dim=-1).topk(beam, dim=1)  # (1, beam) each
                for j in range(beam):
                    extended = torch.ones(1, yseq.size(1) + 1, dtype=torch.long, device=device)
                    extended[:, :-1] = yseq
                    extended[:, -1] = int(top_ids[0, j])
                    survivors.append((score + top_logp[0, j], extended))
                survivors = sorted(survivors, key=lambda h: h[0], reverse=True)[:beam]
            if step == max_steps - 1:  # the last step ends every hypothesis
                eos = torch.full((1, 1), self.eos_id, dtype=torch.long, device=device)
                survivors = [(score, torch.cat((yseq, eos), dim=1)) for score, yseq in survivors]
            live = []
            for hypothesis in survivors:
                (ended if bool(hypothesis[1][0, -1] == self.eos_id) else live).append(hypothesis)
            if not live:
                break
        best = sorted(ended, key=lambda h: h[0], reverse=True)[: search.nbest]
        return Recognition([{"score": s, "yseq": y[0].cpu().tolist()} for s, y in best], steps, calls)


class RecognitionWorkload(Workload):
    """Train: two teacher-forced steps (train mode, then eval mode); eval: beam search per utterance.

    Eval ``inputs`` are ``((feats (T_i, 320), length (1,) int32), ...)``, one pair per utterance.
    """

    def __init__(
        self,
        ctx: BuildContext,
        module: SpeechTransformer,
        inputs: tuple,
        targets: torch.Tensor | None,
        *,
        search: BeamSearch,
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        super().__init__(ctx, module, inputs, targets, optimizer=optimizer)
        self.search = search
        self.noam_steps = 0

    def forward(self):
        if self.ctx.train:
            return self.module(*self.inputs)
        # The reference's eval loop: each utterance decoded in turn (TorchBench prepares one).
        return [self.module.recognize(feats, feat_len, self.search) for feats, feat_len in self.inputs]

    def train_step(self) -> torch.Tensor:
        """A step in train mode, then one in eval mode (dropout off), each at its Noam learning rate."""
        d_model = self.module.d_model
        for training in (True, False):
            self.module.train(training)
            self.noam_steps += 1
            lr = NOAM_K * d_model**-0.5 * min(self.noam_steps**-0.5, self.noam_steps * NOAM_WARMUP**-1.5)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            loss = super().train_step()
        return loss

    def compute_loss(self, logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(
            logits.flatten(0, 1), self.targets.flatten(), ignore_index=IGNORE_ID, label_smoothing=0.1
        )


def _transcripts(ctx: BuildContext, sos_id: int, eos_id: int, max_len: int) -> tuple[torch.Tensor, ...]:
    """Decoder inputs ``<sos> y <eos>...``, their validity mask and targets ``y <eos> -1...``, each
    ``(B, max_len + 1)``."""
    lengths = random_lengths(ctx, ctx.batch_size, max_len, min_len=max_len // 2)
    chars = ctx.randint(1, sos_id, (ctx.batch_size, max_len))  # 0 is <blank> in the dictionary
    inside = length_mask(lengths, max_len)
    ys_in = torch.cat((torch.full_like(chars[:, :1], sos_id), chars.masked_fill(~inside, eos_id)), dim=1)
    ys_valid = length_mask(lengths + 1, max_len + 1)
    ys_out = torch.cat((chars.masked_fill(~inside, IGNORE_ID), torch.full_like(chars[:, :1], IGNORE_ID)), dim=1)
    ys_out = ys_out.scatter(1, lengths[:, None], eos_id)
    return ys_in, ys_valid, ys_out


# Smoke: the same layers at toy width (46M parameters and their Adam state take seconds on a CPU),
# and a 4-step beam search (the full-size bound is 100).
_SMOKE = dict(vocab_size=64, d_model=64, d_inner=128, n_layers_enc=2, n_layers_dec=2, n_head=2, d_k=32, d_v=32)
_SMOKE_DECODE_MAX_LEN = 4


def _create_speech_transformer(ctx: BuildContext, **kwargs) -> Workload:
    search_fields = {k: kwargs.pop(k) for k in ("beam_size", "nbest", "decode_max_len") if k in kwargs}
    search = BeamSearch(**{"decode_max_len": ctx.pick(100, _SMOKE_DECODE_MAX_LEN), **search_fields})
    model = SpeechTransformer(**((_SMOKE if ctx.smoke else {}) | kwargs))
    # AISHELL utterances: about 6 s of 10 ms frames (600 frames, 200 after stacking), up to 24 characters.
    frames = ctx.pick(600, 30)
    if not ctx.train:
        # Utterances as the reference's recognizer takes them, unpadded: (T_i, 320) features and an
        # int32 length (1,) each; the default eval batch is TorchBench's one utterance. Lengths are
        # drawn on the host (the first the longest), so a meta-device build knows them too.
        others = torch.randint(frames // 2, frames + 1, (ctx.batch_size - 1,), generator=ctx.generator(), device="cpu")
        utterances = []
        for n in [frames, *others.tolist()]:
            feats = stack_low_frame_rate(ctx.randn(1, n, 80))[0]
            utterances.append((feats, torch.tensor([feats.size(0)], dtype=torch.int32, device=feats.device)))
        return RecognitionWorkload(ctx, model, tuple(utterances), None, search=search, optimizer=None)
    frame_lens = random_lengths(ctx, ctx.batch_size, frames, min_len=frames // 2)
    fbank = ctx.randn(ctx.batch_size, frames, 80) * length_mask(frame_lens, frames)[..., None]
    feats = stack_low_frame_rate(fbank)
    feat_lens = -(-frame_lens // 3)
    ys_in, ys_valid, ys_out = _transcripts(ctx, model.sos_id, model.eos_id, ctx.pick(24, 5))
    opt = ctx.optimizer(model.parameters(), "adam", lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    return RecognitionWorkload(ctx, model, (feats, feat_lens, ys_in, ys_valid), ys_out, search=search, optimizer=opt)


@register_model(
    domain="speech",
    task="recognition",
    batch_size=(32, 1),
    param_count=46_471_168,
    source="Dong et al. 2018; kaituoxu/Speech-Transformer",
    notes="param_count: the reference implementation with AISHELL-1's 4,233 characters; "
    "eval = beam search (beam 5, 1-best, at most 100 steps, until every hypothesis ends in <eos>) "
    "on one utterance, as TorchBench; model args beam_size, nbest, decode_max_len change it",
)
def speech_transformer(ctx: BuildContext, **kwargs) -> Workload:
    """Speech-Transformer (6 + 6 layers, d_model 512) on low-frame-rate filterbank features."""
    return _create_speech_transformer(ctx, **kwargs)
