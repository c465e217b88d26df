"""Tacotron: characters to linear spectrogram through CBHG modules, then Griffin-Lim.

Wang et al., "Tacotron: Towards End-to-End Speech Synthesis" (Interspeech 2017), as implemented
in PyTorch by r9y9/tacotron_pytorch (MIT) with its default hparams (which follow keithito/tacotron,
MIT): 256-dim character embedding; encoder pre-net 256-128 (ReLU, dropout 0.5) and CBHG (conv bank
K=16 of 128 channels with BatchNorm, max-pool of width 2 along time with stride 1, conv projections
128-128, 4 highway layers, bidirectional GRU of 128 per direction); decoder pre-net 256-128 on the
previous ``r`` frames, attention GRU (256) with Bahdanau attention (256), two residual GRUs (256),
``r=5`` mel frames (80 bins) per step; post-processing CBHG (K=8, projections 256-80, GRU 80 per
direction) and a linear layer to 1,025 linear-frequency bins. Audio settings are the reference's:
20 kHz, 50 ms windows (1,000 samples) in a 2,048-point FFT, 12.5 ms hop (250 samples).

Train: teacher forcing (each step fed the previous ``r`` target frames); loss = L1 on the mel plus
L1 on the linear spectrogram, the latter averaged with an L1 on the bins below 3 kHz (the
reference's priority weighting); Adam (lr 0.002) with gradient-norm clipping at 1.0, as the
reference's ``train.py``. Eval: greedy decoding for a fixed number of frames (the reference stops
when every output is below 0.2 or after 200 steps; a fixed count keeps the work independent of the
random weights), then the reference's synthesis path: normalised dB to magnitude, raised to the
power 1.5, and Griffin-Lim (60 iterations) from a random phase, here in torch (``torch.stft`` /
``torch.istft``, Hann window) instead of librosa. Not done: the reference's noam learning-rate
decay (constant lr here) and the inverse pre-emphasis IIR filter after Griffin-Lim (scipy's
``lfilter``; no torch equivalent). BatchNorm momentum 0.99 and eps 1e-3 are kept as the reference
writes them (PyTorch's momentum is one minus TensorFlow's). Written from the reference; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import length_mask, random_lengths

__all__ = ["CBHG", "Highway", "Tacotron", "TacotronConfig", "griffin_lim", "tacotron_loss"]


@dataclass(frozen=True)
class TacotronConfig:
    n_symbols: int = 149  # keithito text/symbols.py: pad, eos, 63 characters, 84 ARPAbet
    embedding_dim: int = 256
    prenet_dims: tuple[int, int] = (256, 128)
    encoder_dim: int = 128  # CBHG width and GRU size per direction
    encoder_k: int = 16  # conv bank kernel sizes 1..K
    attention_dim: int = 256  # attention GRU and Bahdanau attention
    decoder_dim: int = 256  # the two residual decoder GRUs
    r: int = 5  # mel frames per decoder step (hparams.outputs_per_step)
    n_mels: int = 80
    postnet_k: int = 8
    postnet_projection: int = 256
    n_freq: int = 1025  # linear bins = n_fft / 2 + 1
    sample_rate: int = 20_000
    win_length: int = 1000  # 50 ms
    hop_length: int = 250  # 12.5 ms
    min_level_db: float = -100.0
    ref_level_db: float = 20.0
    power: float = 1.5  # magnitudes are raised to this before Griffin-Lim
    griffin_lim_iters: int = 60

    @property
    def n_fft(self) -> int:
        return (self.n_freq - 1) * 2


SMOKE = TacotronConfig(
    embedding_dim=16,
    prenet_dims=(16, 8),
    encoder_dim=8,
    encoder_k=4,
    attention_dim=16,
    decoder_dim=16,
    n_mels=8,
    postnet_k=3,
    postnet_projection=16,
    n_freq=33,
    win_length=32,
    hop_length=8,
    griffin_lim_iters=3,
)


class Prenet(nn.Module):
    def __init__(self, in_dim: int, dims: tuple[int, ...]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip((in_dim,) + tuple(dims[:-1]), dims))
        self.dropout = nn.Dropout(0.5)  # training only, as the reference (nn.Dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.layers:
            x = self.dropout(F.relu(linear(x)))
        return x


class BatchNormConv1d(nn.Module):
    """Conv1d, optional ReLU, then BatchNorm (the reference's order)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, relu: bool) -> None:
        super().__init__()
        self.conv1d = nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2)
        self.bn = nn.BatchNorm1d(c_out, momentum=0.99, eps=1e-3)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1d(x)
        return self.bn(F.relu(x) if self.relu else x)


