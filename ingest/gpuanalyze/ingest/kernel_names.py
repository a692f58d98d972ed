"""Classify GPU kernels by name into the categories the kernel-level evidence uses.

Name patterns follow what cuBLAS/CUTLASS/cuDNN/PyTorch/Triton kernels are called: SIMT fp32
GEMMs contain ``sgemm`` (e.g. ``volta_sgemm_128x64_nn``, ``cutlass_80_simt_sgemm``); tensor-core
GEMMs carry an MMA shape or tensor-core family (``s16816gemm``, ``h1688gemm``, ``xmma``,
``sm90_xmma``, ``wgmma``, ``cutlass_80_tensorop``) or a 16-bit/tf32 type tag.
"""

from __future__ import annotations

import re
from functools import lru_cache

_TENSOR_CORE = re.compile(
    r"s16816|h16816|s1688|h1688|h884|s884|i8816|16816|1688|xmma|wgmma|hmma|tensorop|"
    r"bf16|f16|fp16|half|tf32|e4m3|e5m2|sm90_|sm100_"
)
_GEMM = re.compile(r"gemm|matmul|_mm_|^mm_|triton_.*mm|cublas|cutlass|gemv|xmma")
_NORM = re.compile(r"bn_|batch_norm|batchnorm|layer_norm|layernorm|group_norm|rms_?norm|norm_kernel")
_CONV = re.compile(r"conv|implicit_gemm|winograd|cudnn|dgrad|wgrad|fprop")
_ATTN = re.compile(r"flash|fmha|attention|attn|sdpa|mem_eff")
_REDUCE = re.compile(r"reduce|softmax|norm|sum_|mean|argmax|argmin|topk|scan|cumsum")
_ELEMENTWISE = re.compile(
    r"elementwise|vectorized|unrolled|copy|fill|index|cat|gather|scatter|where|triton_poi|"
    r"triton_|activation|relu|gelu|silu|dropout|adam|sgd|foreach|multi_tensor|pointwise"
)


@lru_cache(maxsize=65536)
def kernel_category(name: str, event_cat: str = "kernel") -> str:
    lower = name.lower()
    cat = event_cat.lower()
    if cat in ("gpu_memcpy", "memcpy") or lower.startswith("memcpy"):
        return "memcpy"
    if cat in ("gpu_memset", "memset") or lower.startswith("memset"):
        return "memset"
    if "nccl" in lower or "gloo" in lower or "rccl" in lower:
        return "communication"
    if _ATTN.search(lower):
        return "attention"
    if _NORM.search(lower):
        return "reduction"
    if _CONV.search(lower):
        return "conv"
    if _GEMM.search(lower):
        if "sgemm" in lower or ("simt" in lower and not _TENSOR_CORE.search(lower)):
            return "gemm_simt_fp32"
        return "gemm_tensor_core" if _TENSOR_CORE.search(lower) else "gemm_simt_fp32"
    if _REDUCE.search(lower):
        return "reduction"
    if _ELEMENTWISE.search(lower):
        return "elementwise"
    return "other"


def hta_kernel_type(name: str) -> str:
    """HolisticTraceAnalysis's three-way split used for its temporal breakdown."""
    lower = name.lower()
    if "nccl" in lower:
        return "communication"
    if "memcpy" in lower or "memset" in lower:
        return "memory"
    return "computation"


def memcpy_kind(name: str) -> str:
    """'h2d', 'd2h', 'd2d' or 'other' from Kineto's memcpy names ('Memcpy HtoD (Pageable -> Device)')."""
    if "HtoD" in name:
        return "h2d"
    if "DtoH" in name:
        return "d2h"
    if "DtoD" in name or "PtoP" in name:
        return "d2d"
    return "other"


def short_name(name: str, width: int = 60) -> str:
    """A kernel name without 'void ', namespaces noise and template/argument lists, for display."""
    base = name.removeprefix("void ").split("<", 1)[0].split("(", 1)[0]
    return base if len(base) <= width else base[: width - 3] + "..."
