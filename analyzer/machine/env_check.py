"""`gpuanalyze env`: the CUDA sanity check every GPU guide starts with, as data."""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path
from typing import Any

from analyzer.machine.environment import DeviceInfo, EnvCheck


def check_env() -> EnvCheck:
    """Never raises: a machine without torch or a GPU gets an answer that says so. A CPU build of torch
    is named from its ``version.py`` without importing torch (seconds on a cold disk)."""
    cupy = _cupy_version()
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return EnvCheck(
            None, None, False, None, cupy=cupy, messages=("torch is not installed; only trace analysis is available",)
        )
    build = _torch_build(Path(spec.origin).with_name("version.py"))
    if build is not None and not build.get("cuda") and not build.get("hip"):
        msg = "no CUDA device visible (this torch is a CPU-only build)"
        return EnvCheck(build.get("__version__"), None, False, None, cupy=cupy, messages=(msg,))
    import torch

    from analyzer.machine.driver import driver_version

    available = torch.cuda.is_available()
    if not available:
        msg = "no CUDA device visible" + ("" if torch.version.cuda else " (this torch is a CPU-only build)")
        return EnvCheck(torch.__version__, torch.version.cuda, False, None, cupy=cupy, messages=(msg,))
    devices = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        cc = (p.major, p.minor)
        devices.append(
            DeviceInfo(
                i,
                p.name,
                f"{p.major}.{p.minor}",
                int(p.total_memory),
                tf32=cc >= (8, 0),
                bf16=cc >= (8, 0),
                fp8=cc >= (8, 9),
            )
        )
    return EnvCheck(torch.__version__, torch.version.cuda, True, driver_version(), tuple(devices), cupy, _smoke(torch))


def _smoke(torch: Any) -> str:
    try:
        a = torch.randn(1024, 1024, device="cuda")
        b = torch.randn(1024, 1024, device="cuda")
        t0 = time.perf_counter()
        c = (a @ b).cpu()
        ms = (time.perf_counter() - t0) * 1e3
        ref = a.cpu().double() @ b.cpu().double()
        err = float((c.double() - ref).abs().max() / ref.abs().max())
        return f"1024x1024 fp32 matmul ok ({ms:.1f} ms incl. first launch, max rel. error {err:.1e})"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"matmul smoke test failed: {type(exc).__name__}: {exc}"


def _torch_build(path: Path) -> dict[str, str] | None:
    """``__version__``, ``cuda`` and ``hip`` as torch's generated ``version.py`` assigns them ('' for None);
    None when it cannot be read, and torch is imported instead."""
    try:
        found = dict(
            re.findall(r"^(__version__|cuda|hip)\b[^=\n]*=\s*(?:'([^'\n]*)'|None)\s*$", path.read_text(), re.M)
        )
    except OSError:
        return None
    return found if found.get("__version__") else None


def _cupy_version() -> str | None:
    if importlib.util.find_spec("cupy") is None:
        return None
    try:
        import cupy

        return cupy.__version__
    except Exception as exc:  # noqa: BLE001
        return f"installed but fails to import ({type(exc).__name__})"
