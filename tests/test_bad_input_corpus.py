"""The malformed-input corpus, through the CLI: unusable input is one line and exit 2; usable but
damaged input is analysed with a note saying what was skipped. Never a traceback."""

import gzip
import json
import math
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from gpuanalyze.ingest.trace.writer import TraceWriter, WriterOptions
from tests.conftest import make_row, write_trace
from tests.kineto_fixtures import two_step_trace, write

runner = CliRunner()


def _put(p: Path, data: bytes | str) -> Path:
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def _rows(n=6, **over):
    rows = [make_row(i) for i in range(n)]
    for i, fields in over.items():
        rows[int(i.removeprefix("r"))].update(fields)
    return rows


def _arrow_meta(p: Path, table: pa.Table, version: str = S.FORMAT_VERSION) -> Path:
    meta = {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: version.encode()}
    table = table.replace_schema_metadata(meta)
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return p


def _good(p: Path) -> Path:
    return write_trace(p, _rows(8))


def _cut_batch(d: Path) -> Path:
    """Two record batches of 4 steps, the second cut in half: the first 4 steps survive."""
    w = TraceWriter(path=d / "full.arrow", run=RunInfo(), options=WriterOptions(fsync=False))
    w.open()
    for batch in (range(4), range(4, 8)):
        for i in batch:
            w.add(make_row(i))
        w.flush()
        if batch.start == 0:
            first = (d / "full.arrow").stat().st_size
    w.close(EndInfo(status="ok"))
    second = (d / "full.arrow").read_bytes()
    return _put(d / "cut.arrow", second[: first + 100])


def _dir(p: Path, docs: list[tuple[str, dict]]) -> Path:
    p.mkdir()
    for name, doc in docs:
        write(p / name, doc)
    return p


REQ = {S.STEP: [0], S.RANK: pa.array([0], pa.int32()), S.START_UNIX_NS: [1], S.WALL_MS: [1.0]}

# name -> (make input under tmp dir, expected exit code, text that must appear)
CORPUS: dict[str, tuple[Callable[[Path], Path], int, str]] = {
    "missing_path": (lambda d: d / "nope.arrow", 2, "no such file"),
    "empty_file": (lambda d: _put(d / "e.arrow", b""), 2, "empty"),
    "random_bytes": (lambda d: _put(d / "r.arrow", bytes(range(256)) * 64), 2, "not an Arrow IPC stream"),
    "arrow_schema_cut": (lambda d: _put(d / "s.arrow", _good(d / "g.arrow").read_bytes()[:60]), 2, "gpuanalyze"),
    "arrow_cut_in_batch": (_cut_batch, 0, "incomplete"),
    "truncated_json": (lambda d: _put(d / "t.json", json.dumps(two_step_trace())[:300]), 2, "not valid JSON"),
    "corrupt_gzip": (
        lambda d: _put(d / "c.json.gz", gzip.compress(b'{"traceEvents": []}')[:-6] + b"xxxxxx"),
        2,
        "gzip",
    ),
    "gzip_of_text": (lambda d: _put(d / "x.json.gz", gzip.compress(b"hello, not json")), 2, "not valid JSON"),
    "json_not_a_trace": (lambda d: _put(d / "n.json", '{"traceEvents": {"a": 1}}'), 2, "not a PyTorch profiler trace"),
    "json_array_of_numbers": (lambda d: _put(d / "a.json", "[1, 2, 3]"), 2, "not a PyTorch profiler trace"),
    "json_no_events": (lambda d: _put(d / "z.json", '{"traceEvents": []}'), 2, "no events"),
    "arrow_not_a_trace": (
        lambda d: _put(d / "o.arrow", _arrow_bytes(pa.table({"x": [1]}))),
        2,
        "not a gpuanalyze trace",
    ),
    "missing_required_column": (lambda d: _arrow_meta(d / "m.arrow", pa.table({S.STEP: [0]})), 2, "missing column"),
    "wrong_column_type": (lambda d: _arrow_meta(d / "w.arrow", pa.table({**REQ, S.WALL_MS: ["slow"]})), 2, "wall_ms"),
    "newer_version": (lambda d: _arrow_meta(d / "v.arrow", pa.table(REQ), version="9.0"), 2, "upgrade gpuanalyze"),
    "nan_durations": (lambda d: write_trace(d / "n.arrow", _rows(r2={S.WALL_MS: math.nan})), 0, "skipped 1 row"),
    "inf_durations": (lambda d: write_trace(d / "i.arrow", _rows(r3={S.DATA_WAIT_MS: math.inf})), 0, "skipped 1 row"),
    "negative_durations": (lambda d: write_trace(d / "g.arrow", _rows(r1={S.FORWARD_MS: -2.0})), 0, "skipped 1 row"),
    "all_rows_unusable": (
        lambda d: write_trace(d / "u.arrow", [make_row(i, wall=-1.0) for i in range(3)]),
        2,
        "no steps",
    ),
    "zero_steps": (lambda d: write_trace(d / "0.arrow", []), 2, "no steps"),
    "duplicated_steps": (lambda d: write_trace(d / "d.arrow", [make_row(i) for i in (0, 1, 1, 2, 3)]), 0, "duplicated"),
    "steps_out_of_order": (
        lambda d: write_trace(d / "o.arrow", [make_row(i) for i in (2, 0, 1, 3)]),
        0,
        "out of order",
    ),
    "mixed_runs_in_directory": (
        lambda d: _dir(
            d / "run", [("a.json", two_step_trace(rank=0, world=2)), ("b.json", two_step_trace(rank=0, world=2))]
        ),
        2,
        "mixes runs",
    ),
    "rank_file_missing": (
        lambda d: _dir(d / "run", [("r0.json", two_step_trace(rank=0, world=2))]),
        0,
        "have no trace here",
    ),
    "empty_directory": (lambda d: _dir(d / "run", []), 2, "no .arrow, profiler .json(.gz) or Nsight Systems"),
    "huge_single_line": (lambda d: _put(d / "h.json", b"x" * (20 * 2**20)), 2, "not valid JSON"),
}


def _arrow_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_the_corpus_is_at_least_twenty_inputs():
    assert len(CORPUS) >= 20


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_malformed_input(tmp_path, case):
    make, code, text = CORPUS[case]
    path = make(tmp_path)
    result = runner.invoke(app, [str(path), "--json"] if code == 0 else [str(path)])
    assert result.exit_code == code, result.output[-2000:]
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpuanalyze: error:"), result.output
        assert text in lines[0]
    else:
        data = json.loads(result.output)
        assert any(text in n for n in data["notes"])
        if case == "arrow_cut_in_batch":
            assert data["steps"] + data["warmup_steps_skipped"] == 4 and not data["complete"]
