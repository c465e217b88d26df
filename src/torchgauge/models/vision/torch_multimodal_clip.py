"""TorchBench's ``torch_multimodal_clip``: TorchMultimodal's CLIP ViT-B/32 and its contrastive loss.

Paper: Radford et al., Learning Transferable Visual Models From Natural Language Supervision,
2021. Reference: TorchMultimodal (facebookresearch/multimodal, BSD) ``clip_vit_b32()``,
``CLIPViTEncoder``, ``CLIPTextEncoder`` and ``ContrastiveLossWithTemperature``, as TorchBench's
``torchbenchmark/models/torch_multimodal_clip/__init__.py`` (commit 0e83c440) uses them. An
independent re-implementation on ``torch.nn`` layers, as TorchMultimodal builds them:

* image tower: 32x32 patch convolution (no bias), class token, learned positions, ``ln_pre``,
  12 pre-norm ``nn.TransformerEncoderLayer``s (768 wide, 12 heads, 3072 MLP, quick-GELU, batch
  first), ``ln_post`` on the class token, a (768, 512) projection;
* text tower: token and learned position embeddings over a 77-token context, 12 pre-norm layers
  (512 wide, 8 heads, 2048 MLP, TorchMultimodal's "SiLU" ``x * sigmoid(1.702 x)``, sequence
  first), causal attention, ``ln_final``, the features at each caption's highest token id (its
  end token), a (512, 512) projection without bias; every LayerNorm computes in float32;
* ``CLIP.forward`` returns both embeddings L2-normalised;
* the loss: a learnable log-temperature (initialised to log(1 / 0.07), clamped in place to
  [0, 4.6052] on every call), logits ``image @ text.T * exp(t)`` and its transpose, the mean
  of the two cross-entropies against the diagonal.

151,277,312 parameters in the model and 1 in the loss. TorchBench's step: training runs the
model on 32 images and the 32 captions, the loss, backward and AdamW(lr 5e-4, weight decay 1e-4,
eps 1e-6) over the model's and the loss's parameters, then reads the loss back (``loss.item()``);
eval runs the model, scores ``image @ text.T`` and reads back the argmax of each row, one
``.item()`` per image. Inputs: TorchBench decodes one photo (pizza.jpg) through
``CLIPImageTransform`` (224x224, normalised) and tokenises ``["pizza", "dog"] * 16`` through
``CLIPTextTransform`` (start token, the word, end token, zero padding to 77); here the images are
seeded noise and each caption is start, one random word id, end, zeros.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["CLIP", "CLIPTextEncoder", "CLIPViTEncoder", "ContrastiveLossWithTemperature"]

START_TOKEN, END_TOKEN = 49406, 49407  # CLIP's BPE <|startoftext|>, <|endoftext|>


class Fp32LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 and cast back to the input's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps)
        return out.type_as(x)


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(1.702 x)``: CLIP's GELU approximation (TorchMultimodal names its module form SiLU)."""
    return x * torch.sigmoid(1.702 * x)


def _encoder(width: int, heads: int, layers: int, *, batch_first: bool) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(
        d_model=width,
        nhead=heads,
        dim_feedforward=4 * width,
        dropout=0.0,
        activation=quick_gelu,
        norm_first=True,
        batch_first=batch_first,
    )
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)


