"""Classify GPU kernels by name into the categories the kernel-level evidence uses.

A kernel's *kind* (GEMM, convolution, attention, ...) is read from its base name (before any
template or argument list: ``void at::native::vectorized_elementwise_kernel<...>`` is elementwise
whatever its template arguments mention); its *precision* from the whole name. Patterns follow
what cuBLAS/CUTLASS/cuDNN/PyTorch/Triton/rocBLAS kernels are called: fp32 GEMMs on SIMT cores
contain ``sgemm`` (``volta_sgemm_128x64_nn``, ``cutlass_80_simt_sgemm``); tensor-core GEMMs carry
an MMA shape or family (``s16816gemm``, ``h1688gemm``, ``xmma``, ``wgmma``, ``tensorop``) or a
16-bit/tf32/fp8 type tag; cuDNN's fp32 convolutions are ``scudnn``, ``winograd``,
``implicit_convolve_sgemm`` or ``*grad_engine<float``; rocBLAS/Tensile GEMMs start with ``Cijk_``
and name their types (``_SB_`` fp32, ``_HHS_``/``_BBS_`` 16-bit).
"""

from __future__ import annotations

import re
from functools import lru_cache

_TENSOR_CORE = re.compile(
    r"s16816|h16816|s1688|h1688|h884|s884|i8816|16816|1688|xmma|wgmma|hmma|tensorop|mfma_f16|"
    r"bf16|f16|fp16|half|tf32|e4m3|e5m2|e2m1|fp8|sm90_|sm100_|_hhs_|_bbs_|_hss_|_bss_"
)
_COMM = re.compile(r"nccl|rccl|gloo|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv")
_ATTN = re.compile(r"flash|fmha|attention|attn|sdpa|mem_eff")
_NORM = re.compile(r"bn_|batch_norm|batchnorm|layer_norm|layernorm|group_norm|rms_?norm|norm_kernel")
_LAYOUT = re.compile(r"nchwtonhwc|nhwctonchw|transpose|permute")
_CONV = re.compile(r"conv|implicit_gemm|winograd|dgrad|wgrad|fprop|scudnn|\d{3}cudnn|fft2d|fft_")
_GEMM = re.compile(r"gemm|matmul|^mm_|_mm_|cublas|gemv|xmma|^cijk_|^bmm|_bmm")
_CUTLASS = re.compile(r"cutlass")
_REDUCE = re.compile(r"reduce|softmax|norm|sum_|mean|argmax|argmin|topk|scan|cumsum")
_ELEMENTWISE = re.compile(
    r"elementwise|vectorized|unrolled|copy|fill|index|cat|gather|scatter|where|triton_poi|"
    r"triton_|activation|relu|gelu|silu|dropout|adam|sgd|foreach|multi_tensor|pointwise|embedding"
)


def base_name(lower: str) -> str:
    """The kernel's own name, without 'void ', template arguments and parameters."""
    return lower.removeprefix("void ").replace("(anonymous namespace)::", "").split("<", 1)[0].split("(", 1)[0]


#: Longest kernel name classified or kept (characters): real names are under 1 KiB; a longer one is
#: cut to this at import (with a note) and classified by its first MAX_NAME_CHARS characters.
MAX_NAME_CHARS = 4096


def _triton_mm(base: str) -> bool:
    """``triton_`` followed anywhere later by ``mm`` (Inductor's GEMM templates), in linear time: the
    first ``triton_`` leaves the longest tail, so it is the only one to look behind (the regex
    ``triton_.*mm`` backtracks once per occurrence: quadratic on a hostile name)."""
    at = base.find("triton_")
    return at >= 0 and base.find("mm", at + len("triton_")) >= 0


def kernel_category(name: str, event_cat: str = "kernel") -> str:
    """The category of a kernel name (every pattern here matches in time linear in the name, and the
    name is bounded by MAX_NAME_CHARS, so a hostile name cannot make this slow)."""
    return _category(name[:MAX_NAME_CHARS], event_cat[:64])


@lru_cache(maxsize=65536)
def _category(name: str, event_cat: str) -> str:
    lower = name.lower()
    copy = _copy_category(lower, event_cat.lower())
    if copy is not None:
        return copy
    base = base_name(lower)
    return _named_category(base, lower) or _math_category(base, lower) or _generic_category(base)


def _copy_category(lower: str, cat: str) -> str | None:
    if cat in ("gpu_memcpy", "memcpy") or lower.startswith("memcpy"):
        return "memcpy"
    if cat in ("gpu_memset", "memset") or lower.startswith("memset"):
        return "memset"
    return None


def _named_category(base: str, lower: str) -> str | None:
    """Kernels a library names for what they do: collectives, attention, norms, layout changes."""
    if _COMM.search(base) or "nccl" in lower or "rccl" in lower:
        return "communication"
    if _ATTN.search(base):
        return "attention"
    if _NORM.search(base):
        return "reduction"
    if _LAYOUT.search(base):
        return "elementwise"
    return None


def _math_category(base: str, lower: str) -> str | None:
    """Convolutions and GEMMs, on tensor cores or not."""
    tensor_core = bool(_TENSOR_CORE.search(lower)) and "sgemm" not in base and "_sb_" not in base
    if _CONV.search(base) or (_CUTLASS.search(base) and _CONV.search(lower)):
        return "conv_tensor_core" if tensor_core else "conv"
    if _GEMM.search(base) or _triton_mm(base) or _CUTLASS.search(base):
        return "gemm_tensor_core" if tensor_core else "gemm_simt_fp32"
    return None


def _generic_category(base: str) -> str:
    if _REDUCE.search(base):
        return "reduction"
    if _ELEMENTWISE.search(base):
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
    full = name.removeprefix("void ").strip()
    base = full.split("<", 1)[0].split("(", 1)[0].strip() or full  # 'void <lambda>...' has no base name
    base = base or "(unnamed)"
    return base if len(base) <= width else base[: width - 3] + "..."
