"""Measured machine ceilings (from `gpuanalyze bench`) that findings compare achieved numbers with."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.errors import GpuAnalyzeError


def default_path() -> Path:
    """Where `gpuanalyze bench` saves and analysis looks: $GPUANALYZE_CEILINGS or the user cache."""
    env = os.environ.get("GPUANALYZE_CEILINGS")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpuanalyze" / "ceilings.json"


@dataclass(frozen=True, slots=True)
class Ceilings:
    """The best measured numbers the analysis compares a run with."""

    path: str
    device: str
    loader_samples_per_s: float | None
    busbw_gbps: float | None
    matmul_tflops: dict[str, float]


def _best(results: list[dict[str, Any]], benchmark: str, variant: str | None = None) -> float | None:
    values = [
        r["value"]
        for r in results
        if r.get("benchmark") == benchmark and (variant is None or r.get("variant") == variant)
    ]
    return max(values) if values else None


def load_ceilings(path: str | Path) -> Ceilings:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        results = data["results"]
        assert isinstance(results, list)
    except FileNotFoundError as exc:
        raise GpuAnalyzeError(
            f"{path}: no such ceilings file (create one with `gpuanalyze bench --out {path}`)"
        ) from exc
    except (ValueError, KeyError, TypeError, AssertionError, OSError) as exc:
        raise GpuAnalyzeError(f"{path}: not a ceilings file written by `gpuanalyze bench --json`") from exc
    matmul: dict[str, float] = {}
    for r in results:
        if r.get("benchmark") == "matmul" and r.get("dtype"):
            matmul[r["dtype"]] = max(matmul.get(r["dtype"], 0.0), float(r["value"]))
    return Ceilings(
        path=str(path),
        device=str(data.get("device")),
        loader_samples_per_s=_best(results, "dataloader", "pipeline"),
        busbw_gbps=_best(results, "allreduce"),
        matmul_tflops=matmul,
    )


def find_ceilings(explicit: str | Path | None) -> Ceilings | None:
    """The explicit file (must exist), else the default location if a file is there."""
    if explicit is not None:
        return load_ceilings(explicit)
    path = default_path()
    return load_ceilings(path) if path.is_file() else None
