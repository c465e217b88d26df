"""Segment Anything (ViT-H) as TorchBench times it: one image, one point prompt, three masks.

Paper: Kirillov et al., Segment Anything, 2023. Implementation: Hugging Face transformers
``SamModel`` (Apache-2.0), random-initialised from the facebook/sam-vit-huge config: a ViT-H/16
image encoder (32 layers of width 1280, 14x14 windowed attention with global attention at layers
7, 15, 23 and 31, relative positions), the prompt encoder and the two-way-transformer mask
decoder: 641,090,864 parameters (the original checkpoint has 641,090,608; transformers adds a
shared positional embedding).

TorchBench's ``sam`` eval runs ``SamPredictor``: ``set_image`` resizes a 1800x1200 photo so its
longest side is 1024, normalises and pads it to 1024x1024 and encodes it; ``predict`` with one
foreground point at (500, 375) and ``multimask_output=True`` decodes three low-resolution masks,
upsamples them to the original size and thresholds them. :class:`SegmentAnythingWorkload`
does the same steps on a seeded synthetic photo with the predictor's types and places: the photo
is a uint8 (H, W, 3) host array, resized on the host to uint8 (antialiased bilinear, as PIL's
resize) and then copied to the device; the point and its label are int64 host arrays made float
on the device. TorchBench declares an eval batch of 32 but its step
handles one image whatever the batch; we declare its 32 too, and ``samples_per_step`` says a
step processes one image, which throughput counts. No training (TorchBench has none).

``sam_fast`` is TorchBench's segment-anything-fast variant (``build_sam_fast_vit_h``): the same
network with bfloat16 weights, attention through ``scaled_dot_product_attention`` (the image
encoder's relative positions as its additive mask) and the image encoder compiled by
``torch.compile(mode="max-autotune")`` when the model is built, so a default (eager-backend) run
compiles it in warm-up as TorchBench's does. The predictor normalises the photo in float32 and
casts it to bfloat16. segment-anything-fast's own Triton kernel for the four global-attention
layers (``flash_4``) runs only with a Triton that still has block pointers; TorchBench switches it
off otherwise (Triton 3.9 and later), and then its layers take the SDPA path these do. CUDA only,
as TorchBench (CPU not implemented). ``--model-arg encoder_compile_mode=none`` leaves it eager.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

from ....backends import COMPILE_MODES, CompileProbe
from ....registry import register_model
from ....workload import BuildContext, UnsupportedError, Workload
from .factory import ATTN_IMPLEMENTATION, HF_PRELOAD, import_transformers

SAM_VIT_H = {
    "hidden_size": 1280,
    "num_hidden_layers": 32,
    "num_attention_heads": 16,
    "global_attn_indexes": [7, 15, 23, 31],
    "mlp_dim": 5120,
    "output_channels": 256,
    "image_size": 1024,
    "patch_size": 16,
}
# Smoke: the same modules at 64 px with two narrow encoder layers (one windowed, one global).
SAM_SMOKE = {**SAM_VIT_H, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
             "global_attn_indexes": [1], "mlp_dim": 64, "image_size": 64, "window_size": 2}  # fmt: skip
PHOTO_HW = (1200, 1800)  # TorchBench's truck.jpg
POINT_XY = (500, 375)  # TorchBench's prompt, in original pixel coordinates
PIXEL_MEAN = (123.675, 116.28, 103.53)
PIXEL_STD = (58.395, 57.12, 57.375)


class SegmentAnythingWorkload(Workload):
    """``set_image`` + ``predict(point, multimask_output=True)``: masks ``(1, 3, H, W)`` as booleans."""

    def __init__(
        self,
        ctx: BuildContext,
        module: torch.nn.Module,
        photo: torch.Tensor,
        point: torch.Tensor,
        label: torch.Tensor,
    ) -> None:
        super().__init__(ctx, module, (photo, point, label))
        self.side = module.config.vision_config.image_size
        self.dtype = next(module.parameters()).dtype

    def forward(self) -> Any:
        photo, point, label = self.inputs  # host: uint8 (H, W, 3), int64 (1, 2) as (x, y), int64 (1,)
        h, w = photo.shape[:2]
        scale = self.side / max(h, w)
        new_hw = (int(h * scale + 0.5), int(w * scale + 0.5))  # ResizeLongestSide
        # set_image: PIL resizes the uint8 photo on the host; torch.as_tensor copies it to the device
        resized = F.interpolate(photo.permute(2, 0, 1)[None].float(), size=new_hw, mode="bilinear", antialias=True)
        image = resized.round().clamp(0, 255).to(torch.uint8).to(self.device).float()
        # Sam.preprocess normalises with float32 buffers; set_torch_image then casts to the encoder's dtype
        mean = image.new_tensor(PIXEL_MEAN).view(1, 3, 1, 1)
        std = image.new_tensor(PIXEL_STD).view(1, 3, 1, 1)
        image = F.pad((image - mean) / std, (0, self.side - new_hw[1], 0, self.side - new_hw[0])).to(self.dtype)
        # predict: apply_coords scales the numpy point; both arrays become device tensors
        points = (point.to(self.device, self.dtype) * scale).view(1, 1, 1, 2)  # (batch, point batch, points, xy)
        labels = label.to(self.device).view(1, 1, 1)
        out = self.module(pixel_values=image, input_points=points, input_labels=labels, multimask_output=True)
        low_res = out.pred_masks[:, 0]  # (1, 3, 256, 256) at side / 4
        masks = F.interpolate(low_res, size=(self.side, self.side), mode="bilinear", align_corners=False)
        masks = masks[..., : new_hw[0], : new_hw[1]]
        masks = F.interpolate(masks, size=(h, w), mode="bilinear", align_corners=False)
        return masks > 0.0, out.iou_scores, low_res


# segment-anything-fast's build_sam_fast_vit_h: bfloat16, SDPA, the image encoder compiled in this mode.
FAST_DTYPE = torch.bfloat16
FAST_ATTENTION = "sdpa"
FAST_ENCODER_COMPILE_MODE = "max-autotune"


def _create_sam(
    ctx: BuildContext,
    dtype: torch.dtype = torch.float32,
    attention: str = ATTN_IMPLEMENTATION,
    encoder_compile: dict[str, Any] | None = None,
    **overrides: Any,
) -> Workload:
    """SAM and its predictor's step; ``encoder_compile``: ``torch.compile`` keyword arguments for the
    image encoder (compiled lazily, in the first step), or None to leave it eager."""
    transformers = import_transformers()
    vision = {**(SAM_SMOKE if ctx.smoke else SAM_VIT_H), **overrides}
    # The prompt encoder's dense grid must match the encoder's (image_size / patch_size per side).
    prompt = {"image_size": vision["image_size"], "patch_size": vision["patch_size"]}
    config = transformers.SamConfig(vision_config=vision, prompt_encoder_config=prompt, attn_implementation=attention)
    with torch.device(ctx.device):
        model = transformers.SamModel(config).to(dtype)
    probe = None
    if encoder_compile is not None:
        model.vision_encoder = torch.compile(model.vision_encoder, **encoder_compile)
        settings = ", ".join(f"{k}={v}" for k, v in encoder_compile.items())
        probe = CompileProbe(
            "inductor", notes=f"{ctx.name}: the model compiles its image encoder ({settings})", from_model=True
        )
    hw = ctx.pick(PHOTO_HW, (48, 72))
    # the predictor's inputs live on the host whatever the device (a seeded stand-in for the photo)
    host = torch.Generator(device="cpu").manual_seed(ctx.seed)
    photo = torch.randint(0, 256, (*hw, 3), generator=host, dtype=torch.uint8, device="cpu")
    point = torch.tensor([ctx.pick(POINT_XY, (20, 15))], dtype=torch.int64, device="cpu")
    label = torch.ones(1, dtype=torch.int64, device="cpu")
    workload = SegmentAnythingWorkload(ctx, model, photo, point, label)
    workload.compile_probe = probe  # a compiled encoder compiles in warm-up, whatever the backend
    return workload


_SOURCE = "Kirillov et al., Segment Anything, 2023; Hugging Face transformers SamModel (Apache-2.0)"
# TorchBench's DEFAULT_EVAL_BSIZE for sam and sam_fast: declared, while a step segments one image.
SAM_DECLARED_BATCH = 32


@register_model(
    domain="vision", task="segmentation", source=_SOURCE, batch_size=SAM_DECLARED_BATCH, modes=("eval",),
    samples_per_step=(None, 1), preload=HF_PRELOAD, tags=("hf",), param_count=641_090_864,
    notes="one 1800x1200 image and one point per step whatever the batch (TorchBench declares 32), "
    "as TorchBench's SamPredictor; no training",
)  # fmt: skip
def sam(ctx: BuildContext, **kwargs: Any) -> Workload:
    """SAM ViT-H: encode a 1024-px image, decode three masks for one point, upsample, threshold."""
    return _create_sam(ctx, **kwargs)


@register_model(
    domain="vision", task="segmentation", source=_SOURCE + "; segment-anything-fast (bfloat16)",
    batch_size=SAM_DECLARED_BATCH, samples_per_step=(None, 1), modes=("eval",), devices=("cuda",),
    preload=HF_PRELOAD, tags=("hf",), param_count=641_090_864,
    notes="segment-anything-fast: bfloat16, SDPA, image encoder compiled (max-autotune) when built, "
    "compiling in warm-up; CUDA only (TorchBench: CPU not implemented); "
    "--model-arg encoder_compile_mode=none keeps the encoder eager",
)  # fmt: skip
def sam_fast(
    ctx: BuildContext, encoder_compile_mode: str | None = FAST_ENCODER_COMPILE_MODE, **kwargs: Any
) -> Workload:
    """SAM ViT-H the segment-anything-fast way: bfloat16, SDPA, image encoder compiled (CUDA only)."""
    if encoder_compile_mode in (None, False, "none"):
        encoder_compile = None
    elif encoder_compile_mode in COMPILE_MODES:
        encoder_compile = {"mode": encoder_compile_mode}
    else:
        raise ValueError(f"encoder_compile_mode {encoder_compile_mode!r}; accepted: none, {', '.join(COMPILE_MODES)}")
    if ctx.device.type != "cuda":  # create() already refuses other devices; kept for direct calls
        raise UnsupportedError("sam_fast needs CUDA (segment-anything-fast's bfloat16 kernels)")
    return _create_sam(ctx, FAST_DTYPE, FAST_ATTENTION, encoder_compile, **kwargs)