class CLIPViTEncoder(nn.Module):
    """``(B, 3, S, S)`` images -> ``(B, embedding_dim)``: ViT over ``patch x patch`` patches, class token out."""

    def __init__(self, *, embedding_dim: int, patch_size: int, image_size: int, width: int, heads: int, layers: int):
        super().__init__()
        self.conv = nn.Conv2d(3, width, kernel_size=patch_size, stride=patch_size, bias=False)
        scale = width**-0.5
        self.cls_token_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(scale * torch.randn((image_size // patch_size) ** 2 + 1, width))
        self.ln_pre = Fp32LayerNorm(width)
        self.encoder = _encoder(width, heads, layers, batch_first=True)
        self.ln_post = Fp32LayerNorm(width)
        self.projection = nn.Parameter(scale * torch.randn(width, embedding_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x).flatten(start_dim=2).permute(0, 2, 1)  # (B, patches, width)
        x = torch.cat([self.cls_token_embedding.expand(x.shape[0], 1, -1), x], dim=1)
        x = self.ln_pre(x + self.positional_embedding)
        x = self.encoder(x)
        return self.ln_post(x[:, 0, :]) @ self.projection


class CLIPTextEncoder(nn.Module):
    """``(B, context_length)`` token ids -> ``(B, embedding_dim)``: causal transformer, end-token features out."""

    def __init__(
        self, *, embedding_dim: int, context_length: int, vocab_size: int, width: int, heads: int, layers: int
    ):
        super().__init__()
        self.context_length = context_length
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.positional_embedding = nn.Parameter(torch.empty(context_length, width))
        self.encoder = _encoder(width, heads, layers, batch_first=False)
        self.ln_final = Fp32LayerNorm(width)
        self.projection = nn.Linear(width, embedding_dim, bias=False)
        causal = torch.full((context_length, context_length), float("-inf")).triu(1)
        self.register_buffer("mask", causal, persistent=False)
        # CLIP's initialisation
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.positional_embedding, std=0.01)
        proj_std, attn_std, fc_std = (width**-0.5) * ((2 * layers) ** -0.5), width**-0.5, (2 * width) ** -0.5
        for layer in self.encoder.layers:
            nn.init.normal_(layer.self_attn.in_proj_weight, std=attn_std)
            nn.init.normal_(layer.self_attn.out_proj.weight, std=proj_std)
            nn.init.normal_(layer.linear1.weight, std=fc_std)
            nn.init.normal_(layer.linear2.weight, std=proj_std)
        nn.init.normal_(self.projection.weight, std=width**-0.5)

    def forward(self, text: torch.Tensor) -> torch.Tensor:
        if text.size(1) != self.context_length:
            raise ValueError(f"captions must be {self.context_length} tokens long; got {text.size(1)}")
        x = (self.token_embedding(text) + self.positional_embedding).permute(1, 0, 2)  # (T, B, width)
        x = self.encoder(x, mask=self.mask, is_causal=True).permute(1, 0, 2)  # (B, T, width)
        x = self.ln_final(x)
        return self.projection(x[torch.arange(x.shape[0], device=x.device), text.argmax(dim=-1)])


class CLIP(nn.Module):
    """``(images, captions)`` -> L2-normalised ``(image_embeddings, text_embeddings)``."""

    def __init__(self, image_encoder: nn.Module, text_encoder: nn.Module) -> None:
        super().__init__()
        self.encoder_a, self.encoder_b = image_encoder, text_encoder

    def forward(self, images: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.normalize(self.encoder_a(images)), F.normalize(self.encoder_b(text))


class ContrastiveLossWithTemperature(nn.Module):
    """Symmetric cross-entropy over ``query @ retrieval.T * exp(logit_scale)``, the temperature learned."""

    LOGIT_SCALE_MAX = 4.6052  # ln(100), as in the CLIP paper

    def __init__(self, logit_scale: float = math.log(1 / 0.07)) -> None:
        super().__init__()
        self.logit_scale = nn.Parameter(logit_scale * torch.ones([]))

    def forward(self, query: torch.Tensor, retrieval: torch.Tensor) -> torch.Tensor:
        self.logit_scale.data.clamp_(0, self.LOGIT_SCALE_MAX)
        temperature = torch.exp(self.logit_scale)
        labels = torch.arange(query.size(0), device=query.device)
        loss_query = F.cross_entropy(query @ retrieval.transpose(0, 1) * temperature, labels)
        loss_retrieval = F.cross_entropy(retrieval @ query.transpose(0, 1) * temperature, labels)
        return (loss_query + loss_retrieval) / 2


class CLIPTraining(nn.Module):
    """The model and its loss in one container: TorchBench's optimizer covers both."""

    def __init__(self, model: CLIP, loss: ContrastiveLossWithTemperature) -> None:
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, images: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(images, text)


class CLIPWorkload(Workload):
    """Train: contrastive loss, AdamW, the loss read back. Eval: scores and one argmax read back per image."""

    eval_grad_mode = "no_grad"  # TorchBench's eval runs under torch.no_grad()

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.module.loss(*outputs)

    def train_step(self) -> torch.Tensor:
        loss = super().train_step()
        loss.item()  # TorchBench: total_loss += loss.item()
        return loss

    def eval_step(self) -> dict[str, Any]:
        """``{"scores": (B, B) image-caption similarities, "best": each image's best caption index}``."""
        image, text = super().eval_step()
        scores = image @ text.t()
        indices = torch.argmax(scores, dim=1)
        best = [indices[i].item() for i in range(image.size(0))]  # TorchBench maps each to its caption
        return {"scores": scores, "best": best}


_VIT_B32 = dict(embedding_dim=512, image_size=224, patch_size=32, width=768, heads=12, layers=12)
_TEXT = dict(embedding_dim=512, context_length=77, vocab_size=49408, width=512, heads=8, layers=12)
# Smoke: both towers at toy width, 2x2 patches of 32, a 16-token context.
_VIT_SMOKE = dict(embedding_dim=16, image_size=64, patch_size=32, width=32, heads=2, layers=2)
_TEXT_SMOKE = dict(embedding_dim=16, context_length=16, vocab_size=49408, width=32, heads=2, layers=2)


def one_word_captions(ctx: BuildContext, context_length: int, vocab_size: int) -> torch.Tensor:
    """``(B, context_length)``: start token, one word id, end token, zero padding."""
    ids = torch.zeros(ctx.batch_size, context_length, dtype=torch.long, device=ctx.device)
    ids[:, 0], ids[:, 2] = START_TOKEN, END_TOKEN
    ids[:, 1] = ctx.randint(0, min(START_TOKEN, vocab_size), (ctx.batch_size,))
    return ids


@register_model(
    domain="vision", task="contrastive_image_text", batch_size=(32, 32), param_count=151_277_313,
    source="Radford et al., CLIP, 2021; TorchMultimodal clip_vit_b32 and ContrastiveLossWithTemperature (BSD)",
    notes="TorchMultimodal's ViT-B/32 CLIP with its contrastive loss with learnable temperature; one-word "
    "77-token captions; eval scores the embeddings and reads back each image's best caption",
)  # fmt: skip
def torch_multimodal_clip(ctx: BuildContext, **overrides: Any) -> Workload:
    """CLIP ViT-B/32 on 224x224 images and one-word captions; AdamW (5e-4, wd 1e-4, eps 1e-6)."""
    vit, text = (_VIT_SMOKE, _TEXT_SMOKE) if ctx.smoke else (_VIT_B32, _TEXT)
    with torch.device(ctx.device):
        module = CLIPTraining(CLIP(CLIPViTEncoder(**vit), CLIPTextEncoder(**text)), ContrastiveLossWithTemperature())
    images = ctx.randn(ctx.batch_size, 3, vit["image_size"], vit["image_size"])
    captions = one_word_captions(ctx, text["context_length"], text["vocab_size"])
    optimizer = (
        torch.optim.AdamW(module.parameters(), lr=5.0e-4, weight_decay=1.0e-4, eps=1.0e-6) if ctx.train else None
    )
    return CLIPWorkload(ctx, module, (images, captions), optimizer=optimizer)
