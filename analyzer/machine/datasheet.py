"""Datasheet numbers for common training GPUs, each row with its source.

Tensor-core rates are **dense** (NVIDIA's data-center datasheets print sparse rates with a
"with sparsity" footnote; dense is half of those). GeForce rates are those listed with FP32
accumulate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
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


#: The A100's compute rates; the 80 GB part has the same (same datasheet).
_A100_40GB = GpuSpec(
    "A100 40GB SXM",
    19.5,
    156,
    312,
    312,
    None,
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/)",
    ("a100-sxm4-40gb", "a100-pcie-40gb", "a100 40gb"),
)
#: The H100 SXM; the H200 is the same Hopper die with its compute rates (its own datasheet).
_H100_SXM = GpuSpec(
    "H100 SXM",
    67,
    494.5,
    989,
    989,
    1979,
    "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), sparse rates halved",
    ("h100 80gb hbm3", "h100 sxm"),
)

GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        "RTX 3090",
        35.6,
        35.6,
        71,
        71,
        None,
        "NVIDIA Ampere GA102 GPU architecture whitepaper, Appendix A (GeForce RTX 3090)",
        ("rtx 3090",),
    ),
    GpuSpec(
        "RTX 4090",
        82.6,
        82.6,
        165.2,
        165.2,
        330.3,
        "NVIDIA Ada Lovelace GPU architecture whitepaper, Appendix A (GeForce RTX 4090, FP32 accumulate)",
        ("rtx 4090",),
    ),
    GpuSpec(
        "L40S",
        91.6,
        183,
        362.05,
        362.05,
        733,
        "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s/), sparse rates halved",
        ("l40s",),
    ),
    _A100_40GB,
    dataclasses.replace(
        _A100_40GB,
        name="A100 80GB SXM",
        match=("a100-sxm4-80gb", "a100 80gb", "a100-pcie-80gb"),
    ),
    _H100_SXM,
    GpuSpec(
        "H100 PCIe",
        51,
        378,
        756,
        756,
        1513,
        "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), sparse rates halved",
        ("h100 pcie",),
    ),
    dataclasses.replace(
        _H100_SXM,
        name="H200",
        source="NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/), SXM, sparse rates halved",
        match=("h200",),
    ),
    GpuSpec(
        "B200",
        75,
        1125,
        2250,
        2250,
        4500,
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
    One rule for every estimate that needs a peak (MFU, bench's % peak).
    """
    if tensor_core_share is not None:
        if tensor_core_share >= 0.5:
            return "bfloat16", "kernel statistics: most GEMM/convolution time on tensor cores"
        return "float32", "kernel statistics: most GEMM/convolution time in fp32"
    if param_dtype in ("bfloat16", "float16", "float32"):
        return param_dtype, f"parameters in {param_dtype} (no kernel statistics; autocast would not show here)"
    return "bfloat16", "no dtype or kernel statistics in the trace: bf16 assumed"
