"""ingest.columns.load_columns: a file it accepts gives load_trace's rows, notes and metadata exactly;
any file it is unsure of it leaves to load_trace (None). And the pieces of the out-of-core path that
replaced polars: medians, per-rank statistics, work-store blocks, partials reduced in a worker."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import analyzer.analysis.ranks as ranks
from analyzer.analysis.combine import Combiner, Reduced
from analyzer.analysis.partial import bracket_answers_of, partial_of
from analyzer.analysis.quantiles import sorted_median
from analyzer.analysis.ranks import WorkStore, block_matrix, polars_median
from analyzer.errors import TraceError
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.columns import NUMERIC, frame_columns, load_columns, raw_columns
from gpuanalyze.ingest.trace.reader import load_trace
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from tests.conftest import make_row, write_trace
from tests.scale_fixtures import write_ranks


def same_as_reader(path: Path) -> bool:
    """load_columns(path) is None, or equals what load_trace gives; returns whether it gave columns."""
    cols = load_columns(path)
    try:
        trace = load_trace(path)
    except TraceError:
        assert cols is None, path
        return False
    if cols is None:
        return False
    assert cols.rows == trace.frame.height
    assert (cols.run, cols.tags, cols.version, cols.complete, cols.end, cols.notes) == (
        trace.run,
        trace.tags,
        trace.version,
        trace.complete,
        trace.end,
        trace.notes,
    )
    want = frame_columns(trace.frame)
    for c in (*NUMERIC, S.KERNEL_STATS):
        got, ref = cols.columns[c], want[c]
        known = np.ones(cols.rows, bool) if got.valid is None else got.valid
        assert np.array_equal(known, np.ones(cols.rows, bool) if ref.valid is None else ref.valid), c
        assert list(got.values[known]) == list(ref.values[known]), c
    return True


def _rows(n: int = 30, **over: object) -> list[dict]:
    return [{**make_row(i, busy=5.0, data_cpu=0.5 if i % 2 else None, peak=1 << 30), **over} for i in range(n)]


def _variants(d: Path) -> dict[str, Path]:
    """Trace files of every kind the reader treats differently."""
    out = {}

    def add(name: str, rows: list[dict], **kw: object) -> None:
        out[name] = write_trace(d / f"{name}.arrow", rows, **kw)  # type: ignore[arg-type]

    add("clean", _rows())
    nan = _rows()
    nan[4][S.DATA_WAIT_MS] = math.nan
    nan[5][S.GPU_BUSY_MS] = math.nan
    add("nan_part", nan)
    add("nan_wall", [*_rows(5), {**make_row(5), S.WALL_MS: math.nan}])
    add("inf_part", [*_rows(5), {**make_row(5), S.FORWARD_MS: math.inf}])
    add("negative", [*_rows(5), {**make_row(5), S.SYNC_MS: -1.0}])
    add("over_wall", [*_rows(5), {**make_row(5), S.FORWARD_MS: 25.0}])
    add("huge_batch", [*_rows(5), {**make_row(5), S.BATCH_SAMPLES: 1 << 41}])
    add("out_of_order", _rows()[::-1])
    add("duplicated", [*_rows(5), *_rows(3)])
    add("two_ranks", [*_rows(10), *[{**r, S.RANK: 1} for r in _rows(12)]])
    add(
        "ranks_interleaved",
        [r for pair in zip(_rows(6), [{**r, S.RANK: 1} for r in _rows(6)], strict=True) for r in pair],
    )
    add("unclosed", _rows(), close=False)
    stats = '{"gpu_busy_ms": 2.0, "kernel_count": 4, "kernel_median_us": 3.0, "top_kernels": []}'
    add("sampled", [{**r, S.KERNEL_STATS: stats if 10 <= i < 14 else None} for i, r in enumerate(_rows())])
    add("bad_stats", [{**r, S.KERNEL_STATS: '{"kernel_count": -1}' if i == 3 else None} for i, r in enumerate(_rows())])
    # cut inside its last record batch (the writer flushes every row here: a cut of a few bytes)
    cut = write_trace(d / "cut.arrow", _rows())
    cut.write_bytes(cut.read_bytes()[:-300])
    out["cut"] = cut
    # a cast (int32 wall), a missing optional column, an extra column, a minor column absent
    table = pa.Table.from_pylist(_rows(), schema=S.arrow_schema(RunInfo(world_size=1, rank=0, host="h")))
    batch = table.schema.get_field_index(S.BATCH_SAMPLES)
    for name, t in (
        ("int_batch", table.set_column(batch, S.BATCH_SAMPLES, table.column(batch).cast(pa.int32()))),
        ("no_busy", table.drop_columns([S.GPU_BUSY_MS])),
        ("extra", table.append_column("extra", pa.array(np.arange(table.num_rows)))),
        ("no_lead", table.drop_columns([S.LEAD_MS, S.SYSTEM])),
    ):
        path = d / f"{name}.arrow"
        schema = t.schema.with_metadata(table.schema.metadata)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            w.write_table(t.replace_schema_metadata(table.schema.metadata), max_chunksize=7)
            S.write_end_marker(w, schema, EndInfo(status="ok", steps=t.num_rows))
        out[name] = path
    # zstd bodies in many batches (read one batch at a time into preallocated arrays), whole and cut
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    for name, keep in (("zstd", None), ("zstd_cut", -200)):
        path = d / f"{name}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema, options=options) as w:
            w.write_table(table, max_chunksize=4)
            S.write_end_marker(w, table.schema, EndInfo(status="ok", steps=table.num_rows))
        if keep is not None:
            path.write_bytes(path.read_bytes()[:keep])
        out[name] = path
    return out


def test_accepted_files_give_the_readers_rows_notes_and_metadata(tmp_path):
    files = _variants(tmp_path)
    accepted = {name for name, p in files.items() if same_as_reader(p)}
    # the common files take the fast path; those the reader repairs, sorts or refuses do not
    assert {"clean", "nan_part", "two_ranks", "unclosed", "sampled", "cut", "no_lead", "extra"} <= accepted
    assert {"zstd", "zstd_cut"} <= accepted
    assert not accepted & {"nan_wall", "inf_part", "negative", "over_wall", "huge_batch", "out_of_order"}
    assert not accepted & {"duplicated", "ranks_interleaved", "bad_stats", "int_batch", "no_busy"}


def test_fixture_ranks_take_the_fast_path_and_raw_columns_match(tmp_path):
    paths = write_ranks(tmp_path, 3, 500, gpu=True, batch_rows=64)
    for p in paths:
        assert same_as_reader(p)
        cols = load_columns(p)
        raw = raw_columns(p, [S.RANK, S.WALL_MS, S.GPU_BUSY_MS, S.KERNEL_STATS])
        for c in (S.RANK, S.WALL_MS, S.GPU_BUSY_MS):
            assert np.array_equal(raw[c].values, cols.columns[c].values)


@pytest.mark.slow
def test_the_hostile_corpus_reads_the_same_through_the_fast_path(tmp_path):
    from tests.hostile.corpus import build

    build(tmp_path)
    arrows = [p for p in tmp_path.rglob("*.arrow") if p.is_file() and not p.is_symlink()]
    assert arrows and sum(same_as_reader(p) for p in arrows) >= 1


def test_sorted_median_is_polars_median_bit_for_bit():
    rng = np.random.default_rng(3)
    for n in (*range(1, 12), 100, 1001):
        for x in (rng.normal(5.0, 2.0, n), rng.integers(0, 3, n).astype(float) * 0.1):
            assert sorted_median(np.sort(x)) == polars_median(x)
    assert math.isnan(sorted_median(np.empty(0)))


def test_partials_of_columns_equal_those_of_frames(tmp_path):
    path = _variants(tmp_path)["sampled"]
    frame = load_trace(path).frame
    a, b = partial_of(frame_columns(frame), 0, 3), partial_of(load_columns(path).columns, 0, 3)
    assert (a.n, a.sampled, a.known, a.sums, a.memory) == (b.n, b.sampled, b.known, b.sums, b.memory)
    assert a.stats == b.stats and a.kernels.totals_ms == b.kernels.totals_ms
    assert all(np.array_equal(a.sketches[c].sample, b.sketches[c].sample) for c in a.sketches)


def test_reduced_groups_merge_to_the_same_sums(tmp_path):
    paths = write_ranks(tmp_path, 5, 60, stragglers={3: ("data", 2.0)})
    parts = [partial_of(load_columns(p).columns, i, 3) for i, p in enumerate(paths)]
    one, grouped = Combiner(3), Combiner(3)
    halves = Reduced(), Reduced()
    for i, p in enumerate(parts):
        one.add(p)
        halves[i % 2].add(p)
    for r in halves:
        grouped.merge(r)
    with pytest.raises(ValueError):
        grouped.merge(halves[0])
    assert np.array_equal(one._main.steps, grouped._main.steps)
    for k, v in one._main.sums.items():
        assert np.allclose(v, grouped._main.sums[k], rtol=1e-12), k


@pytest.mark.parametrize("budget", [1 << 30, 0])
def test_work_store_blocks_in_memory_and_spilled(budget, monkeypatch):
    """Blocks are runs of the union of the ranks' steps (what rank_analysis_from reads)."""
    monkeypatch.setattr(ranks, "_SLAB", 2)
    store = WorkStore(budget=budget)
    work = {r: np.arange(10, dtype=float) + 100 * r for r in range(5)}
    store.add(0, np.arange(10), work[0])
    store.add(1, 3, work[1][3:8])  # steps 3..7 as a run
    store.add(2, np.array([0, 2, 4, 6, 8]), work[2][::2])
    store.add(3, np.arange(10), work[3])
    store.add(4, np.arange(10), work[4])
    store.add(5, np.array([20, 24]), np.array([1.0, 2.0]))
    store.add(6, np.array([20, 22, 24]), np.array([3.0, 4.0, 5.0]))
    try:
        for block in (np.arange(10), np.arange(2, 6), np.arange(8, 10)):
            m, full = block_matrix(store, [0, 1, 2, 3, 4], block)
            assert not full
            assert np.array_equal(m[:, 0], work[0][block]) and np.array_equal(m[:, 4], work[4][block])
            want1 = np.where((block >= 3) & (block <= 7), work[1][block], np.nan)
            want2 = np.where(block % 2 == 0, work[2][block], np.nan)
            assert np.array_equal(m[:, 1], want1, equal_nan=True) and np.array_equal(m[:, 2], want2, equal_nan=True)
        m, full = block_matrix(store, [0, 3], np.arange(4, 9))
        assert full and np.array_equal(m, np.column_stack([work[0][4:9], work[3][4:9]]))
        m, full = block_matrix(store, [5, 6], np.array([20, 22, 24]))  # steps with gaps
        assert not full and np.array_equal(m, [[1.0, 3.0], [np.nan, 4.0], [2.0, 5.0]], equal_nan=True)
    finally:
        store.close()


