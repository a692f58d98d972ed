"""What `gpuanalyze env` found (torch, CUDA, the devices), as data: no torch needed to read or render it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    name: str
    compute_capability: str
    memory_bytes: int
    tf32: bool
    bf16: bool
    fp8: bool


@dataclass(frozen=True, slots=True)
class EnvCheck:
    torch: str | None
    cuda_build: str | None
    cuda_available: bool
    driver: str | None
    devices: tuple[DeviceInfo, ...] = ()
    cupy: str | None = None
    smoke_test: str | None = None
    """Result of a small matmul on the first GPU checked against the CPU, or why it was not run."""
    messages: tuple[str, ...] = field(default_factory=tuple)
