"""The NVIDIA driver version, from NVML: one fact about the machine that recording, the
environment check and the benchmark fingerprint all state."""

from __future__ import annotations


def driver_version() -> str | None:
    """The driver version string, or None where NVML (nvidia-ml-py) or a driver is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - NVML is optional
        return None