def test_frame_columns_of_an_empty_kernel_column():
    frame = pl.DataFrame({f.name: pl.Series([], dtype=pl.from_arrow(pa.array([], f.type)).dtype) for f in S.FIELDS})
    cols = frame_columns(frame)
    assert all(len(c) == 0 for c in cols.values())


def test_a_column_of_one_value_needs_no_second_pass(tmp_path, monkeypatch):
    """Its bracket is that value: the quantile pass is not asked for it (batch sizes are constant)."""
    import analyzer.analysis.quantiles as quantiles

    monkeypatch.setattr(quantiles, "SAMPLE", 8)  # sketches that are samples: a second pass for the rest
    paths = write_ranks(tmp_path, 3, 200)
    combiner = Combiner(3)
    rows = {i: load_columns(p).columns for i, p in enumerate(paths)}
    for i, r in rows.items():
        combiner.add(partial_of(r, i, 3))
    asked: list[str] = []

    def answer(wanted, drop):
        asked.extend(wanted)
        return [bracket_answers_of(rows[i], 3, drop, wanted) for i in sorted(rows)]

    try:
        got = combiner.finish(answer)
    finally:
        combiner.close()
    assert S.WALL_MS in asked and S.BATCH_SAMPLES not in asked
    assert got.quantiles[(S.BATCH_SAMPLES, 0.5)] == 32.0
