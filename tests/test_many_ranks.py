"""Thousands of tiny rank files are read once, by the pool (the time figure is
benchmarks/many_ranks.py's: 3,000 files took 96 s, now under 30 s on the 2-core machine)."""

from __future__ import annotations

import analyzer.measure.inputs as measure
import analyzer.measure.rank_tasks as tasks
from analyzer.measure import storage
from analyzer.measure.rank_tasks import run_file
from gpuanalyze.ingest.trace.byte_source import ReadLimits
from tests.kineto_fixtures import two_step_trace, write


def test_equal_short_ranks_are_reduced_in_one_pass(tmp_path, monkeypatch):
    d = tmp_path / "ranks"
    d.mkdir()
    n = 12
    for r in range(n):
        write(d / f"rank{r}.json", two_step_trace(rank=r, world=n))
    calls = []

    def counted(job):
        calls.append(job.source)
        return run_file(job)

    monkeypatch.setattr(tasks, "run_file", counted)  # what each task (rank_tasks.run_files) runs per file
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    got = measure.measure(str(d))
    assert len(calls) == n  # a second pass with the shorter warm-up read every file again
    assert got.metrics.ranks == n
    # the same numbers as the in-memory path, which never needed a second pass
    from analyzer.analysis.road import trace_road
    from gpuanalyze.ingest.sources import load_any

    ref = trace_road(load_any(d)).metrics
    assert got.metrics.step_median_ms == ref.step_median_ms and got.metrics.warmup_steps == ref.warmup_steps


def test_many_small_files_use_the_pool():
    small = [
        storage.Entry(name=f"rank{i}.json", path=f"/x/rank{i}.json", size=800, mtime_ns=0, regular=True)
        for i in range(3000)
    ]
    few = small[:10]
    assert measure._workers(small, "local", None) is None  # the engine's default: every core
    assert measure._workers(few, "local", None) == 1


def _ranks(tmp_path, n=4):
    d = tmp_path / "ranks"
    d.mkdir()
    for r in range(n):
        write(d / f"rank{r}.json", two_step_trace(rank=r, world=n))
    return d


def test_import_cache_entries_are_written_without_a_per_file_fsync(tmp_path, monkeypatch):
    import os

    d = _ranks(tmp_path)
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    measure.measure(str(d))
    assert synced == []  # a torn cache entry is redone, it need not be durable
    out = tmp_path / "out"
    out.mkdir()
    (job,) = measure.file_jobs(storage.list_dir(str(d))[:1], str(out), ReadLimits(), skip=0, reduce=False, force=False)
    assert run_file(job).error is None and synced  # `gpuanalyze import -o DIR`: the user's files are synced


def test_a_reused_import_is_read_by_the_column_reader(tmp_path, monkeypatch):
    d = _ranks(tmp_path)
    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    first = measure.measure(str(d))

    def refused(*_a, **_k):
        raise AssertionError("a reused import went through load_trace (polars) again")

    monkeypatch.setattr(tasks, "load_trace", refused)
    second = measure.measure(str(d))
    assert second.metrics.step_median_ms == first.metrics.step_median_ms and second.metrics.ranks == 4
