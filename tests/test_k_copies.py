"""A capture K times longer (its timeline repeated back to back: benchmarks/k_copies.py) is the same run for longer:
the same verdict and a mean step time within 5% for K = 1, 10, 100, with every size bound crossed on the way
(the iteration search's is made small here, so K = 100 runs past it)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import msgspec
import pytest

from analyzer.api import analyze
from benchmarks.k_copies import one_process, repeat_kineto, repeat_nsys
from gpuanalyze.ingest.nsys.load import load_nsys_ranks
from gpuanalyze.ingest.timeline import iterations
from tests.conftest import SHARED
from tests.kineto_fixtures import loader_bound_trace, write
from tests.nsys_fixtures import Export, build_export

KS = (1, 10, 100)


def _step_less(doc: dict) -> dict:
    return {**doc, "traceEvents": [e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep#")]}


def _captures(tmp: Path) -> dict[str, tuple[Path, object]]:
    nsys = build_export(tmp / "two_ranks.sqlite", Export(pids=(100, 101), steps=12, step_name=None, host=True))
    doc = loader_bound_trace(3000.0, steps=12)
    return {
        "nsys, iterations of 2 ranks": (nsys, repeat_nsys),
        "kineto, ProfilerSteps": (write(tmp / "steps.json", doc), repeat_kineto),
        "kineto, iterations": (write(tmp / "loop.json", _step_less(doc)), repeat_kineto),
    }


@pytest.mark.parametrize("which", ["nsys, iterations of 2 ranks", "kineto, ProfilerSteps", "kineto, iterations"])
def test_a_capture_repeated_k_times_keeps_its_verdict_and_step_time(tmp_path, monkeypatch, which):
    monkeypatch.setattr(iterations, "MAX_TOP_OPS", 200)  # K = 100 holds about 3,600 top-level ops per rank
    src, repeat = _captures(tmp_path)[which]
    got = {}
    for k in KS:
        report = analyze(repeat(src, tmp_path / f"x{k}{''.join(src.suffixes)}", k))
        got[k] = (report.bottleneck, report.metrics.step_mean_ms, report.notes)
    assert {v[0] for v in got.values()} == {got[1][0]} and got[1][0] != "unknown"
    for k in KS:
        assert got[k][1] == pytest.approx(got[1][1], rel=0.05), (k, got[k][1], got[1][1])
    if "iterations" in which:
        assert any("chosen among the first 200 top-level ops, checked on all" in n for n in got[100][2])
        assert not any("chosen among" in n for n in got[1][2])


def test_nsys_copies_shift_times_and_correlation_ids_and_keep_strings(tmp_path):
    src = build_export(tmp_path / "a.sqlite", Export(pids=(100, 101), steps=3, host=True))
    out = repeat_nsys(src, tmp_path / "x3.sqlite", 3)
    a, b = sqlite3.connect(src), sqlite3.connect(out)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API"):
        assert (
            b.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            == 3 * a.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        )
    for table in ("StringIds", "ThreadNames"):
        assert b.execute(f"SELECT * FROM {table}").fetchall() == a.execute(f"SELECT * FROM {table}").fetchall()
    pairs = b.execute("SELECT globalTid >> 24, correlationId, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1, 2")
    assert {n for *_, n in pairs} == {1}  # a process's correlation ids stay unique
    lo, hi = a.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    assert b.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] == lo
    assert b.execute("SELECT max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] > lo + 2 * (hi - lo)


def test_kineto_copies_renumber_steps_and_shift_ids(tmp_path):
    src = write(tmp_path / "a.json", loader_bound_trace(1000.0, steps=3))
    events = msgspec.json.decode(repeat_kineto(src, tmp_path / "x4.json", 4).read_bytes())["traceEvents"]
    steps = [e["name"] for e in events if e["name"].startswith("ProfilerStep#")]
    assert len(steps) == len(set(steps)) == 12
    corr = [e["args"]["correlation"] for e in events if e["cat"] == "kernel"]
    assert len(corr) == len(set(corr)) == 12
    starts = sorted(e["ts"] for e in events if e["cat"] == "kernel")
    assert starts == sorted(starts) and starts[-1] > 3 * 30_000


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "nsys_traces").is_dir(), reason="../shared/nsys_traces is not here")
def test_the_shared_two_rank_export_repeated_keeps_its_verdict_and_step_time(tmp_path):
    src = SHARED / "nsys_traces" / "nsysai_mfu_train_2gpu_before.sqlite"
    got = {k: analyze(repeat_nsys(src, tmp_path / f"x{k}.sqlite", k)) for k in KS}
    assert {r.bottleneck for r in got.values()} == {got[1].bottleneck}
    for k in KS:
        assert got[k].metrics.step_mean_ms == pytest.approx(got[1].metrics.step_mean_ms, rel=0.05)


def test_ranks_relabelled_as_one_process_are_read_as_one_with_every_thread(tmp_path):
    """The benchmark's worst case for one conversion (nsys_import.py --one-process): every rank's rows under one pid,
    its threads kept apart, read as one trace."""
    path = build_export(tmp_path / "two.sqlite", Export(pids=(100, 101), steps=6, step_name=None))
    count = "SELECT count(*), count(DISTINCT (globalPid >> 24) & 16777215) FROM CUPTI_ACTIVITY_KIND_KERNEL"
    threads = "SELECT count(DISTINCT globalTid), count(DISTINCT globalTid >> 24) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
    with sqlite3.connect(path) as conn:
        (kernels, pids), (tids, _) = conn.execute(count).fetchone(), conn.execute(threads).fetchone()
    assert pids == 2 and len(load_nsys_ranks(path)) == 2
    assert one_process(path) == [100, 101]
    with sqlite3.connect(path) as conn:
        assert conn.execute(count).fetchone() == (kernels, 1)
        assert conn.execute(threads).fetchone() == (tids, 1)
    (merged,) = load_nsys_ranks(path)
    assert merged.run.world_size == 1 and merged.frame.height > 0


@pytest.mark.slow
def test_a_directory_of_long_rank_captures_gives_the_local_answer_on_ray(tmp_path, monkeypatch):
    """Four ranks' Kineto traces, each 200 copies of a 12-step loader-bound run, imported by Ray tasks (one file a
    worker at a time: each worker holds one rank's events): the local engine's metrics, run and notes."""
    ray = pytest.importorskip("ray")
    from analyzer.measure.inputs import measure

    monkeypatch.setenv("GPUANALYZE_CACHE", str(tmp_path / "cache"))
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in range(4):
        doc = {**loader_bound_trace(2000.0 + 500 * r, steps=12), "distributedInfo": {"rank": r, "world_size": 4}}
        repeat_kineto(write(tmp_path / f"src{r}.json", doc), ranks / f"rank{r}.json", 200)
    try:  # one local Ray for the test: the engine finds it initialised
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types when it cannot start
        pytest.skip(f"Ray cannot start here: {exc}")
    try:
        local, remote = measure(ranks, workers=2), measure(ranks, engine="ray", workers=2)
    finally:
        ray.shutdown()
    assert remote.metrics.distributed == local.metrics.distributed and remote.metrics.accounting.rows == 4 * 12 * 200
    assert remote.metrics.share == local.metrics.share and remote.metrics.kernels == local.metrics.kernels
    assert remote.run == local.run and remote.notes == local.notes
    assert analyze(ranks).bottleneck == "data_loading"
