"""Compute capability per device from a Kineto trace's ``deviceProperties``.

Kineto lists every device the process could see (``computeMajor``/``computeMinor`` per entry).
ROCm traces report the GFX version in the same fields (MI300X: 9.4), which is not a CUDA compute
capability: the caller decides by vendor what the numbers mean (analyzer.machine.tensor_cores).
"""

from __future__ import annotations

from typing import Any

import msgspec

from gpuanalyze.ingest.timeline.capture_meta import parse_literal

#: Largest major/minor accepted as a compute capability (CUDA has 1.0-12.x today).
_MAX_PART = 99


def _part(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    n = int(value)
    return n if 0 <= n <= _MAX_PART else None


def compute_capabilities(props: Any) -> tuple[str, ...] | None:
    """'major.minor' for each device entry that has both numbers; None when none does."""
    if not isinstance(props, list):
        return None
    out = []
    for entry in props[:256]:
        if not isinstance(entry, dict):
            continue
        major, minor = _part(entry.get("computeMajor")), _part(entry.get("computeMinor"))
        if major is not None and minor is not None:
            out.append(f"{major}.{minor}")
    return tuple(out) or None


#: Top-level trace keys only a ROCm (roctracer) Kineto build writes.
ROCM_KEYS = ("roctracer_version", "hip_runtime_version", "hip_driver_version")
#: Threads per warp (CUDA, every generation) vs per wavefront (AMD CDNA/GCN: 64).
_CUDA_WARP = 32


def rocm_device(meta: dict[str, bytes], props: Any) -> bool:
    """An AMD (ROCm) trace, read from what only ROCm writes: roctracer/HIP version keys, or a 64-wide wavefront
    in deviceProperties (every CUDA device has 32-thread warps). Its computeMajor/Minor is a GFX version."""
    if any(key in meta for key in ROCM_KEYS):
        return True
    if not isinstance(props, list):
        return False
    warps = [e.get("warpSize") for e in props[:256] if isinstance(e, dict)]
    return any(isinstance(w, int) and not isinstance(w, bool) and w != _CUDA_WARP for w in warps)


def decoded_props(raw: bytes | None) -> Any:
    """The ``deviceProperties`` value (JSON, or a Python-literal string); None when absent or unreadable."""
    if raw is None:
        return None
    try:
        value = msgspec.json.decode(raw)
        if isinstance(value, str):
            value = parse_literal(value)
    except (msgspec.DecodeError, RecursionError, ValueError):
        return None
    return value