class Highway(nn.Module):
    """``y = relu(H x) * t + x * (1 - t)`` with gate ``t = sigmoid(T x)``, T's bias starting at -1."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.H = nn.Linear(dim, dim)
        self.T = nn.Linear(dim, dim)
        nn.init.zeros_(self.H.bias)
        nn.init.constant_(self.T.bias, -1.0)  # carry the input through at first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.sigmoid(self.T(x))
        return F.relu(self.H(x)) * t + x * (1.0 - t)


class CBHG(nn.Module):
    """Conv bank + max-pool + conv projections + residual, highways, bidirectional GRU."""

    def __init__(self, dim: int, k: int, projections: tuple[int, int]) -> None:
        super().__init__()
        self.conv1d_banks = nn.ModuleList(BatchNormConv1d(dim, dim, kernel, relu=True) for kernel in range(1, k + 1))
        self.max_pool1d = nn.MaxPool1d(kernel_size=2, stride=1, padding=1)
        in_dims = (k * dim, projections[0])
        self.conv1d_projections = nn.ModuleList(
            [
                BatchNormConv1d(in_dims[0], projections[0], 3, relu=True),
                BatchNormConv1d(in_dims[1], projections[1], 3, relu=False),
            ]
        )
        self.pre_highway = nn.Linear(projections[-1], dim, bias=False) if projections[-1] != dim else None
        self.highways = nn.ModuleList(Highway(dim) for _ in range(4))
        self.gru = nn.GRU(dim, dim, batch_first=True, bidirectional=True)

    def bank_and_pool(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, dim, T)`` to ``(B, K * dim, T)``: even kernels give T + 1 outputs, trimmed, as is the pool."""
        T = x.size(-1)
        x = torch.cat([conv(x)[:, :, :T] for conv in self.conv1d_banks], dim=1)
        return self.max_pool1d(x)[:, :, :T]

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, T, dim)`` to ``(B, T, 2 * dim)``; packed by ``lengths`` (sorted, longest first) when given."""
        x = self.bank_and_pool(inputs.transpose(1, 2))
        for conv in self.conv1d_projections:
            x = conv(x)
        x = x.transpose(1, 2)  # (B, T, projections[-1])
        if self.pre_highway is not None:
            x = self.pre_highway(x)
        x = x + inputs
        for highway in self.highways:
            x = highway(x)
        if lengths is None:
            return self.gru(x)[0]
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True)
        return pad_packed_sequence(self.gru(packed)[0], batch_first=True, total_length=x.size(1))[0]


class BahdanauAttention(nn.Module):
    """Additive attention ``v^T tanh(W q + memory_layer(m))`` (no location features, unlike Tacotron 2)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.query_layer = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, 1, bias=False)

    def forward(
        self, query: torch.Tensor, memory: torch.Tensor, processed_memory: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``query (B, dim)``, ``memory (B, L, M)``, ``processed_memory (B, L, dim)`` to context ``(B, M)``, weights."""
        energies = self.v(torch.tanh(self.query_layer(query)[:, None] + processed_memory)).squeeze(-1)
        weights = F.softmax(energies, dim=-1)  # (B, L)
        return torch.bmm(weights[:, None], memory).squeeze(1), weights


class Decoder(nn.Module):
    def __init__(self, cfg: TacotronConfig) -> None:
        super().__init__()
        self.cfg = cfg
        memory_dim = 2 * cfg.encoder_dim
        self.prenet = Prenet(cfg.n_mels * cfg.r, cfg.prenet_dims)
        self.attention_rnn = nn.GRUCell(cfg.prenet_dims[-1] + memory_dim, cfg.attention_dim)
        self.attention = BahdanauAttention(cfg.attention_dim)
        self.memory_layer = nn.Linear(memory_dim, cfg.attention_dim, bias=False)
        self.project_to_decoder_in = nn.Linear(cfg.attention_dim + memory_dim, cfg.decoder_dim)
        self.decoder_rnns = nn.ModuleList(nn.GRUCell(cfg.decoder_dim, cfg.decoder_dim) for _ in range(2))
        self.proj_to_mel = nn.Linear(cfg.decoder_dim, cfg.n_mels * cfg.r)

    def forward(
        self, memory: torch.Tensor, mels: torch.Tensor | None, n_steps: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mel ``(B, n_steps * r, n_mels)`` and alignments ``(B, n_steps, L)``; teacher-forced when ``mels`` given."""
        B, cfg = memory.size(0), self.cfg
        processed_memory = self.memory_layer(memory)  # (B, L, attention_dim)
        if mels is not None:
            mels = mels.reshape(B, n_steps, cfg.n_mels * cfg.r)  # group r frames per step
        frame = memory.new_zeros(B, cfg.n_mels * cfg.r)  # go frame
        att_h = memory.new_zeros(B, cfg.attention_dim)
        dec_h = [memory.new_zeros(B, cfg.decoder_dim) for _ in self.decoder_rnns]
        context = memory.new_zeros(B, memory.size(2))
        outputs, alignments = [], []
        for t in range(n_steps):
            if t > 0:
                frame = outputs[-1] if mels is None else mels[:, t - 1]
            att_h = self.attention_rnn(torch.cat((self.prenet(frame), context), -1), att_h)
            context, weights = self.attention(att_h, memory, processed_memory)
            x = self.project_to_decoder_in(torch.cat((att_h, context), -1))
            for i, rnn in enumerate(self.decoder_rnns):
                dec_h[i] = rnn(x, dec_h[i])
                x = x + dec_h[i]  # residual
            outputs.append(self.proj_to_mel(x))
            alignments.append(weights)
        return torch.stack(outputs, dim=1).reshape(B, n_steps * cfg.r, cfg.n_mels), torch.stack(alignments, dim=1)


class Tacotron(nn.Module):
    def __init__(self, cfg: TacotronConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.n_symbols, cfg.embedding_dim)
        nn.init.normal_(self.embedding.weight, 0.0, 0.3)  # the reference's "smaller std"
        self.encoder_prenet = Prenet(cfg.embedding_dim, cfg.prenet_dims)
        self.encoder_cbhg = CBHG(cfg.prenet_dims[-1], cfg.encoder_k, (cfg.encoder_dim, cfg.encoder_dim))
        self.decoder = Decoder(cfg)
        self.postnet = CBHG(cfg.n_mels, cfg.postnet_k, (cfg.postnet_projection, cfg.n_mels))
        self.last_linear = nn.Linear(2 * cfg.n_mels, cfg.n_freq)

    def forward(
        self, text: torch.Tensor, text_lens: torch.Tensor | None, mels: torch.Tensor | None, n_frames: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mel ``(B, T, n_mels)``, linear ``(B, T, n_freq)``, alignments; teacher-forced when ``mels`` given."""
        memory = self.encoder_cbhg(self.encoder_prenet(self.embedding(text)), text_lens)  # (B, L, 2 * encoder_dim)
        mel, alignments = self.decoder(memory, mels, n_frames // self.cfg.r)
        return mel, self.last_linear(self.postnet(mel)), alignments

    def spectrogram_to_magnitude(self, linear: torch.Tensor) -> torch.Tensor:
        """Normalised dB ``(B, T, n_freq)`` to magnitude ``(B, n_freq, T)`` raised to ``power``."""
        cfg = self.cfg
        db = linear.clamp(0.0, 1.0) * -cfg.min_level_db + cfg.min_level_db + cfg.ref_level_db
        return torch.pow(10.0, db * 0.05 * cfg.power).transpose(1, 2)

    def synthesize(self, text: torch.Tensor, n_frames: int) -> torch.Tensor:
        """Greedy decoding of ``n_frames``, then Griffin-Lim: waveform ``(B, samples)``."""
        _, linear, _ = self(text, None, None, n_frames)
        cfg = self.cfg
        # fp32 whatever the model's precision: the reference runs this on the numpy copy of the output.
        return griffin_lim(
            self.spectrogram_to_magnitude(linear.float()),
            cfg.n_fft,
            cfg.hop_length,
            cfg.win_length,
            cfg.griffin_lim_iters,
        )


def griffin_lim(magnitude: torch.Tensor, n_fft: int, hop_length: int, win_length: int, n_iters: int) -> torch.Tensor:
    """Phase reconstruction of ``magnitude (B, n_fft // 2 + 1, T)`` from a random phase: waveform ``(B, samples)``.

    Each iteration re-analyses the current waveform and keeps only the phase of its STFT.
    """
    window = torch.hann_window(win_length, device=magnitude.device, dtype=magnitude.dtype)
    kwargs = dict(n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window)
    angles = torch.polar(torch.ones_like(magnitude), 2 * torch.pi * torch.rand_like(magnitude))
    signal = torch.istft(magnitude * angles, **kwargs)
    for _ in range(n_iters):
        angles = torch.polar(torch.ones_like(magnitude), torch.stft(signal, return_complex=True, **kwargs).angle())
        signal = torch.istft(magnitude * angles, **kwargs)
    return signal


def tacotron_loss(
    outputs: tuple[torch.Tensor, ...], targets: tuple[torch.Tensor, torch.Tensor], n_priority_freq: int
) -> torch.Tensor:
    """L1 on the mel plus L1 on the linear spectrogram, half of it on the bins below 3 kHz."""
    mel, linear, _ = outputs
    mel_target, linear_target = targets
    linear_loss = 0.5 * F.l1_loss(linear, linear_target) + 0.5 * F.l1_loss(
        linear[..., :n_priority_freq], linear_target[..., :n_priority_freq]
    )
    return F.l1_loss(mel, mel_target) + linear_loss


class TacotronWorkload(Workload):
    """Train: teacher-forced forward, loss, clipped Adam step; eval: greedy decoding and Griffin-Lim."""

    max_grad_norm = 1.0  # train.py: clip_grad_norm_(model.parameters(), 1.0)

    def forward(self):
        text, text_lens, mels = self.inputs
        if self.ctx.train:
            return self.module(text, text_lens, mels, mels.size(1))
        return self.module.synthesize(text, mels.size(1))

    def compute_loss(self, outputs) -> torch.Tensor:
        cfg = self.module.cfg
        return tacotron_loss(outputs, self.targets, int(3000 / (cfg.sample_rate * 0.5) * cfg.n_freq))


def _create_tacotron(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(ctx.pick(TacotronConfig(), SMOKE), **kwargs)
    model = Tacotron(cfg)
    # A padded batch: up to 120 symbols and 400 frames (5 s at 12.5 ms), targets in [0, 1] as the
    # reference's normalised dB spectrograms, frames a multiple of r.
    symbols, frames = ctx.pick(120, 12), ctx.pick(400, 10)
    text_lens = random_lengths(ctx, ctx.batch_size, symbols, min_len=symbols // 2)
    text = ctx.randint(1, cfg.n_symbols, (ctx.batch_size, symbols)) * length_mask(text_lens, symbols)
    mels, linear = ctx.rand(ctx.batch_size, frames, cfg.n_mels), ctx.rand(ctx.batch_size, frames, cfg.n_freq)
    opt = ctx.optimizer(model.parameters(), "adam", lr=0.002, betas=(0.9, 0.999)) if ctx.train else None
    return TacotronWorkload(ctx, model, (text, text_lens, mels), (mels, linear), optimizer=opt)


@register_model(
    domain="speech",
    task="synthesis",
    batch_size=(32, 32),
    source="Wang et al. 2017; r9y9/tacotron_pytorch",
    unsupported_precisions=("fp16",),
    notes="eval = greedy decoding of a fixed number of frames, then 60 Griffin-Lim iterations "
    "(torch.stft/istft, in fp32 at every precision). fp16 unsupported: pure-fp16 training "
    "goes non-finite at the second smoke step; amp works.",
)
def tacotron1(ctx: BuildContext, **kwargs) -> Workload:
    """Tacotron (r9y9 hparams, r=5): text to mel and linear spectrograms, Griffin-Lim in eval."""
    return _create_tacotron(ctx, **kwargs)
