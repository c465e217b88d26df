"""Image generation, image-to-image, video interpolation and volumetric models, one file per family."""

from . import (  # noqa: F401  (registers models)
    background_matting,
    cyclegan,
    dcgan,
    diffusion_unet,
    glow,
    stargan,
    super_slomo,
    unet,
    unet3d,
)
