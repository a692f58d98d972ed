"""The user's cache directory, the XDG way: ``$XDG_CACHE_HOME`` (an absolute path), else ``~/.cache``.

The base-directory rule is to create a missing cache directory with mode 0700 when writing to it
(pip, torch and Hugging Face do): a fresh container or CI runner has no ``~/.cache`` yet.
"""

from __future__ import annotations

import os
from pathlib import Path

from analyzer.errors import GpuAnalyzeError


def cache_home() -> Path:
    """``$XDG_CACHE_HOME`` when it is an absolute path (the spec ignores a relative one), else ``~/.cache``."""
    env = os.environ.get("XDG_CACHE_HOME")
    if env and Path(env).is_absolute():
        return Path(env)
    return Path.home() / ".cache"


def gpuanalyze_cache(*parts: str) -> Path:
    """``<cache home>/gpuanalyze/<parts>`` (not created)."""
    return cache_home().joinpath("gpuanalyze", *parts)


def make_private_dir(directory: Path) -> None:
    """Create ``directory`` and any missing parents with mode 0700; raises GpuAnalyzeError naming it."""
    missing = [d for d in (directory, *directory.parents) if not d.is_dir()]
    try:
        for d in reversed(missing):  # mkdir(parents=True) would give the parents the umask's mode
            d.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise GpuAnalyzeError(f"cannot create {directory} ({exc.strerror or exc})") from exc
