"""Reading the user's small TOML input files (cost inputs, servers to compare): one loader, one set of errors, a
size limit and regular files only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzer.errors import GpuAnalyzeError

#: A cost or server file is a few lines; anything larger is not one.
MAX_CONFIG_BYTES = 1 << 20


def read_small(path: Path, what: str) -> bytes:
    """The bytes of a small regular file; GpuAnalyzeError naming ``what`` the file should be otherwise."""
    try:
        if not path.is_file():
            raise GpuAnalyzeError(
                f"{path}: no such {what} file" if not path.exists() else f"{path}: not a regular file"
            )
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise GpuAnalyzeError(f"{path}: cannot read the {what} file ({exc.strerror})") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise GpuAnalyzeError(f"{path}: over {MAX_CONFIG_BYTES // 1024} KiB, too large for a {what} file")
    return raw


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """The parsed TOML table; GpuAnalyzeError naming ``what`` the file should be when it cannot be read."""
    import tomllib

    raw = read_small(path, what)
    try:
        return tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GpuAnalyzeError(f"{path}: not valid TOML ({exc})") from exc
    except RecursionError as exc:
        raise GpuAnalyzeError(f"{path}: not a {what} file (nested too deeply)") from exc
