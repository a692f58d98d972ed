"""The environment variables that switch profiling on in every Python process of a command.

`gpuanalyze run` sets them for the command it runs; a scheduler that cannot change the command
sets them itself (``gpuanalyze run --print-env`` prints them). Each ProfileOptions field F has
a variable ``GPUANALYZE_<F>``; see docs/recording.md for the table.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path

from analyzer.errors import GpuAnalyzeError
from analyzer.record.profile_options import ProfileOptions
from analyzer.record.run_facts import RUN_ID_ENV

#: "1" switches profiling on in every Python process that starts with the bootstrap on PYTHONPATH.
ON = "GPUANALYZE_RUN"
#: The directory the traces go to (created if missing; its parent must exist).
OUT = "GPUANALYZE_OUT"
RUN_ID = RUN_ID_ENV
#: The trace's tags as a JSON object of strings (``{"exp":"a,b"}``: any value round-trips); the
#: older ``key=value,key=value`` form is still read.
TAGS = "GPUANALYZE_TAGS"
#: Name of the trace in the output directory (ranks: ``trace.rank<N>.arrow``).
TRACE_NAME = "trace.arrow"
DEFAULT_OUT = "gpuanalyze-trace"
#: The ProfileOptions fields a variable can set (the others make no sense for a whole command).
FIELDS = (
    "device",
    "kernel_windows",
    "window_first",
    "window_every",
    "window_steps",
    "flush_interval_s",
    "flush_every_steps",
    "nvtx",
)


def variable(field: str) -> str:
    return f"GPUANALYZE_{field.upper()}"


def bootstrap_dir() -> Path:
    """The directory whose sitecustomize.py installs profiling at interpreter start."""
    return Path(__file__).resolve().parent / "bootstrap"


def options_from_env(env: Mapping[str, str]) -> ProfileOptions:
    """ProfileOptions for this process; raises GpuAnalyzeError naming the variable that is wrong."""
    out = Path(env.get(OUT) or DEFAULT_OUT)
    values: dict[str, object] = {}
    types = {f.name: f.type for f in dataclasses.fields(ProfileOptions)}
    for name in FIELDS:
        raw = env.get(variable(name))
        if raw is None or raw.strip() == "":
            continue
        values[name] = _parse(variable(name), raw.strip(), str(types[name]))
    tags = _tags(env.get(TAGS, ""))
    try:
        return ProfileOptions(out=out / TRACE_NAME, tags=tags, **values)  # type: ignore[arg-type]
    except (GpuAnalyzeError, TypeError, ValueError) as exc:
        raise GpuAnalyzeError(f"GPUANALYZE_* variables: {exc}") from exc


def env_for(options: ProfileOptions, out_dir: Path, run_id: str) -> dict[str, str]:
    """The variables that make a command's processes record with ``options`` into ``out_dir``."""
    env = {ON: "1", OUT: str(out_dir), RUN_ID: run_id}
    defaults = ProfileOptions()
    for name in FIELDS:
        value = getattr(options, name)
        if value != getattr(defaults, name):
            env[variable(name)] = _format(value)
    if options.tags:
        env[TAGS] = json.dumps(options.tags, ensure_ascii=False, separators=(",", ":"))
    return env


def pythonpath(current: str | None) -> str:
    """PYTHONPATH with the bootstrap first (its sitecustomize runs the user's own one too)."""
    entries = [str(bootstrap_dir())]
    if current:
        entries += [e for e in current.split(os.pathsep) if e != entries[0]]
    return os.pathsep.join(entries)


def _parse(name: str, raw: str, kind: str) -> object:
    lowered = raw.lower()
    if "bool" in kind:
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        if "None" in kind and lowered == "auto":
            return None
        raise GpuAnalyzeError(f"{name}={raw!r}: expected 1/0, true/false{' or auto' if 'None' in kind else ''}")
    if kind == "int":
        try:
            return int(raw)
        except ValueError as exc:
            raise GpuAnalyzeError(f"{name}={raw!r}: expected a whole number") from exc
    if kind == "float":
        try:
            return float(raw)
        except ValueError as exc:
            raise GpuAnalyzeError(f"{name}={raw!r}: expected a number") from exc
    return raw


def _format(value: object) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _tags(raw: str) -> dict[str, str]:
    """The tags of ``GPUANALYZE_TAGS``: a JSON object of strings, or the older ``key=value,...`` form."""
    if raw.lstrip().startswith("{"):
        try:
            tags = json.loads(raw)
        except ValueError as exc:
            raise GpuAnalyzeError(f"{TAGS}: not a JSON object ({exc})") from exc
        if not isinstance(tags, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in tags.items()
        ):
            raise GpuAnalyzeError(f"{TAGS}: expected a JSON object of non-empty keys and string values")
        return tags
    tags = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise GpuAnalyzeError(f"{TAGS}: {item!r} is not key=value")
        tags[key.strip()] = value.strip()
    return tags
