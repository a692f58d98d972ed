"""Hostile metadata values: a field of the wrong type or range is dropped with a note, the trace stays readable."""

import json

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from gpuanalyze.ingest.sources import read_run_info
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import load_columns
from gpuanalyze.ingest.trace.reader import load_trace
from tests.conftest import make_row, write_trace

HOSTILE_RUN = {
    "host": "node-1",
    "gpu_name": ["A100", {"x": 1}],
    "gpu_count": "8",
    "world_size": -3,
    "rank": 1.5,
    "torch": {"version": "2.4"},
    "cpu_quota_cores": "NaN",
    "models": "resnet",
    "gpu_summary": {"busy_pct": 400},
    "argv": None,
}
HOSTILE_END = {"status": ["ok"], "steps": 6, "exception": 7, "loader_workers": True}
HOSTILE_TAGS = {"team": "vision", "bad": {"nested": [1]}, "n": 3}


def _rewrite(path, run=HOSTILE_RUN, tags=HOSTILE_TAGS, end=HOSTILE_END):
    """The trace at ``path`` again, its run, tags and end marker replaced by raw JSON values."""
    with pa.OSFile(str(path), "rb") as fh:
        table = pa.ipc.open_stream(fh).read_all()
    meta = dict(table.schema.metadata)
    meta[S.META_RUN] = json.dumps(run).encode()
    meta[S.META_TAGS] = json.dumps(tags).encode()
    schema = table.schema.with_metadata(meta)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        for batch in table.cast(schema).to_batches():
            w.write_batch(batch)
        w.write_batch(pa.RecordBatch.from_pylist([], schema), custom_metadata={S.END_KEY: json.dumps(end).encode()})
    return path


@pytest.fixture
def hostile(tmp_path):
    return _rewrite(write_trace(tmp_path / "t.arrow", [make_row(i) for i in range(6)]))


def test_ill_typed_run_fields_are_dropped_and_named(hostile):
    trace = load_trace(hostile)
    assert trace.frame.height == 6
    assert trace.run.host == "node-1"  # the good field stays
    for field in ("gpu_name", "gpu_count", "world_size", "rank", "torch", "cpu_quota_cores", "models", "gpu_summary"):
        assert getattr(trace.run, field) is None, field
        assert any(f"'{field}'" in n for n in trace.notes), field
    assert not any("'argv'" in n for n in trace.notes)  # null is a valid "unknown"


def test_ill_typed_tags_and_end_fields_are_dropped(hostile):
    trace = load_trace(hostile)
    assert trace.tags == {"team": "vision"}
    assert any("dropped 2 tag(s)" in n for n in trace.notes)
    assert trace.end is not None and trace.end.steps == 6 and trace.end.status == "unknown"
    assert trace.end.exception is None and trace.end.loader_workers is None
    assert any("end marker metadata field 'status'" in n for n in trace.notes)


def test_metadata_that_is_not_an_object_is_ignored(tmp_path):
    path = _rewrite(write_trace(tmp_path / "t.arrow", [make_row(i) for i in range(3)]), run=[1, 2], tags="x", end=5)
    trace = load_trace(path)
    assert trace.frame.height == 3 and trace.run.host is None and trace.tags == {}
    assert any("run metadata is a JSON array" in n for n in trace.notes)


def test_out_of_core_reader_and_rank_grouping_see_the_same(hostile):
    cols = load_columns(hostile)
    assert cols is not None and cols.run.host == "node-1" and cols.run.gpu_name is None
    assert any("'gpu_name'" in n for n in cols.notes)
    info = read_run_info(hostile)
    assert info is not None and info.host == "node-1"


@pytest.mark.parametrize("command", [["analyze"], ["analyze", "--json"], ["report"]])
def test_every_command_reads_hostile_metadata_without_a_traceback(hostile, tmp_path, command):
    extra = ["-o", str(tmp_path / "r.html")] if command == ["report"] else []
    result = CliRunner().invoke(app, [*command, str(hostile), *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output and result.exit_code == 0, result.output
