"""End-to-end variational network (E2E-VarNet) for accelerated multi-coil MRI reconstruction.

Sriram, Zbontar, Murrell, Defazio, Zitnick, Yakubova, Knoll and Johnson, "End-to-End
Variational Networks for Accelerated MRI Reconstruction", MICCAI 2020. Follows
facebookresearch/fastMRI (MIT): ``fastmri/models/varnet.py`` and ``unet.py``, the centred FFTs
of ``fastmri/fftc.py``, ``fastmri/math.py``/``coil_combine.py``, ``SSIMLoss`` of
``fastmri/losses.py`` and the training step of ``pl_modules/varnet_module.py``:

- complex tensors are real ``(..., 2)`` pairs; ``fft2c``/``ifft2c`` are orthonormal 2-D FFTs
  with the DC term in the centre (ifftshift, FFT over the last two complex dims, fftshift).
- sensitivity maps: the k-space outside the ACS (fully sampled centre) lines is zeroed, each
  coil image goes through a normalised U-Net (coils in the batch dim), and the maps are
  divided by their root-sum-of-squares over coils.
- 12 cascades ``k <- k - w M (k - k0) - F S U(S^H F^H k)``: soft data consistency with a
  learned weight ``w`` (init 1) on the sampled lines ``M``, and a U-Net regulariser on the
  coil-combined image, normalised by mean/std over each complex channel and padded to a
  multiple of 16.
- output: RSS of the coil images of the final k-space; loss ``1 - SSIM`` (7x7 uniform window,
  avg-pooled statistics via ``conv2d``) against the 320x320 centre crop of the target with the
  volume's maximum as data range; Adam lr 3e-4 (the reference's ``VarNetModule``).

Knee configuration of the reference (12 cascades, chans 18, sens_chans 8, 4 pools each), 15
coils, 640x368 k-space, 4x equispaced mask with 8% centre fraction (``equispaced_fraction``),
batch 1. Parameters from layer shapes: a U-Net (2 -> 2 channels, 4 pools; bias-free 3x3 convs
and 2x2 transposed convs, InstanceNorm without affine, a biased 1x1 output conv) holds 2,454,338
weights at chans 18 and 484,898 at chans 8: 12 x 2,454,338 + 12 dc weights + 484,898 = 29,936,966
(the paper's "about 30M").

Differences: synthetic k-space (a random smooth object times smooth Gaussian coil
sensitivities, Fourier transformed) instead of fastMRI knee data; ``torch.fft.fftshift``/
``ifftshift`` instead of fastMRI's equivalent ``torch.roll``-based helpers; the learning-rate
schedule (StepLR every 40 epochs) is outside the timed step. Written from the paper and the
reference's description; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = [
    "NormUnet",
    "SSIMLoss",
    "SensitivityModel",
    "Unet",
    "VarNet",
    "VarNetBlock",
    "VarNetConfig",
    "complex_abs",
    "complex_conj",
    "complex_mul",
    "equispaced_mask",
    "fft2c",
    "ifft2c",
    "rss",
    "rss_complex",
]


@dataclass(frozen=True)
class VarNetConfig:
    num_cascades: int = 12  # fastMRI knee VarNet
    chans: int = 18  # U-Net channels of each cascade's regulariser
    pools: int = 4
    sens_chans: int = 8  # U-Net channels of the sensitivity network
    sens_pools: int = 4
    coils: int = 15  # knee multi-coil
    kspace_shape: tuple[int, int] = (640, 368)  # (rows = readout, columns = phase encodes)
    crop: tuple[int, int] = (320, 320)  # target reconstruction size
    acceleration: int = 4
    center_fraction: float = 0.08


# -- complex helpers on real (..., 2) tensors ------------------------------------------------------
def fft2c(data: torch.Tensor) -> torch.Tensor:
    """Centred orthonormal 2-D FFT of ``(..., H, W, 2)``."""
    x = torch.fft.ifftshift(torch.view_as_complex(data), dim=(-2, -1))
    x = torch.fft.fftn(x, dim=(-2, -1), norm="ortho")
    return torch.view_as_real(torch.fft.fftshift(x, dim=(-2, -1)))


def ifft2c(data: torch.Tensor) -> torch.Tensor:
    """Centred orthonormal 2-D inverse FFT of ``(..., H, W, 2)``."""
    x = torch.fft.ifftshift(torch.view_as_complex(data), dim=(-2, -1))
    x = torch.fft.ifftn(x, dim=(-2, -1), norm="ortho")
    return torch.view_as_real(torch.fft.fftshift(x, dim=(-2, -1)))


def complex_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    re = x[..., 0] * y[..., 0] - x[..., 1] * y[..., 1]
    im = x[..., 0] * y[..., 1] + x[..., 1] * y[..., 0]
    return torch.stack((re, im), dim=-1)


def complex_conj(x: torch.Tensor) -> torch.Tensor:
    return torch.stack((x[..., 0], -x[..., 1]), dim=-1)


def complex_abs(x: torch.Tensor) -> torch.Tensor:
    return (x**2).sum(dim=-1).sqrt()


def rss(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Root-sum-of-squares of a real tensor along ``dim``."""
    return torch.sqrt((x**2).sum(dim))


