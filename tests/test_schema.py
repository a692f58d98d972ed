import pyarrow as pa

from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import RunInfo


def test_parts_are_columns_and_end_in_ms():
    for part in S.PARTS:
        assert part in S.COLUMNS
        assert part.endswith("_ms")


def test_schema_metadata_carries_version_and_run():
    schema = S.arrow_schema(RunInfo(host="h"), {"exp": "a"})
    assert schema.metadata[S.META_FORMAT] == S.FORMAT_NAME.encode()
    assert schema.metadata[S.META_VERSION] == S.FORMAT_VERSION.encode()
    assert b'"host":"h"' in schema.metadata[S.META_RUN]
    assert schema.names == list(S.COLUMNS)


def test_required_columns_are_not_nullable():
    schema = S.arrow_schema(RunInfo())
    for name in S.REQUIRED:
        assert not schema.field(name).nullable
    assert schema.field(S.GPU_BUSY_MS).type == pa.float64()


def test_per_model_forward_times_are_an_optional_minor_addition(tmp_path):
    import pyarrow as pa

    from gpuanalyze.ingest.trace.reader import load_trace
    from tests.conftest import make_row, write_trace

    assert S.FORMAT_VERSION.startswith("1.") and S.MODEL_FORWARD_MS in S.ADDED_IN_MINOR
    rows = [make_row(i) for i in range(3)]
    rows[1][S.MODEL_FORWARD_MS] = {"G": 1.5, "D": 2.5}
    frame = load_trace(write_trace(tmp_path / "t.arrow", rows)).frame
    assert frame.get_column(S.MODEL_FORWARD_MS).to_list() == [None, {"G": 1.5, "D": 2.5}, None]
    # a 1.1 trace (no such column) reads with the column null and no note about it
    old = pa.table({c: [0] if c != S.WALL_MS else [3.0] for c in S.REQUIRED}).cast(
        pa.schema([f for f in S.FIELDS if f.name in S.REQUIRED])
    )
    meta = {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: b"1.1"}
    with (
        pa.OSFile(str(tmp_path / "old.arrow"), "wb") as sink,
        pa.ipc.new_stream(sink, old.schema.with_metadata(meta)) as w,
    ):
        w.write_table(old)
    legacy = load_trace(tmp_path / "old.arrow")
    assert legacy.frame.get_column(S.MODEL_FORWARD_MS).to_list() == [None]
    assert not any(S.MODEL_FORWARD_MS in n for n in legacy.notes)
