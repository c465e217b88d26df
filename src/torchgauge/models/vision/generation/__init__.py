"""Image generation, image-to-image, video interpolation and volumetric models, one file per family."""

from . import (  # noqa: F401  (registers models)
    background_matting,
    cyclegan,
    dalle_dvae,
    dcgan,
    diffusion_unet,
    glow,
    neural_style,
    sagan,
    stable_diffusion_unet,
    stargan,
    super_slomo,
    unet,
    unet3d,
    vq_vae,
)
