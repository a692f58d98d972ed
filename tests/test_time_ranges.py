"""Every timestamp is range-checked at the reader, so every command sees the same valid rows:
step starts at ±2**63 made `export --chrome-trace` drop every event (and exit 0) and
`watch` show 584 years elapsed."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.run.live import snapshot
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from tests.conftest import make_row, write_trace

runner = CliRunner()


def _rows(starts):
    rows = []
    for i, start in enumerate(starts):
        row = make_row(i, wall=20.0, data=1.0)
        row[S.START_UNIX_NS] = start
        rows.append(row)
    return rows


@pytest.mark.parametrize("start", [2**63 - 1, -(2**63), 2**62 + 1])
def test_steps_that_start_out_of_range_are_skipped_everywhere(tmp_path, start):
    path = write_trace(tmp_path / "t.arrow", _rows([start] * 20))
    assert load_trace(path).frame.height == 0
    out = tmp_path / "t.json"
    result = runner.invoke(app, ["export", str(path), "--chrome-trace", str(out)])
    assert result.exit_code == 2 and "no usable step rows" in result.output
    assert not out.exists()


def test_export_and_watch_see_only_the_valid_rows(tmp_path):
    good = 1_700_000_000 * 10**9
    starts = [good + i * 20_000_000 for i in range(20)]
    starts[5], starts[9] = 2**63 - 1, -(2**63)
    path = write_trace(tmp_path / "t.arrow", _rows(starts))
    trace = load_trace(path)
    assert trace.frame.height == 18 and any("start time" in n for n in trace.notes)
    out = tmp_path / "t.json.gz"
    result = runner.invoke(app, ["export", str(path), "--chrome-trace", str(out)])
    assert result.exit_code == 0, result.output
    assert "18 step row(s)" in result.output
    doc = json.loads(gzip.decompress(out.read_bytes()))
    steps = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep")]
    assert len(steps) == 18
    shot = snapshot(path)
    assert shot.elapsed_s is not None and shot.elapsed_s < 10
