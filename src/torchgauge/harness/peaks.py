"""Dense peak TFLOP/s of common accelerators, per precision: data, looked up by device name.

Figures are the vendors' datasheet peaks **without** structured sparsity (datasheets print
the 2:4-sparse figure with an asterisk; those are halved here). ``None`` means the device
has no such path (V100 and T4 have no TF32 or BF16 tensor cores). Sources:

- V100: NVIDIA Tesla V100 datasheet (2020): SXM2 15.7 FP32 / 125 tensor FP16; PCIe 14 / 112;
  V100S PCIe 16.4 / 130.
- A100 (SXM4 and PCIe, 40/80 GB): NVIDIA A100 datasheet; the TorchBench paper's Table 3:
  19.5 FP32, 156 TF32, 312 FP16/BF16.
- MI210: AMD Instinct MI210 datasheet; the paper's Table 3: 22.6 FP32 vector, 45.3 FP32
  matrix, 181 FP16/BF16. FLOP counting covers matmuls and convolutions, which rocBLAS and
  MIOpen run on the matrix cores, so the FP32 entry is the matrix peak.
- H100 SXM5 / PCIe / NVL: NVIDIA H100 datasheet: 67 / 51 / 60 FP32; 494.7 / 378 / 417.5
  TF32; 989.4 / 756 / 835 FP16/BF16.
- H200 SXM / NVL: NVIDIA H200 datasheet: 67 / 60 FP32; 494.7 / 417.5 TF32; 989.4 / 835.5
  FP16/BF16.
- L4: NVIDIA L4 datasheet: 30.3 FP32, 60 TF32, 121 FP16/BF16.
- A10: NVIDIA A10 datasheet: 31.2 FP32, 62.5 TF32, 125 FP16/BF16.
- T4: NVIDIA T4 datasheet: 8.1 FP32, 65 FP16 (mixed precision).
- RTX 4090: NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): 82.6 FP32,
  82.6 TF32, 165.2 FP16/BF16 with FP32 accumulation (what PyTorch uses).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PEAKS", "PRECISION_PEAK_COLUMN", "DevicePeak", "find_device_peak", "peak_tflops"]


@dataclass(frozen=True)
class DevicePeak:
    """One device's dense peaks in TFLOP/s (None: no hardware path for that format)."""

    name: str  # canonical name, e.g. "A100"
    pattern: str  # regex searched (case-insensitive) in the device name
    fp32: float | None  # plain FP32 (TF32 off); matrix-core FP32 where the GPU has it
    tf32: float | None
    fp16: float | None
    bf16: float | None


# Most specific first: the first pattern found in the device name wins ("H100 PCIe" before
# "H100"); word boundaries keep "A10" from matching "A100" and "L4" from matching "L40S".
PEAKS: tuple[DevicePeak, ...] = (
    DevicePeak("V100S PCIe", r"\bV100S\b", 16.4, None, 130.0, None),
    DevicePeak("V100 PCIe", r"\bV100\b.*\bPCIE\b", 14.0, None, 112.0, None),
    DevicePeak("V100 SXM2", r"\bV100\b", 15.7, None, 125.0, None),
    DevicePeak("A100", r"\bA100\b", 19.5, 156.0, 312.0, 312.0),
    DevicePeak("MI210", r"\bMI210\b", 45.3, None, 181.0, 181.0),
    DevicePeak("H100 PCIe", r"\bH100\b.*\bPCIE\b", 51.0, 378.0, 756.0, 756.0),
    DevicePeak("H100 NVL", r"\bH100\b.*\bNVL\b", 60.0, 417.5, 835.0, 835.0),
    DevicePeak("H100 SXM", r"\bH100\b", 67.0, 494.7, 989.4, 989.4),
    DevicePeak("H200 NVL", r"\bH200\b.*\bNVL\b", 60.0, 417.5, 835.5, 835.5),
    DevicePeak("H200 SXM", r"\bH200\b", 67.0, 494.7, 989.4, 989.4),
    DevicePeak("L4", r"\bL4\b", 30.3, 60.0, 121.0, 121.0),
    DevicePeak("A10", r"\bA10\b", 31.2, 62.5, 125.0, 125.0),
    DevicePeak("T4", r"\bT4\b", 8.1, None, 65.0, None),
    DevicePeak("RTX 4090", r"\bRTX 4090\b", 82.6, 82.6, 165.2, 165.2),
)

# RunConfig.precision -> DevicePeak column. "amp" is autocast, float16 on CUDA by default.
PRECISION_PEAK_COLUMN = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "amp": "fp16"}


def find_device_peak(device_name: str) -> DevicePeak | None:
    """The table entry whose pattern occurs in ``device_name`` (None when unknown).

    Example:
        >>> find_device_peak("NVIDIA A100-SXM4-80GB").name
        'A100'
    """
    for peak in PEAKS:
        if re.search(peak.pattern, device_name, flags=re.IGNORECASE):
            return peak
    return None


def peak_tflops(device_name: str, precision: str) -> float | None:
    """Dense peak TFLOP/s of ``device_name`` at RunConfig ``precision``.

    Args:
        device_name: as ``torch.cuda.get_device_name()`` reports it, e.g.
            ``"NVIDIA H100 80GB HBM3"``.
        precision: one of ``fp32``, ``tf32``, ``fp16``, ``bf16``, ``amp``.

    Returns:
        The peak, or None when the device is not in :data:`PEAKS` or has no such format.

    Raises:
        ValueError: an unknown precision.

    Example:
        >>> peak_tflops("NVIDIA A100-PCIE-40GB", "tf32")
        156.0
    """
    try:
        column = PRECISION_PEAK_COLUMN[precision]
    except KeyError:
        raise ValueError(f"unknown precision {precision!r}; accepted: {', '.join(PRECISION_PEAK_COLUMN)}") from None
    peak = find_device_peak(device_name)
    return None if peak is None else getattr(peak, column)
