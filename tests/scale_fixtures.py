"""Synthetic multi-rank runs for the out-of-core tests and benchmarks/scale_ranks.py.

Every rank's step lasts as long as the slowest rank's work (they meet in the gradient all-reduce);
what a rank does not work it waits (sync). Stragglers get extra milliseconds in one phase, or in
``other`` (host work outside every instrumented phase).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo, encode

_PHASE_COLUMN = {
    "data": S.DATA_WAIT_MS,
    "forward": S.FORWARD_MS,
    "backward": S.BACKWARD_MS,
    "optimizer": S.OPTIMIZER_MS,
    "other": S.OTHER_MS,
}


def _phases(rank: int, steps: int, seed: int, stragglers: dict[int, tuple[str, float]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed * 100_003 + rank)
    p = {
        S.DATA_WAIT_MS: np.abs(rng.normal(1.0, 0.1, steps)),
        S.FORWARD_MS: rng.normal(5.0, 0.2, steps),
        S.BACKWARD_MS: rng.normal(8.0, 0.3, steps),
        S.OPTIMIZER_MS: np.full(steps, 1.0) + rng.normal(0, 0.01, steps),
        S.OTHER_MS: np.abs(rng.normal(0.5, 0.05, steps)),
    }
    if rank in stragglers:
        phase, extra = stragglers[rank]
        p[_PHASE_COLUMN[phase]] = p[_PHASE_COLUMN[phase]] + extra
    return p


def _nulls(n: int, type_: pa.DataType) -> pa.Array:
    """``n`` nulls of ``type_`` as the recorder writes them (``pa.nulls`` of a map type gives its keys an
    offsets buffer of ``n`` entries, which the IPC writer then repeats in every record batch: 4 MB per
    batch at 1M steps, ~1 GB decoded per file, that no recorded trace holds)."""
    return pa.array(np.full(n, None), type=type_)


def write_ranks(
    directory: Path,
    ranks: int,
    steps: int,
    *,
    seed: int = 0,
    stragglers: dict[int, tuple[str, float]] | None = None,
    gpu: bool = False,
    batch_rows: int = 4096,
    world: int | None = None,
) -> list[Path]:
    """One gpuanalyze trace per rank (``trace.rank<N>.arrow``); returns their paths."""
    stragglers = stragglers or {}
    slowest = np.zeros(steps)
    for rank in range(ranks):  # first pass: each step's slowest work (the step's wall time)
        slowest = np.maximum(slowest, sum(_phases(rank, steps, seed, stragglers).values()))
    paths = []
    for rank in range(ranks):
        phases = _phases(rank, steps, seed, stragglers)
        work = sum(phases.values())
        wall = slowest + 0.05 + np.random.default_rng(seed + 7 * rank).uniform(0, 0.01, steps)
        cols = {
            S.STEP: np.arange(steps, dtype=np.int64),
            S.RANK: np.full(steps, rank, np.int32),
            S.START_UNIX_NS: 1_700_000_000_000_000_000 + np.arange(steps, dtype=np.int64) * 40_000_000,
            S.WALL_MS: wall,
            **phases,
            S.SYNC_MS: wall - work,
            S.GPU_BUSY_MS: (phases[S.FORWARD_MS] + phases[S.BACKWARD_MS] + phases[S.OPTIMIZER_MS]) * 0.9
            if gpu
            else None,
            S.BATCH_SAMPLES: np.full(steps, 32, np.int64),
            S.PEAK_MEM_BYTES: np.full(steps, (8 + rank % 3) << 30, np.int64) if rank % 2 == 0 else None,
        }
        run = RunInfo(world_size=world or ranks, rank=rank, host=f"node{rank // 8}", device="cuda" if gpu else "cpu")
        schema = S.arrow_schema(run)
        arrays = [
            _nulls(steps, f.type) if cols.get(f.name) is None else pa.array(cols[f.name], type=f.type) for f in S.FIELDS
        ]
        table = pa.Table.from_arrays(arrays, schema=schema)
        path = directory / f"trace.rank{rank}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            w.write_table(table, max_chunksize=batch_rows)
            w.write_batch(
                pa.RecordBatch.from_pylist([], schema=schema),
                custom_metadata={S.END_KEY: encode(EndInfo(status="ok", steps=steps))},
            )
        paths.append(path)
    return paths
