"""Stable Diffusion 2's denoising UNet, as TorchBench's ``stable_diffusion_unet`` times it.

Paper: Rombach et al., High-Resolution Image Synthesis with Latent Diffusion Models, 2022
(Stable Diffusion 2: Stability AI, 2022). Implementation: Hugging Face diffusers
``UNet2DConditionModel`` (Apache-2.0), random-initialised from stabilityai/stable-diffusion-2's
``unet/config.json``: four resolution levels of 320/640/1280/1280 channels, two ResNet blocks per
level, linear-projection transformer blocks cross-attending to 1024-wide text states, head
widths 5/10/20/20: 865,910,724 parameters.

TorchBench's ``get_module()`` times one UNet call on a (1, 4, 128, 128) latent (a 1024-px image),
timestep 1.0 and a single 1024-wide text state. Eval only at batch 1, as TorchBench (which
implements no training and marks CPU not implemented; here the 3.5 GB model runs on a CPU too).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, UnsupportedError, Workload

SD2_UNET = {
    "act_fn": "silu",
    "attention_head_dim": [5, 10, 20, 20],
    "block_out_channels": [320, 640, 1280, 1280],
    "center_input_sample": False,
    "cross_attention_dim": 1024,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "downsample_padding": 1,
    "dual_cross_attention": False,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 4,
    "layers_per_block": 2,
    "mid_block_scale_factor": 1,
    "norm_eps": 1e-5,
    "norm_num_groups": 32,
    "out_channels": 4,
    "sample_size": 96,
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "use_linear_projection": True,
}
# Smoke: two levels (one with cross-attention) of 32/64 channels, one block each, 16x16 latents.
SD2_UNET_SMOKE = {
    **SD2_UNET,
    "attention_head_dim": [2, 4],
    "block_out_channels": [32, 64],
    "cross_attention_dim": 32,
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
    "layers_per_block": 1,
    "norm_num_groups": 8,
    "sample_size": 16,
}
DIFFUSERS_MISSING = "diffusers not installed (pip install torchgauge[hf])"


class UNetWorkload(Workload):
    """``unet(sample, timestep, encoder_hidden_states).sample``: the predicted noise ``(B, 4, H, W)``."""

    def forward(self) -> Any:
        return self.module(*self.inputs).sample


# No torchbench_precision: TorchBench's stable_diffusion_unet/__init__.py:23 declares fp16 for CUDA eval, but its
# enable_fp16 is a no-op (:40-43) and the pipeline loads without torch_dtype (:34-36), so
# run.py's default run computes in fp32 (docs/torchbench-fidelity.md).
@register_model(
    domain="vision", task="generation",
    source="Rombach et al., Latent Diffusion (Stable Diffusion 2), 2022; Hugging Face diffusers (Apache-2.0)",
    batch_size=1, modes=("eval",), preload=("diffusers.models",), tags=("hf",), param_count=865_910_724,
    notes="one UNet call on a 128x128 latent, as TorchBench's get_module(); needs diffusers; no training",
)  # fmt: skip
def stable_diffusion_unet(ctx: BuildContext, **overrides: Any) -> Workload:
    """SD2 UNet2DConditionModel on a (B, 4, 128, 128) latent, timestep 1, one 1024-wide text state."""
    try:
        diffusers = importlib.import_module("diffusers")
    except ImportError as exc:
        raise UnsupportedError(DIFFUSERS_MISSING) from exc
    config = {**(SD2_UNET_SMOKE if ctx.smoke else SD2_UNET), **overrides}
    with torch.device(ctx.device):
        unet = diffusers.UNet2DConditionModel(**config)
    side = ctx.pick(128, 16)
    sample = ctx.randn(ctx.batch_size, config["in_channels"], side, side)
    timestep = torch.tensor([1.0], device=ctx.device)
    text_states = ctx.randn(ctx.batch_size, 1, config["cross_attention_dim"])
    return UNetWorkload(ctx, unet, (sample, timestep, text_states))
