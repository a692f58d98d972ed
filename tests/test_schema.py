import pyarrow as pa

from gpuanalyze.ingest import schema as S
from gpuanalyze.ingest.runinfo import RunInfo


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