def rss_complex(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Root-sum-of-squares of a complex ``(..., 2)`` tensor along ``dim``."""
    return torch.sqrt((x**2).sum(dim=-1).sum(dim))


# -- U-Net (fastmri/models/unet.py) ------------------------------------------------------------------
class ConvBlock(nn.Sequential):
    """(conv3x3 -> InstanceNorm -> LeakyReLU(0.2) -> Dropout2d) x 2."""

    def __init__(self, in_ch: int, out_ch: int, drop_prob: float = 0.0) -> None:
        super().__init__(
            nn.Conv2d(in_ch, out_ch, 3, padding=1, bias=False), nn.InstanceNorm2d(out_ch),
            nn.LeakyReLU(0.2, inplace=True), nn.Dropout2d(drop_prob),
            nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False), nn.InstanceNorm2d(out_ch),
            nn.LeakyReLU(0.2, inplace=True), nn.Dropout2d(drop_prob),
        )  # fmt: skip


class TransposeConvBlock(nn.Sequential):
    """2x upsampling: ConvTranspose2d(2, stride 2) -> InstanceNorm -> LeakyReLU(0.2)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__(
            nn.ConvTranspose2d(in_ch, out_ch, 2, stride=2, bias=False),
            nn.InstanceNorm2d(out_ch),
            nn.LeakyReLU(0.2, inplace=True),
        )


class Unet(nn.Module):
    """``(B, in, H, W) -> (B, out, H, W)``; average-pool downsampling, transposed-conv upsampling."""

    def __init__(self, in_ch: int, out_ch: int, chans: int, pools: int, drop_prob: float = 0.0) -> None:
        super().__init__()
        self.down = nn.ModuleList([ConvBlock(in_ch, chans, drop_prob)])
        ch = chans
        for _ in range(pools - 1):
            self.down.append(ConvBlock(ch, ch * 2, drop_prob))
            ch *= 2
        self.bottom = ConvBlock(ch, ch * 2, drop_prob)
        self.up_transpose = nn.ModuleList()
        self.up = nn.ModuleList()
        for i in range(pools):
            self.up_transpose.append(TransposeConvBlock(ch * 2, ch))
            block = ConvBlock(ch * 2, ch, drop_prob)
            self.up.append(block if i < pools - 1 else nn.Sequential(block, nn.Conv2d(ch, out_ch, 1)))
            ch //= 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stack = []
        for layer in self.down:
            x = layer(x)
            stack.append(x)
            x = F.avg_pool2d(x, kernel_size=2, stride=2, padding=0)
        x = self.bottom(x)
        for transpose, conv in zip(self.up_transpose, self.up):
            skip = stack.pop()
            x = transpose(x)
            # odd sizes: reflect-pad one pixel on the right / bottom to match the skip
            padding = [0, int(x.shape[-1] != skip.shape[-1]), 0, int(x.shape[-2] != skip.shape[-2])]
            if sum(padding):
                x = F.pad(x, padding, "reflect")
            x = conv(torch.cat([x, skip], dim=1))
        return x


class NormUnet(nn.Module):
    """U-Net on complex images ``(B, C, H, W, 2)``: channels real/imag, normalised and padded."""

    def __init__(self, chans: int, pools: int, in_ch: int = 2, out_ch: int = 2) -> None:
        super().__init__()
        self.unet = Unet(in_ch, out_ch, chans, pools)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w, _ = x.shape
        x = x.permute(0, 4, 1, 2, 3).reshape(b, 2 * c, h, w)  # complex to channels: (B, 2C, H, W)
        # normalise with the mean and std of all real, and of all imaginary, values
        flat = x.reshape(b, 2, c * h * w)
        mean = flat.mean(dim=2).view(b, 2, 1, 1)
        std = flat.std(dim=2).view(b, 2, 1, 1)
        x = ((x.view(b, 2, c, h, w) - mean.unsqueeze(2)) / std.unsqueeze(2)).view(b, 2 * c, h, w)
        # pad H and W up to multiples of 16, centred
        h_mult, w_mult = ((h - 1) | 15) + 1, ((w - 1) | 15) + 1
        w_pad = [math.floor((w_mult - w) / 2), math.ceil((w_mult - w) / 2)]
        h_pad = [math.floor((h_mult - h) / 2), math.ceil((h_mult - h) / 2)]
        x = self.unet(F.pad(x, w_pad + h_pad))
        x = x[..., h_pad[0] : h_mult - h_pad[1], w_pad[0] : w_mult - w_pad[1]]
        x = x.reshape(b, 2, c, h, w) * std.unsqueeze(2) + mean.unsqueeze(2)
        return x.permute(0, 2, 3, 4, 1).contiguous()  # (B, C, H, W, 2)


class SensitivityModel(nn.Module):
    """Masked k-space ``(B, C, H, W, 2)`` -> coil sensitivity maps, unit RSS over coils."""

    def __init__(self, chans: int, pools: int) -> None:
        super().__init__()
        self.norm_unet = NormUnet(chans, pools)

    def forward(self, masked_kspace: torch.Tensor, num_low_frequencies: int) -> torch.Tensor:
        b, c, h, w, _ = masked_kspace.shape
        pad = (w - num_low_frequencies + 1) // 2
        acs = torch.zeros_like(masked_kspace)  # keep only the ACS columns [pad, pad + num_low)
        acs[:, :, :, pad : pad + num_low_frequencies] = masked_kspace[:, :, :, pad : pad + num_low_frequencies]
        images = ifft2c(acs).view(b * c, 1, h, w, 2)  # each coil on its own
        maps = self.norm_unet(images).view(b, c, h, w, 2)
        return maps / rss_complex(maps, dim=1).unsqueeze(-1).unsqueeze(1)


class VarNetBlock(nn.Module):
    """One cascade: ``k - w M (k - k0) - F S U(S^H F^H k)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.dc_weight = nn.Parameter(torch.ones(1))

    def forward(
        self, kspace: torch.Tensor, ref_kspace: torch.Tensor, mask: torch.Tensor, sens_maps: torch.Tensor
    ) -> torch.Tensor:
        zero = torch.zeros(1, 1, 1, 1, 1).to(kspace)
        soft_dc = torch.where(mask, kspace - ref_kspace, zero) * self.dc_weight
        image = complex_mul(ifft2c(kspace), complex_conj(sens_maps)).sum(dim=1, keepdim=True)  # (B, 1, H, W, 2)
        model_term = fft2c(complex_mul(self.model(image), sens_maps))  # (B, C, H, W, 2)
        return kspace - soft_dc - model_term


class VarNet(nn.Module):
    """``(masked k-space (B, C, H, W, 2), mask (B, 1, 1, W, 1) bool)`` -> RSS image ``(B, H, W)``."""

    def __init__(self, cfg: VarNetConfig) -> None:
        super().__init__()
        self.sens_net = SensitivityModel(cfg.sens_chans, cfg.sens_pools)
        self.cascades = nn.ModuleList(VarNetBlock(NormUnet(cfg.chans, cfg.pools)) for _ in range(cfg.num_cascades))

    def forward(self, masked_kspace: torch.Tensor, mask: torch.Tensor, num_low_frequencies: int) -> torch.Tensor:
        sens_maps = self.sens_net(masked_kspace, num_low_frequencies)
        kspace = masked_kspace.clone()
        for cascade in self.cascades:
            kspace = cascade(kspace, masked_kspace, mask, sens_maps)
        return rss(complex_abs(ifft2c(kspace)), dim=1)


class SSIMLoss(nn.Module):
    """``1 - mean SSIM`` with a uniform ``win x win`` window and unbiased local (co)variances."""

    def __init__(self, win_size: int = 7, k1: float = 0.01, k2: float = 0.03) -> None:
        super().__init__()
        self.k1, self.k2 = k1, k2
        self.register_buffer("w", torch.ones(1, 1, win_size, win_size) / win_size**2)
        n = win_size**2
        self.cov_norm = n / (n - 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor, data_range: torch.Tensor) -> torch.Tensor:
        data_range = data_range[:, None, None, None]  # (B, 1, 1, 1)
        c1, c2 = (self.k1 * data_range) ** 2, (self.k2 * data_range) ** 2
        ux, uy = F.conv2d(x, self.w), F.conv2d(y, self.w)  # local means
        uxx, uyy, uxy = F.conv2d(x * x, self.w), F.conv2d(y * y, self.w), F.conv2d(x * y, self.w)
        vx = self.cov_norm * (uxx - ux * ux)
        vy = self.cov_norm * (uyy - uy * uy)
        vxy = self.cov_norm * (uxy - ux * uy)
        s = (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux**2 + uy**2 + c1) * (vx + vy + c2))
        return 1 - s.mean()


class VarNetModule(nn.Module):
    """The network and its loss, as fastMRI's Lightning ``VarNetModule``."""

    def __init__(self, cfg: VarNetConfig) -> None:
        super().__init__()
        self.varnet = VarNet(cfg)
        self.loss = SSIMLoss()

    def forward(self, masked_kspace: torch.Tensor, mask: torch.Tensor, num_low_frequencies: int) -> torch.Tensor:
        return self.varnet(masked_kspace, mask, num_low_frequencies)


def center_crop(x: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    h0, w0 = (x.shape[-2] - shape[0]) // 2, (x.shape[-1] - shape[1]) // 2
    return x[..., h0 : h0 + shape[0], w0 : w0 + shape[1]]


def equispaced_mask(
    ctx: BuildContext, columns: int, acceleration: int, center_fraction: float
) -> tuple[torch.Tensor, int]:
    """fastMRI's ``EquispacedMaskFractionFunc``: ACS block plus equispaced lines, ``columns / acc`` in all."""
    num_low = round(columns * center_fraction)
    mask = torch.zeros(columns, dtype=torch.bool)
    pad = (columns - num_low + 1) // 2
    mask[pad : pad + num_low] = True
    # spacing chosen so that ACS + outer lines sample columns / acceleration in total
    spacing = acceleration * (num_low - columns) / (num_low * acceleration - columns)
    offset = int(ctx.randint(0, round(spacing), (1,)).item())
    mask[torch.arange(offset, columns - 1, spacing).round().long()] = True
    return mask.view(1, 1, 1, columns, 1).to(ctx.device), num_low


def synthetic_kspace(ctx: BuildContext, cfg: VarNetConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Fully sampled k-space ``(B, C, H, W, 2)`` and its RSS target ``(B, crop)``."""
    b, c, (h, w) = ctx.batch_size, cfg.coils, cfg.kspace_shape
    # smooth complex object: low-resolution noise upsampled, inside an ellipse
    obj = F.interpolate(ctx.randn(b, 2, h // 16, w // 16), size=(h, w), mode="bilinear", align_corners=False)
    yy = torch.linspace(-1, 1, h, device=ctx.device).view(h, 1)
    xx = torch.linspace(-1, 1, w, device=ctx.device).view(1, w)
    obj = obj * ((yy / 0.8) ** 2 + (xx / 0.8) ** 2 < 1)  # (B, 2, H, W)
    # coil sensitivities: Gaussian bumps centred on a ring, with a linear phase
    angle = torch.arange(c, device=ctx.device).view(c, 1, 1) * (2 * math.pi / c)
    dist2 = (yy - torch.sin(angle)) ** 2 + (xx - torch.cos(angle)) ** 2  # (C, H, W)
    mag, phase = torch.exp(-dist2), angle + math.pi * (xx + yy)
    sens = torch.stack((mag * torch.cos(phase), mag * torch.sin(phase)), dim=-1)  # (C, H, W, 2)
    coil_images = complex_mul(obj.permute(0, 2, 3, 1).unsqueeze(1), sens)  # (B, C, H, W, 2)
    target = center_crop(rss_complex(coil_images, dim=1), cfg.crop)
    return fft2c(coil_images), target


class VarNetWorkload(Workload):
    """Inputs ``(masked_kspace, mask, num_low_frequencies)``; targets ``(target, max_value)``."""

    def compute_loss(self, output: torch.Tensor) -> torch.Tensor:
        target, max_value = self.targets
        output = center_crop(output, target.shape[-2:])
        return self.module.loss(output.unsqueeze(1), target.unsqueeze(1), data_range=max_value)


def _create_varnet(ctx: BuildContext, **kwargs) -> Workload:
    smoke = (
        dict(
            num_cascades=2, chans=4, pools=2, sens_chans=2, sens_pools=2, coils=3, kspace_shape=(32, 24), crop=(16, 16)
        )
        if ctx.smoke
        else {}
    )
    cfg = replace(VarNetConfig(), **{**smoke, **kwargs})
    kspace, target = synthetic_kspace(ctx, cfg)
    mask, num_low = equispaced_mask(ctx, cfg.kspace_shape[1], cfg.acceleration, cfg.center_fraction)
    masked_kspace = kspace * mask + 0.0  # fastMRI's apply_mask
    max_value = target.flatten(1).amax(dim=1)  # (B,), the volume maximum in the dataset's attrs
    model = VarNetModule(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4, weight_decay=0.0) if ctx.train else None
    return VarNetWorkload(ctx, model, (masked_kspace, mask, num_low), (target, max_value), optimizer=opt)


_SOURCE = (
    "Sriram et al., End-to-End Variational Networks for Accelerated MRI Reconstruction, MICCAI 2020; "
    "facebookresearch/fastMRI fastmri/models/varnet.py"
)


@register_model(
    domain="vision",
    task="mri_reconstruction",
    source=_SOURCE,
    batch_size=1,
    tags=("fft", "complex"),
    param_count=29_936_966,  # from layer shapes of the fastMRI knee config (see module docstring)
    unsupported_precisions=("bf16", "fp16"),
    notes="Synthetic multi-coil k-space (smooth object x Gaussian coil maps), 4x equispaced mask. "
    "bf16: no bfloat16 complex dtype (view_as_complex fails). fp16: no half FFT on CPU, and "
    "cuFFT half needs power-of-two sizes (640x368). amp runs (the FFTs stay fp32).",
)
def e2e_varnet(ctx: BuildContext, **kwargs) -> Workload:
    """E2E-VarNet, fastMRI knee config: 12 cascades, chans 18, 15 coils, 640x368 k-space, SSIM loss."""
    return _create_varnet(ctx, **kwargs)
