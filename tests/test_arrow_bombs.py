"""Arrow traces are checked before they are decoded: null-typed columns of a huge
declared length, dictionary-encoded shared values, run-end-encoded and view columns, and zstd/LZ4
bodies that expand beyond the ratio guard are refused with one line; compressed traces of honest
size still read."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from analyzer.errors import TraceError
from gpuanalyze.ingest.trace import ipc_guard
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.ipc_guard import IpcLimits, IpcReader
from gpuanalyze.ingest.trace.reader import load_trace
from gpuanalyze.ingest.trace.runinfo import RunInfo
from tests.conftest import make_row

STATS = json.dumps({"gpu_span_ms": 1.0, "gpu_busy_ms": 0.5, "kernel_count": 3, "top_kernels": []})


def _meta() -> dict[bytes, bytes]:
    return {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: S.FORMAT_VERSION.encode(), S.META_RUN: b"{}"}


def _write(path, batch: pa.RecordBatch, compression: str | None = None, meta: dict[bytes, bytes] | None = None):
    schema = batch.schema.with_metadata(meta or _meta())
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema, options=opts) as w:
        w.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
        w.write_batch(pa.RecordBatch.from_pylist([], schema=schema), custom_metadata={S.END_KEY: b'{"status":"ok"}'})
    return path


def _plain(n: int, **columns: pa.Array) -> pa.RecordBatch:
    rows = [make_row(i) for i in range(n)]
    table = pa.Table.from_pylist(rows, schema=S.arrow_schema(RunInfo()))
    arrays = {f.name: table.column(f.name).combine_chunks() for f in S.FIELDS}
    arrays.update(columns)
    return pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))


def _refused(path, *words: str) -> str:
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message
    return message


def test_null_typed_columns_of_a_huge_length_are_refused(tmp_path):
    n = 400_000_000  # a 3 GB frame once cast; the file holds no values at all
    batch = pa.RecordBatch.from_arrays([pa.nulls(n) for _ in S.FIELDS], names=[f.name for f in S.FIELDS])
    path = _write(tmp_path / "nulls.arrow", batch)
    assert path.stat().st_size < 4096
    _refused(path, "null-typed")


def test_a_null_typed_optional_column_is_unknown_not_materialised(tmp_path):
    path = _write(tmp_path / "opt.arrow", _plain(12, gpu_busy_ms=pa.nulls(12)))
    trace = load_trace(path)
    assert trace.frame.height == 12 and trace.frame.get_column(S.GPU_BUSY_MS).null_count() == 12
    assert any("null-typed" in n for n in trace.notes)


def test_a_dictionary_shared_value_is_refused(tmp_path):
    n = 20_000
    big = "k" * 200_000
    stats = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([big]))
    path = _write(tmp_path / "dict.arrow", _plain(n, kernel_stats=stats))
    assert path.stat().st_size < 4 * 2**20  # 2.2 GB once expanded
    _refused(path, "dictionary-encoded")


def test_run_end_encoded_and_view_columns_are_refused(tmp_path):
    n = 1000
    ree = pa.RunEndEncodedArray.from_arrays(pa.array([n], pa.int32()), pa.array([20.0]))
    _refused(_write(tmp_path / "ree.arrow", _plain(n, wall_ms=ree)), "run-end-encoded")
    view = pa.array([STATS] * n, pa.string_view())
    _refused(_write(tmp_path / "view.arrow", _plain(n, kernel_stats=view)), "view")


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_compressed_bodies_that_expand_too_far_are_refused(tmp_path, codec, monkeypatch):
    # the default allowance (64 MiB, 100x the file) scaled down 64x so the bomb is quick to build;
    # the corpus (tests/hostile) has full-size zstd and LZ4 bombs under the default limits
    monkeypatch.setattr(ipc_guard, "DEFAULT_LIMITS", IpcLimits(min_allowance=2**20))
    n = 200
    huge = pa.array(["x" * 10_000] * n)  # 2 MB of one byte: a few KB compressed
    path = _write(tmp_path / f"bomb.{codec}.arrow", _plain(n, kernel_stats=huge), codec)
    assert path.stat().st_size < 2**16
    _refused(path, "compressed", "expand")


@pytest.mark.parametrize("codec", ["zstd", "lz4", None])
def test_honest_compressed_traces_read(tmp_path, codec):
    path = _write(tmp_path / f"ok.{codec}.arrow", _plain(200, kernel_stats=pa.array([STATS] * 200)), codec)
    trace = load_trace(path)
    assert trace.frame.height == 200 and trace.complete


def test_the_limits_are_per_batch_and_in_total(tmp_path):
    path = _write(tmp_path / "ok.arrow", _plain(2000, kernel_stats=pa.array([STATS] * 2000)), "zstd")
    from gpuanalyze.ingest.trace.ipc_guard import IpcReader

    with open(path, "rb") as fh:
        reader = IpcReader(path, fh, IpcLimits(min_allowance=1024, ratio=1.0))
        with pytest.raises(TraceError, match="expand"):
            list(reader.batches())
    with open(path, "rb") as fh:
        reader = IpcReader(path, fh, IpcLimits(max_batch_bytes=1024))
        with pytest.raises(TraceError, match="expand"):
            list(reader.batches())


def test_a_stream_cut_inside_a_batch_keeps_the_batches_before_it(tmp_path):
    path = _write(tmp_path / "ok.arrow", _plain(50))
    data = path.read_bytes()
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(data[: len(data) - 200])
    trace = load_trace(cut)
    assert not trace.complete


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_padding_does_not_grow_a_compressed_bomb_allowance(tmp_path, codec, monkeypatch):
    # incompressible padding makes the file large enough that the ratio alone allows the bomb;
    # the absolute cap on what compressed buffers inflate to still refuses it (scaled down 64x)
    monkeypatch.setattr(ipc_guard, "DEFAULT_LIMITS", IpcLimits(min_allowance=2**20, max_inflated=4 * 2**20))
    n = 60
    noise = pa.array([os.urandom(4000).hex() for _ in range(n)])  # 480 KB that zstd cannot shrink
    bomb = pa.array(["x" * 100_000] * n)  # 6 MB of one byte
    path = _write(tmp_path / f"padded.{codec}.arrow", _plain(n, kernel_stats=bomb, padding=noise), codec)
    assert ipc_guard.DEFAULT_LIMITS.allowed(path.stat().st_size) > 6 * 2**20 + n * ipc_guard.ROW_COST
    _refused(path, "compressed", "beyond their size")


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_incompressible_metadata_grows_no_allowance(tmp_path, codec, monkeypatch):
    # megabytes of schema metadata decode to nothing: the ratio is to the batch bodies, not the file
    monkeypatch.setattr(ipc_guard, "DEFAULT_LIMITS", IpcLimits(min_allowance=2**20))
    n = 60
    path = _write(tmp_path / f"meta.{codec}.arrow", _plain(n, kernel_stats=pa.array(["x" * 100_000] * n)), codec)
    with pa.OSFile(str(path), "rb") as fh:
        table = pa.ipc.open_stream(fh).read_all()
    meta = {**table.schema.metadata, b"padding": os.urandom(1_500_000).hex().encode()}  # 3 MB
    path = _write(path, table.to_batches()[0].replace_schema_metadata(meta), codec, meta=meta)
    assert path.stat().st_size > 3_000_000  # 100x of it would allow the 6 MB bomb
    _refused(path, "expand")


def test_honest_compressed_trace_stays_under_the_absolute_cap(tmp_path):
    path = _write(tmp_path / "ok.arrow", _plain(3000, kernel_stats=pa.array([STATS] * 3000)), "zstd")
    with open(path, "rb") as fh:
        reader = IpcReader(path, fh)
        assert len([b for b in reader.batches() if b is not None]) == 2
        assert 0 < reader.inflated < reader.limits.max_inflated


def test_a_trace_is_judged_by_what_decoding_it_leaves_held_not_by_its_compression(tmp_path):
    """20,000 repetitive rows compress past 100x (a long run's steps do): what they cost held is their rows once
    conformed and their kernel statistics, the format's fixed-width values counted once (they are those rows),
    not twice; a bomb of the same cost in a few rows' text is refused alike (limits scaled down 28x)."""
    limits = IpcLimits(min_allowance=4 * 2**20)
    table = pa.Table.from_batches([_plain(200)] * 100)
    columns = {f.name: table.column(f.name).combine_chunks() for f in S.FIELDS}
    columns[S.STEP] = pa.array(range(table.num_rows), pa.int64())
    columns[S.KERNEL_STATS] = pa.array([STATS if i % 7 == 0 else None for i in range(table.num_rows)])
    honest = _write(tmp_path / "long.arrow", pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns)))
    honest = _write(tmp_path / "long.zstd.arrow", pa.ipc.open_stream(honest.read_bytes()).read_next_batch(), "zstd")
    with open(honest, "rb") as fh:
        reader = IpcReader(honest, fh, limits)
        assert len([b for b in reader.batches() if b is not None]) == 2
        assert reader.decoded > 100 * reader.bodies  # past the ratio: the floor admits it
        assert reader.decoded < table.num_rows * (ipc_guard.ROW_COST + 30)  # 152 bytes a row, and the stats
    bomb = _write(tmp_path / "bomb.arrow", _plain(100, kernel_stats=pa.array(["x" * 50_000] * 100)), "zstd")
    with open(bomb, "rb") as fh, pytest.raises(TraceError, match="expand"):
        list(IpcReader(bomb, fh, limits).batches())


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        IpcLimits(max_inflated=0)
