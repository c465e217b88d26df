"""Whisper-tiny speech recognition (log-mel encoder, token decoder).

Paper: Radford et al., Robust Speech Recognition via Large-Scale Weak Supervision, 2022.
Implementation: Hugging Face transformers ``WhisperForConditionalGeneration`` (Apache-2.0),
random-initialised from the openai/whisper-tiny config (TorchBench's ``WhisperConfig()``
defaults are the same sizes). Two workloads:

- ``hf_Whisper`` is TorchBench's: ``AutoModelForAudioClassification`` of ``WhisperConfig()``,
  i.e. ``WhisperForAudioClassification`` (the encoder plus a 2-label head, 8,307,458
  parameters), eval only, on ``randn(B, 80, 3000)`` log-mel features.
- ``whisper_tiny`` is the full encoder-decoder: 30 s of 80-bin log-mel features (3000 frames)
  and a full 448-token decoder sequence: labels in training, decoder tokens in eval.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload


def speech_inputs(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Log-mel features ``(B, n_mels, 2 * max_source_positions)`` and ``seq_len`` decoder tokens."""
    # The encoder's two convolutions (the second with stride 2) map 3000 frames to its 1500 positions.
    frames = 2 * config.max_source_positions
    inputs = {"input_features": ctx.randn(ctx.batch_size, config.num_mel_bins, frames)}
    decoder_key = "labels" if ctx.train else "decoder_input_ids"
    inputs[decoder_key] = ctx.randint(0, config.vocab_size, (ctx.batch_size, seq_len))
    return inputs


WHISPER_TINY = HFModelSpec(
    checkpoint="openai/whisper-tiny",
    config_class="WhisperConfig",
    model_class="WhisperForConditionalGeneration",
    config={
        "vocab_size": 51865,
        "num_mel_bins": 80,
        "d_model": 384,
        "encoder_layers": 4,
        "decoder_layers": 4,
        "encoder_attention_heads": 6,
        "decoder_attention_heads": 6,
        "encoder_ffn_dim": 1536,
        "decoder_ffn_dim": 1536,
        "max_source_positions": 1500,
        "max_target_positions": 448,
        "activation_function": "gelu",
        "pad_token_id": 50257,
        "bos_token_id": 50257,
        "eos_token_id": 50257,
        "decoder_start_token_id": 50258,  # <|startoftranscript|>
    },
    seq_len=(448, 448),  # max_target_positions: a full decoder context
    inputs=speech_inputs,
    smoke_config={
        "vocab_size": 512,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_source_positions": 16,  # 32 frames
        "max_target_positions": 16,
        "pad_token_id": 510,
        "bos_token_id": 510,
        "eos_token_id": 510,
        "decoder_start_token_id": 511,
    },
)


def features_only(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Log-mel features ``(B, n_mels, 2 * max_source_positions)``, TorchBench's whole input."""
    return {"input_features": ctx.randn(ctx.batch_size, config.num_mel_bins, 2 * config.max_source_positions)}


# TorchBench's hf_Whisper: WhisperConfig() defaults through AutoModelForAudioClassification.
WHISPER_AUDIO_CLASSIFICATION = HFModelSpec(
    checkpoint="WhisperConfig()",
    config_class="WhisperConfig",
    model_class="WhisperForAudioClassification",
    config=WHISPER_TINY.config,
    seq_len=(3000, 3000),  # mel frames (fixed by max_source_positions; informational)
    inputs=features_only,
    smoke_config=WHISPER_TINY.smoke_config,
)


@register_model(
    domain="speech",
    task="audio_classification",
    modes=("eval",),
    source="Radford et al., Whisper, 2022; Hugging Face transformers (Apache-2.0); TorchBench hf_Whisper",
    batch_size=8,
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=8_307_458,
    hf_spec=WHISPER_AUDIO_CLASSIFICATION,
    notes="eval only, as TorchBench (its train raises NotImplementedError)",
    torchbench_precision=HUGGINGFACE_FACTORY,  # TorchBench's hf_Whisper/__init__.py:10 declares it again
)
def hf_Whisper(ctx: BuildContext, **kwargs: Any) -> Workload:
    """TorchBench's: WhisperForAudioClassification (tiny encoder + 2-label head) on (B, 80, 3000) features."""
    return create_hf_workload(ctx, WHISPER_AUDIO_CLASSIFICATION, **kwargs)


@register_model(
    domain="speech",
    task="speech_recognition",
    source="Radford et al., Whisper, 2022; Hugging Face transformers (Apache-2.0)",
    batch_size=(8, 64),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=37_760_640,
    hf_spec=WHISPER_TINY,
)
def whisper_tiny(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Whisper-tiny (WhisperForConditionalGeneration), 3000 mel frames, 448 decoder tokens."""
    return create_hf_workload(ctx, WHISPER_TINY, **kwargs)


def features_only(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Log-mel features ``(B, n_mels, 2 * max_source_positions)``: the encoder's whole input."""
    return {"input_features": ctx.randn(ctx.batch_size, config.num_mel_bins, 2 * config.max_source_positions)}


# TorchBench's hf_distil_whisper: AutoModelForAudioClassification over the distil-medium.en
# config (basic_configs.py), i.e. WhisperForAudioClassification: the 24-layer medium encoder,
# a 256-wide projector and a 2-way classifier; the 2-layer decoder is not part of it.
DISTIL_WHISPER_MEDIUM_EN = HFModelSpec(
    checkpoint="distil-whisper/distil-medium.en",
    config_class="WhisperConfig",
    model_class="WhisperForAudioClassification",
    config={
        "vocab_size": 51864,
        "num_mel_bins": 80,
        "d_model": 1024,
        "encoder_layers": 24,
        "decoder_layers": 2,
        "encoder_attention_heads": 16,
        "decoder_attention_heads": 16,
        "encoder_ffn_dim": 4096,
        "decoder_ffn_dim": 4096,
        "max_source_positions": 1500,
        "max_target_positions": 448,
        "activation_function": "gelu",
    },
    seq_len=(3000, 3000),  # mel frames (the encoder's fixed 30 s window)
    inputs=features_only,
    smoke_config={
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_source_positions": 16,  # 32 frames
        "max_target_positions": 16,
    },
)


@register_model(
    domain="speech", task="speech_recognition",
    source="Gandhi et al., Distil-Whisper, 2023; Hugging Face transformers (Apache-2.0); TorchBench hf_distil_whisper",
    batch_size=(8, 1), modes=("eval",), preload=HF_PRELOAD, tags=("hf",), param_count=307_479_298,
    hf_spec=DISTIL_WHISPER_MEDIUM_EN,
    notes="TorchBench times WhisperForAudioClassification (encoder + classifier) and implements no training",
    torchbench_precision=HUGGINGFACE_FACTORY,
)  # fmt: skip
def hf_distil_whisper(ctx: BuildContext, **kwargs: Any) -> Workload:
    """distil-medium.en encoder with an audio-classification head, on 3000 mel frames."""
    return create_hf_workload(ctx, DISTIL_WHISPER_MEDIUM_EN, **kwargs)
