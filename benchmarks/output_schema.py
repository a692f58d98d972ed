"""Which library declares the JSON output: msgspec structs, pydantic models or plain dataclasses, measured side by side.

    python benchmarks/output_schema.py [--repeats 200]

The same declared output (analyzer/render/output: every command's struct) is built three ways: msgspec structs
(what ships), pydantic models and stdlib dataclasses generated from them field for field. On the largest report
this suite makes (a Kineto trace of 300 steps: 256 per-step idle-owner rows, its findings and evidence) it times,
best of --repeats: encoding the typed report to JSON; decoding and validating that JSON back into the type; the
JSON Schema of every output (msgspec generates the dataclasses' too: they have no generator of their own); and each
library's import in a fresh interpreter (a CLI pays it on every command). Ratios are to msgspec, in one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pydantic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the Kineto fixture in tests/

from analyzer.api import analyze
from analyzer.render.json_report import report_struct
from analyzer.render.output import OUTPUTS, dumps
from tests.kineto_fixtures import loader_bound_trace, write


def _mirror(cls: type, make: Callable[[str, dict[str, tuple[Any, Any]]], type], done: dict[type, type]) -> type:
    """``cls`` (a msgspec struct) as another library's class with the same fields and defaults, nested structs
    mirrored too (a field without a default is required)."""
    if cls not in done:
        hints = typing.get_type_hints(cls)
        fields = msgspec.structs.fields(cls)
        done[cls] = make(cls.__name__, {f.name: (_swap(hints[f.name], make, done), f.default) for f in fields})
    return done[cls]


def _swap(tp: Any, make: Callable[[str, dict[str, tuple[Any, Any]]], type], done: dict[type, type]) -> Any:
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return _mirror(tp, make, done)
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if not args or origin is typing.Literal:
        return tp
    swapped = tuple(_swap(a, make, done) for a in args)
    if origin in (types.UnionType, typing.Union):
        return typing.Union[swapped]  # noqa: UP007 - built from a tuple of types
    return origin[swapped]


def _pydantic(name: str, fields: dict[str, tuple[Any, Any]]) -> type:
    given = {f: (tp, ... if d is msgspec.NODEFAULT else d) for f, (tp, d) in fields.items()}
    return pydantic.create_model(name, **given)  # type: ignore[call-overload]


def _dataclass(name: str, fields: dict[str, tuple[Any, Any]]) -> type:
    given = [
        (f, tp) if d is msgspec.NODEFAULT else (f, tp, dataclasses.field(default=d)) for f, (tp, d) in fields.items()
    ]
    return dataclasses.make_dataclass(name, given, kw_only=True)


def _pruned(value: Any) -> Any:
    """``value`` without its null keys (msgspec omits System's unsampled GPU keys; the others write null)."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    return [_pruned(v) for v in value] if isinstance(value, list) else value


def best(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def import_time(module: str, runs: int = 7) -> float:
    """Best wall time of ``python -c 'import module'`` less that of ``python -c pass``."""

    def run(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t0

    return min(run(f"import {module}") for _ in range(runs)) - min(run("pass") for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = analyze(write(Path(tmp) / "t.json", loader_bound_trace(4000.0, steps=300)))
    ours = report_struct(report)
    text = msgspec.json.encode(ours)
    data = msgspec.json.decode(text)
    done_p: dict[type, type] = {}
    done_d: dict[type, type] = {}
    models = {name: _mirror(cls, _pydantic, done_p) for name, cls in OUTPUTS.items()}
    classes = {name: _mirror(cls, _dataclass, done_d) for name, cls in OUTPUTS.items()}
    Model, Klass = models["gpuanalyze TRACE --json"], classes["gpuanalyze TRACE --json"]
    theirs, plain = Model.model_validate(data), msgspec.convert(data, Klass)
    same = [_pruned(json.loads(t)) for t in (theirs.model_dump_json(), json.dumps(dataclasses.asdict(plain)), text)]
    assert same[0] == same[1] == same[2], "the three encode the same report"
    adapters = [pydantic.TypeAdapter(m) for m in models.values()]
    r = args.repeats
    rows = {
        "encode the report to JSON": (
            best(lambda: msgspec.json.encode(ours), r),
            best(lambda: theirs.model_dump_json(), r),
            best(lambda: json.dumps(dataclasses.asdict(plain)), r),
        ),
        "decode and validate it": (
            best(lambda: msgspec.json.decode(text, type=type(ours)), r),
            best(lambda: Model.model_validate_json(text), r),
            best(lambda: msgspec.json.decode(text, type=Klass), r),
        ),
        "JSON Schema of every output": (
            best(lambda: msgspec.json.schema_components(OUTPUTS.values()), max(r // 20, 3)),
            best(lambda: [a.json_schema() for a in adapters], max(r // 20, 3)),
            best(lambda: msgspec.json.schema_components(classes.values()), max(r // 20, 3)),
        ),
        "import the library (fresh process)": (
            import_time("msgspec"),
            import_time("pydantic; pydantic.BaseModel"),
            import_time("dataclasses, json"),
        ),
    }
    load = os.getloadavg()[0]
    print(f"largest report: {len(text):,} bytes of JSON; best of {r} (schemas: {max(r // 20, 3)}); load {load:.2f}")
    print(f"{'':38} {'msgspec':>10} {'pydantic':>19} {'dataclasses':>19}")
    for name, (m, p, d) in rows.items():
        print(f"{name:38} {m * 1e3:8.3f}ms {p * 1e3:8.3f}ms ({p / m:5.1f}x) {d * 1e3:8.3f}ms ({d / m:5.1f}x)")
    ship = best(lambda: dumps(report_struct(report)), max(r // 10, 3))
    print(f"what ships (build the structs from the analysis, round, indent): {ship * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
