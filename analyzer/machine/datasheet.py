"""Datasheet numbers for common training GPUs, each row with its source.

Tensor-core rates are **dense** (NVIDIA's data-center datasheets print sparse rates with a
"with sparsity" footnote; dense is half of those). GeForce rates are those listed with FP32
accumulate. Memory bandwidth in GB/s (decimal), memory in GB (decimal).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    memory_gb: float
    memory_bw_gbps: float
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
    nvlink_gbps: float | None
    """Total NVLink bandwidth per GPU (both directions), None without NVLink."""
    pcie_gen: int
    source: str
    match: tuple[str, ...]
    """Lower-case substrings of the CUDA device name that identify this GPU."""

    def peak_tflops(self, dtype: str) -> float | None:
        return {
            "float32": self.fp32_tflops,
            "tf32": self.tf32_tflops,
            "float16": self.fp16_tflops,
            "bfloat16": self.bf16_tflops,
            "float8": self.fp8_tflops,
        }.get(dtype)


#: Per-direction PCIe x16 bandwidth in GB/s: 8 (Gen3), 16 (Gen4) or 32 (Gen5) GT/s x 16 lanes x 128b/130b / 8.
#: Source: PCI-SIG PCI Express Base Specification line rates and 128b/130b encoding.
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}

#: The A100's compute and links; the 80 GB part differs only in memory and its bandwidth (same datasheet).
_A100_40GB = GpuSpec(
    "A100 40GB SXM",
    40,
    1555,
    19.5,
    156,
    312,
    312,
    None,
    600,
    4,
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/)",
    ("a100-sxm4-40gb", "a100-pcie-40gb", "a100 40gb"),
)
#: The H100 SXM; the H200 is the same Hopper die with more and faster memory (its own datasheet).
_H100_SXM = GpuSpec(
    "H100 SXM",
    80,
    3350,
    67,
    494.5,
    989,
    989,
    1979,
    900,
    5,
    "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), sparse rates halved",
    ("h100 80gb hbm3", "h100 sxm"),
)

GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        "RTX 3090",
        24,
        936,
        35.6,
        35.6,
        71,
        71,
        None,
        112.5,
        4,
        "NVIDIA Ampere GA102 GPU architecture whitepaper, Appendix A (GeForce RTX 3090)",
        ("rtx 3090",),
    ),
    GpuSpec(
        "RTX 4090",
        24,
        1008,
        82.6,
        82.6,
        165.2,
        165.2,
        330.3,
        None,
        4,
        "NVIDIA Ada Lovelace GPU architecture whitepaper, Appendix A (GeForce RTX 4090, FP32 accumulate)",
        ("rtx 4090",),
    ),
    GpuSpec(
        "L40S",
        48,
        864,
        91.6,
        183,
        362.05,
        362.05,
        733,
        None,
        4,
        "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s/), sparse rates halved",
        ("l40s",),
    ),
    _A100_40GB,
    dataclasses.replace(
        _A100_40GB,
        name="A100 80GB SXM",
        memory_gb=80,
        memory_bw_gbps=2039,
        match=("a100-sxm4-80gb", "a100 80gb", "a100-pcie-80gb"),
    ),
    _H100_SXM,
    GpuSpec(
        "H100 PCIe",
        80,
        2000,
        51,
        378,
        756,
        756,
        1513,
        600,
        5,
        "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), sparse rates halved",
        ("h100 pcie",),
    ),
    dataclasses.replace(
        _H100_SXM,
        name="H200",
        memory_gb=141,
        memory_bw_gbps=4800,
        source="NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/), SXM, sparse rates halved",
        match=("h200",),
    ),
    GpuSpec(
        "B200",
        180,
        8000,
        75,
        1125,
        2250,
        2250,
        4500,
        1800,
        5,
        "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx/), per GPU = 8-GPU totals / 8, "
        "sparse rates halved",
        ("b200",),
    ),
)


def lookup(device_name: str | None) -> GpuSpec | None:
    """The table row whose identifying substring occurs in a CUDA device name."""
    if not device_name:
        return None
    name = device_name.lower()
    for spec in GPUS:
        if any(m in name for m in spec.match):
            return spec
    return None


def compute_precision(param_dtype: str | None, tensor_core_share: float | None) -> tuple[str, str]:
    """The precision a run's matmuls ran at, as a datasheet key, and what that rests on.

    Kernel statistics decide when present (tensor-core GEMMs/convolutions outweigh fp32 ones:
    16-bit); otherwise the parameters' dtype; otherwise bf16, today's usual training precision.
    One rule for every estimate that needs a peak (MFU, GPU what-ifs).
    """
    if tensor_core_share is not None:
        if tensor_core_share >= 0.5:
            return "bfloat16", "kernel statistics: most GEMM/convolution time on tensor cores"
        return "float32", "kernel statistics: most GEMM/convolution time in fp32"
    if param_dtype in ("bfloat16", "float16", "float32"):
        return param_dtype, f"parameters in {param_dtype} (no kernel statistics; autocast would not show here)"
    return "bfloat16", "no dtype or kernel statistics in the trace: bf16 assumed"
