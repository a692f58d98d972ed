import json
import math

import pyarrow as pa
import pytest

from analyzer.errors import TraceError
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from gpuanalyze.ingest.trace.runinfo import RunInfo
from tests.conftest import make_row, write_trace


def _arrow(path, table: pa.Table, metadata=None):
    table = table.replace_schema_metadata(metadata)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return path


def _put(path, data):
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def _good(tmp_path, n=5):
    return write_trace(tmp_path / "good.arrow", [make_row(i) for i in range(n)])


def test_round_trip(tmp_path):
    trace = load_trace(_good(tmp_path))
    assert trace.frame.height == 5
    assert trace.frame.columns == list(S.COLUMNS)
    assert trace.complete and trace.notes == ()
    assert trace.run == RunInfo(host="test")


BAD = {
    "missing": lambda p: p / "nope.arrow",
    "directory": lambda p: p,
    "empty": lambda p: _put(p / "e.arrow", b""),
    "random_bytes": lambda p: _put(p / "r.arrow", bytes(range(256)) * 8),
    "json": lambda p: _put(p / "j.arrow", json.dumps({"traceEvents": []})),
    "arrow_not_trace": lambda p: _arrow(p / "a.arrow", pa.table({"x": [1, 2]})),
    "newer_major_version": lambda p: _arrow(
        p / "v.arrow",
        pa.table({c: [1] for c in S.REQUIRED}),
        {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: f"{S.FORMAT_MAJOR + 1}.0".encode()},
    ),
    "garbage_version": lambda p: _arrow(
        p / "g.arrow",
        pa.table({c: [1] for c in S.REQUIRED}),
        {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: b"x.y"},
    ),
    "missing_columns": lambda p: _arrow(
        p / "m.arrow",
        pa.table({S.STEP: [1]}),
        {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: S.FORMAT_VERSION.encode()},
    ),
    "corrupt_run_metadata": lambda p: _arrow(
        p / "c.arrow",
        pa.table({c: [1] for c in S.REQUIRED}),
        {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: S.FORMAT_VERSION.encode(), S.META_RUN: b"{not json"},
    ),
    "schema_cut_off": lambda p: _put(p / "s.arrow", _good(p).read_bytes()[:40]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_clear_trace_error(tmp_path, case):
    path = BAD[case](tmp_path)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message


def test_newer_version_says_upgrade(tmp_path):
    with pytest.raises(TraceError, match="upgrade"):
        load_trace(BAD["newer_major_version"](tmp_path))


def test_json_gets_an_import_hint(tmp_path):
    with pytest.raises(TraceError, match="gpuanalyze import"):
        load_trace(BAD["json"](tmp_path))


def test_truncated_stream_keeps_the_whole_batches(tmp_path):
    path = write_trace(tmp_path / "t.arrow", [make_row(i) for i in range(3)], close=False)
    data = path.read_bytes()
    more = write_trace(tmp_path / "u.arrow", [make_row(i) for i in range(3)])
    # everything up to the first batch, then a batch cut in half
    full = more.read_bytes()
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(full[: len(data) + 100])
    trace = load_trace(cut)
    assert not trace.complete
    assert trace.frame.height == 3
    assert any("incomplete" in n for n in trace.notes)


def test_unclosed_trace_is_incomplete_but_readable(tmp_path):
    trace = load_trace(write_trace(tmp_path / "t.arrow", [make_row(i) for i in range(4)], close=False))
    assert not trace.complete and trace.frame.height == 4
    assert trace.notes[0].startswith("trace is incomplete")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 0.0])
def test_unusable_durations_are_skipped_and_said(tmp_path, bad):
    rows = [make_row(i) for i in range(4)]
    rows[1][S.WALL_MS] = bad
    trace = load_trace(write_trace(tmp_path / "t.arrow", rows))
    assert trace.frame.height == 3
    assert any("skipped 1 row" in n for n in trace.notes)


def test_negative_part_is_skipped(tmp_path):
    rows = [make_row(i) for i in range(4)]
    rows[2][S.DATA_WAIT_MS] = -3.0
    assert load_trace(write_trace(tmp_path / "t.arrow", rows)).frame.height == 3


