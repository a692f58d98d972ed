"""Where `gpuanalyze DIR` keeps its imports of Kineto rank files, one directory per input directory."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from analyzer.measure import storage

__all__ = ["cache_dir", "cache_root"]


def cache_root() -> Path:
    """Where `gpuanalyze DIR` keeps imports of Kineto rank files: $GPUANALYZE_CACHE, else the user cache."""
    if env := os.environ.get("GPUANALYZE_CACHE"):
        return Path(env)
    from analyzer.machine.user_cache import gpuanalyze_cache

    return gpuanalyze_cache("imports")


def cache_dir(source_dir: str) -> tuple[str, tempfile.TemporaryDirectory[str] | None]:
    """The import cache of one input directory (a temporary one when the cache cannot be written)."""
    key = source_dir if storage.is_url(source_dir) else str(Path(source_dir).resolve())
    d = cache_root() / hashlib.sha256(key.encode()).hexdigest()[:16]
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        if os.access(d, os.W_OK):
            return str(d), None
    except OSError:
        pass
    tmp = tempfile.TemporaryDirectory(prefix="gpuanalyze-import-")
    return tmp.name, tmp
