"""The declared JSON output of every command: typed structs (report.py, commands.py), the JSON Schema made from
them and shipped beside them (schema.json, package data), and the one encoder every command prints with.

msgspec: already a dependency, it builds the structs from the analysis' objects by attribute name and makes the
JSON Schema itself (benchmarks/output_schema.py measures it against pydantic and plain dataclasses).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec

from analyzer.render.output import commands as C
from analyzer.render.output import trace_report as R

#: The schema file shipped in the package (`python scripts/json_schema.py` writes it and docs/json.md's tables).
SCHEMA_PATH = Path(__file__).with_name("schema.json")
#: Every command's output: what prints it, and its struct.
OUTPUTS: dict[str, type[msgspec.Struct]] = {
    "gpuanalyze TRACE --json": R.Report,
    "gpuanalyze compare --json": C.Comparison,
    "gpuanalyze fleet --json": C.Fleet,
    "gpuanalyze run --try --json": C.Trials,
    "gpuanalyze bench --json": C.Bench,
    "MCP list_traces": C.TraceList,
    "MCP explain_finding": C.Explained,
}


def built(cls: type[Any], source: object, **given: Any) -> Any:
    """``cls`` with each field not ``given`` read from ``source``'s attribute of that name (nested objects too): an
    attribute renamed inside fails here, loudly, and never silently changes the output."""
    names = [f for f in cls.__struct_fields__ if f not in given]
    return msgspec.convert({**{f: getattr(source, f) for f in names}, **given}, cls, from_attributes=True)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of every output: one definition per struct, a command's output by its name."""
    refs, defs = msgspec.json.schema_components(OUTPUTS.values())
    report = refs[0]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpuanalyze JSON output",
        "description": "Every command's --json and the MCP tools' results; `run --json` prints a Report, or a list "
        "of them for several traces.",
        "anyOf": [*refs, {"type": "array", "items": report}],
        "$defs": defs,
    }


def dumps(data: Any) -> str:
    """Strict JSON, indented: structs as their fields; numbers to 6 significant digits (never fewer than the
    units); a number that is not finite is null (JSON has no NaN or Infinity)."""
    return json.dumps(_rounded(msgspec.to_builtins(data, enc_hook=str)), indent=2, allow_nan=False)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, max(0, 5 - math.floor(math.log10(abs(value))))) if value else value
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value
