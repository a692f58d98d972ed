"""Which precisions an NVIDIA GPU's tensor cores run, by CUDA compute capability, each with its source.

The kernels rule's precision advice comes from here: fp16 autocast with a GradScaler on Volta and
Turing (no bf16, no TF32 on their tensor cores), bf16 autocast and TF32 from Ampere (sm80), FP8
only where the hardware has it (Ada sm89, Hopper sm90, Blackwell sm100) and a software recipe runs
it (NVIDIA Transformer Engine). Compute capability comes from the trace (Kineto
``deviceProperties``); without it, from the GPU's name (the table below). ROCm devices report a GFX
version in the same fields, which is not a compute capability: AMD GPUs are not judged here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TensorCores:
    """What one compute-capability generation's tensor cores run."""

    since: tuple[int, int]
    """First compute capability of the generation."""
    generation: str
    fp16: bool
    bf16: bool
    tf32: bool
    fp8: bool
    source: str


#: Tensor-core precisions by generation, newest last; a compute capability takes the last row it reaches.
GENERATIONS: tuple[TensorCores, ...] = (
    TensorCores(
        (0, 0),
        "pre-Volta",
        False,
        False,
        False,
        False,
        "NVIDIA Tesla V100 GPU architecture whitepaper "
        "(WP-08608-001): tensor cores are new in Volta; earlier GPUs have none",
    ),
    TensorCores(
        (7, 0),
        "Volta",
        True,
        False,
        False,
        False,
        "NVIDIA Tesla V100 GPU architecture whitepaper (WP-08608-001), "
        "'Tensor Cores': FP16 multiply with FP32 accumulate",
    ),
    TensorCores(
        (7, 5),
        "Turing",
        True,
        False,
        False,
        False,
        "NVIDIA Turing GPU architecture whitepaper (WP-09183-001), 'Turing Tensor Cores': FP16, INT8, INT4",
    ),
    TensorCores(
        (8, 0),
        "Ampere",
        True,
        True,
        True,
        False,
        "NVIDIA A100 Tensor Core GPU architecture whitepaper "
        "(WP-10537-001), 'TF32' and 'BF16' tensor-core precisions (GA102 whitepaper: the same for sm86)",
    ),
    TensorCores(
        (8, 9),
        "Ada Lovelace",
        True,
        True,
        True,
        True,
        "NVIDIA Ada Lovelace GPU architecture whitepaper, fourth-generation tensor cores with FP8 (E4M3/E5M2)",
    ),
    TensorCores(
        (9, 0),
        "Hopper",
        True,
        True,
        True,
        True,
        "NVIDIA H100 Tensor Core GPU architecture whitepaper (WP-10792-001), 'FP8' and the Transformer Engine",
    ),
    TensorCores(
        (10, 0),
        "Blackwell",
        True,
        True,
        True,
        True,
        "NVIDIA Blackwell architecture technical brief: fifth-generation tensor cores, FP8/FP6/FP4",
    ),
)

#: Compute capability of GPUs by (lower-case) name substring, for traces without deviceProperties.
#: Source: NVIDIA CUDA GPUs compute capability table (developer.nvidia.com/cuda-gpus).
CAPABILITY_BY_NAME: tuple[tuple[str, tuple[int, int]], ...] = (
    ("p100", (6, 0)),
    ("v100", (7, 0)),
    ("titan v", (7, 0)),
    ("t4", (7, 5)),
    ("rtx 20", (7, 5)),
    ("quadro rtx", (7, 5)),
    ("a100", (8, 0)),
    ("a30", (8, 0)),
    ("rtx 30", (8, 6)),
    ("a10", (8, 6)),
    ("a40", (8, 6)),
    ("l4", (8, 9)),
    ("l40", (8, 9)),
    ("rtx 40", (8, 9)),
    ("h100", (9, 0)),
    ("h200", (9, 0)),
    ("gh200", (9, 0)),
    ("b200", (10, 0)),
    ("gb200", (10, 0)),
)

_AMD = ("amd", "instinct", "radeon", "gfx")


def parse_capability(text: str) -> tuple[int, int] | None:
    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def capability(gpu_name: str | None, recorded: tuple[str, ...] | None) -> tuple[tuple[int, int], str] | None:
    """(compute capability, where it comes from) of an NVIDIA GPU; None for AMD or unknown GPUs.

    Of several recorded devices the lowest capability is taken (advice must run on all of them)."""
    name = (gpu_name or "").lower()
    if any(a in name for a in _AMD):
        return None
    parsed = [c for c in (parse_capability(t) for t in recorded or ()) if c is not None]
    if parsed:
        low = min(parsed)
        return low, f"deviceProperties: compute capability {low[0]}.{low[1]}"
    for key, cc in CAPABILITY_BY_NAME:
        if key in name:
            return cc, f"{gpu_name} is compute capability {cc[0]}.{cc[1]} (developer.nvidia.com/cuda-gpus)"
    return None


def tensor_cores(cc: tuple[int, int]) -> TensorCores:
    """The generation a compute capability belongs to."""
    rows = [g for g in GENERATIONS if cc >= g.since]
    assert rows, cc
    return rows[-1]
