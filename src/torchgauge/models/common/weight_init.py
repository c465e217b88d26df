"""Weight initialisation shared by models of different domains.

``transformer_init_weights`` is timm's ``_init_weights`` for vision transformers (Apache-2.0),
used by Swin (``vision.swin``) and FourCastNet's AFNO (``other.scientific.afno``), whose
reference code inherits it from timm.
"""

from __future__ import annotations

from torch import nn

__all__ = ["transformer_init_weights"]


def transformer_init_weights(m: nn.Module) -> None:
    """The reference's (timm's) ``_init_weights``: Linear weights trunc-normal(0.02), zero biases, unit LayerNorms."""
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