def test_a_part_longer_than_its_step_is_clamped_and_unknown_parts_stay_unknown(tmp_path):
    rows = [make_row(i) for i in range(4)]
    rows[1][S.DATA_WAIT_MS] = 25.0  # the step is 20 ms
    trace = load_trace(write_trace(tmp_path / "t.arrow", rows))
    assert trace.frame.get_column(S.DATA_WAIT_MS).to_list()[1] == 20.0
    for col in (S.GPU_BUSY_MS, S.DATA_CPU_MS, S.H2D_MS):
        assert trace.frame.get_column(col).null_count() == 4, col
    assert any("clamped" in n for n in trace.notes)


def test_duplicates_and_disorder_are_repaired_and_said(tmp_path):
    rows = [make_row(i) for i in (0, 2, 1, 2, 3)]
    trace = load_trace(write_trace(tmp_path / "t.arrow", rows))
    assert trace.frame.get_column(S.STEP).to_list() == [0, 1, 2, 3]
    assert any("duplicated" in n for n in trace.notes)
    assert any("out of order" in n for n in trace.notes)


def test_missing_optional_column_becomes_null(tmp_path):
    table = pa.table(
        {S.STEP: [0, 1], S.RANK: pa.array([0, 0], pa.int32()), S.START_UNIX_NS: [1, 2], S.WALL_MS: [3.0, 4.0]}
    )
    meta = {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: S.FORMAT_VERSION.encode()}
    trace = load_trace(_arrow(tmp_path / "o.arrow", table, meta))
    assert trace.frame.get_column(S.DATA_WAIT_MS).null_count() == 2
    assert any("data_wait_ms is absent" in n for n in trace.notes)


@pytest.mark.parametrize("args", [[], ["--json"], ["report"], ["watch"]])
def test_a_system_column_of_the_wrong_type_is_dropped_with_a_note(tmp_path, args):
    """analyze, --json, report and watch (each raised TypeError in the host facts)."""
    from typer.testing import CliRunner

    from analyzer.cli import app
    from tests.hostile.arrow_cases import _meta, _plain, _write

    n = 30
    wrong = {0: pa.array([["a", "b"]] * n, type=pa.list_(pa.string())), 1: pa.array([{"x": 1}] * n)}
    for rank, column in wrong.items():  # a list on one rank, a struct on the other
        batch = _plain(n, **{S.SYSTEM: column})
        arrays = {name: batch.column(name) for name in batch.schema.names}
        arrays[S.RANK] = pa.array([rank] * n, type=batch.schema.field(S.RANK).type)
        batch = pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))
        _write(tmp_path / f"trace.rank{rank}.arrow", batch, meta=_meta(b'{"world_size":2,"rank":%d}' % rank))
    if args == ["report"]:
        pytest.importorskip("plotly")
    for i, target in enumerate((tmp_path, tmp_path / "trace.rank0.arrow")):
        command = [str(target), *args]
        if args == ["report"]:
            command = ["report", str(target), "-o", str(tmp_path / f"r{i}.html")]
        elif args == ["watch"]:
            command = ["watch", str(target), "--interval", "0.05"]
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
        if args != ["report"]:  # report writes its notes into the page
            assert "column system has an unexpected type (list<item: string>)" in " ".join(result.output.split())


@pytest.mark.parametrize(
    "change",
    [
        {},
        {S.WALL_MS: math.nan},
        {S.WALL_MS: 0.0},
        {S.DATA_WAIT_MS: 30.0},
        {S.DATA_WAIT_MS: math.nan},
        {S.STEP: 0},  # duplicates step 0
        {S.RANK: -1},
        {S.BATCH_SAMPLES: -4},
    ],
)
def test_clean_rows_agrees_with_normalise_frame(change):
    import polars as pl

    from gpuanalyze.ingest.trace.row_rules import clean_rows, normalise_frame

    rows = [{**S.empty_row(), **make_row(i)} for i in range(3)]
    rows[1].update(change)
    frame = pl.from_arrow(pa.Table.from_pylist(rows, schema=S.arrow_schema(RunInfo())))
    normalised, notes = normalise_frame(frame)
    unchanged = not notes and normalised.equals(frame) and normalised.height == 3
    assert clean_rows(rows) == unchanged


@pytest.mark.parametrize("command", [[], ["watch"]])
def test_a_fifo_named_like_a_trace_is_said_to_be_no_regular_file(tmp_path, command):
    import os

    from typer.testing import CliRunner

    from analyzer.cli import app

    fifo = tmp_path / "trace.arrow"
    os.mkfifo(fifo)
    result = CliRunner().invoke(app, [*command, str(fifo)])
    assert result.exit_code == 2 and "not a regular file" in result.output  # was "file is empty"
