"""Out-of-core analysis of many ranks: the same metrics, stragglers and verdict as the plain in-memory
definitions (tests/metrics_oracle.py), whatever the engine, sample size, store budget or block size."""

import json
import logging
import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import analyzer.analysis.quantiles as quantiles
import analyzer.analysis.ranks as ranks
from analyzer import ReadOptions, analyze
from analyzer.cli import app
from analyzer.measure.inputs import measure
from analyzer.measure.rank_tasks import FileJob, run_file
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import make_row, write_trace
from tests.kineto_fixtures import two_step_trace, write
from tests.metrics_oracle import oracle
from tests.scale_fixtures import write_ranks

runner = CliRunner()


def _close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def assert_matches_oracle(m, want):
    v = want.values
    assert (m.steps, m.ranks, m.warmup_steps) == (v["steps"], v["ranks"], v["warmup_steps"])
    assert (m.accounting.rows, m.accounting.warmup, m.accounting.profiler_windows) == (
        v["rows"],
        v["warmup"],
        v["profiler_windows"],
    )
    for key in ("step_median_ms", "step_p90_ms", "step_mean_ms", "busy_mean_ms", "gpu_util", "idle_unexplained"):
        assert _close(getattr(m, key), v[key]), key
    for key in ("batch_samples", "samples_per_s"):
        assert _close(getattr(m, key), v[key]), key
    assert m.peak_mem_bytes == v["peak_mem_bytes"]
    for key in ("breakdown_ms", "mean_ms", "share", "effective"):
        got = getattr(m, key)
        assert got.keys() == v[key].keys()
        for part in got:
            assert _close(got[part], v[key][part]), (key, part)
    ps = m.per_step.sort("step")
    assert ps.height == want.per_step.height
    for column in want.per_step.columns:
        for a, b in zip(ps.get_column(column).to_list(), want.per_step.get_column(column).to_list(), strict=True):
            assert _close(a, b), column
    d = m.distributed
    if want.skew is None:
        assert d is None
        return
    assert _close(d.skew_median_ms, want.skew)
    got = [(s.rank, s.steps_slow, s.steps, s.excess_ms, s.phase, s.phase_excess_ms) for s in d.stragglers]
    assert [g[:3] + g[4:5] for g in got] == [w[:3] + w[4:5] for w in want.stragglers]
    for g, w in zip(got, want.stragglers, strict=True):
        assert _close(g[3], w[3]) and _close(g[5], w[5])
    summaries = [(r.rank, r.steps, r.step_median_ms, r.work_median_ms, r.sync_share, r.data_share) for r in d.per_rank]
    assert len(summaries) == len(want.per_rank)
    for g, w in zip(summaries, want.per_rank, strict=True):
        assert g[:2] == w[:2] and all(_close(a, b) for a, b in zip(g[2:], w[2:], strict=True))
    if want.kernels is None:
        assert m.kernels is None
    else:
        km = m.kernels
        assert (km.steps, km.kernel_count) == (want.kernels["steps"], want.kernels["kernel_count"])
        assert _close(km.kernel_median_us, want.kernels["kernel_median_us"]) and _close(
            km.wall_ms, want.kernels["wall_ms"]
        )
        assert all(_close(km.totals_ms[f], want.kernels["totals_ms"][f]) for f in km.totals_ms)
        assert [n for n, _, _ in km.top_kernels] == want.kernels["top"]


def _check(path, **kw):
    got = measure(path, **kw)
    want = oracle(load_any(path))
    assert_matches_oracle(got.metrics, want)
    return got


@pytest.fixture
def tight(monkeypatch):
    """Sketches of 8 values (a second quantile pass), a 1 KB work store (spills to disk), 1 KB blocks."""
    monkeypatch.setattr(quantiles, "SAMPLE", 8)
    monkeypatch.setattr(ranks, "STORE_BUDGET", 1024)
    monkeypatch.setattr(ranks, "BLOCK_BUDGET", 1024)


def test_out_of_core_equals_the_in_memory_definitions(tmp_path, tight):
    # rank 4 arrives 2 ms after rank 2 on nearly every step: rank 2 is not among the last there
    write_ranks(tmp_path, 6, 300, stragglers={2: ("forward", 2.0), 4: ("other", 4.0)})
    got = _check(tmp_path)
    assert [(s.rank, s.phase) for s in got.metrics.distributed.stragglers] == [(4, "other")]


def test_gpu_timings_and_uneven_ranks(tmp_path, tight):
    write_ranks(tmp_path, 5, 200, gpu=True, stragglers={1: ("data", 5.0)}, world=7)
    # a rank with fewer steps (its own warm-up: 2 of 25), written out of order (the reader sorts it, so the
    # quantile pass loads it again); one with a gap in its step numbers and a NaN phase (read raw, NaN as null)
    short = [make_row(i, rank=5, wall=30.0, busy=20.0, sync=12.0) for i in range(25)]
    write_trace(tmp_path / "trace.rank5.arrow", short[::-1], run={"world_size": 7, "rank": 5})
    gappy = [make_row(i, rank=6, wall=31.0, busy=21.0, sync=10.0) for i in (*range(50), *range(300, 320))]
    gappy[10][S.DATA_WAIT_MS] = math.nan
    write_trace(tmp_path / "trace.rank6.arrow", gappy, run={"world_size": 7, "rank": 6})
    results = {
        Path(r.source).name: r for r in (run_file(FileJob(str(p), False, skip=2)) for p in tmp_path.glob("*.arrow"))
    }
    assert not results["trace.rank5.arrow"].fast and results["trace.rank6.arrow"].fast
    _check(tmp_path)


def test_sampled_windows_across_ranks(tmp_path, tight):
    """Rows with kernel statistics are kernel evidence only when other rows are not sampled."""
    stats = json.dumps(
        {
            "gpu_busy_ms": 5.0,
            "kernel_count": 3,
            "kernel_median_us": 12.0,
            "gemm_simt_fp32_ms": 4.0,
            "top_kernels": [{"name": "volta_sgemm", "total_ms": 4.0, "count": 2}],
        }
    )
    for rank in range(3):
        rows = [make_row(i, rank=rank, wall=20.0 + rank, busy=15.0) for i in range(40)]
        for i in range(10, 40, 7):
            rows[i]["kernel_stats"] = stats.replace("12.0", str(10.0 + i + rank))
        write_trace(tmp_path / f"trace.rank{rank}.arrow", rows, run={"world_size": 3, "rank": rank})
    got = _check(tmp_path)
    assert got.metrics.sampled_steps > 0 and got.metrics.kernels is not None


def test_imported_kineto_ranks(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for r in range(3):
        write(run / f"rank{r}.json", two_step_trace(rank=r, world=3))
    _check(run)


def test_the_verdict_is_the_in_memory_verdict(tmp_path, tight):
    write_ranks(tmp_path, 4, 120, stragglers={3: ("other", 6.0)})
    out_of_core = analyze(tmp_path)
    in_memory = analyze(load_any(tmp_path))
    assert out_of_core.bottleneck == in_memory.bottleneck == "sync"
    assert [f.cause for f in out_of_core.findings] == [f.cause for f in in_memory.findings]
    assert out_of_core.confidence == in_memory.confidence


def test_a_straggler_slow_outside_every_phase_is_blamed_on_other(tmp_path):
    """Issue 15: 97% of the excess un-instrumented used to be called 'forward'."""
    write_ranks(tmp_path, 4, 60, stragglers={1: ("other", 9.7), 2: ("forward", 0.0)})
    data = json.loads(runner.invoke(app, [str(tmp_path), "--json"]).output)
    assert [(s["rank"], s["phase"]) for s in data["stragglers"]] == [(1, "other")]
    assert data["stragglers"][0]["phase_excess_ms"] == pytest.approx(9.7, abs=0.3)
    sync = next(f for f in data["findings"] if f["bottleneck"] == "sync")
    assert "outside forward, backward, optimizer and data" in sync["recommendations"][0]


def test_unreadable_and_foreign_files_in_a_directory_are_skipped_with_a_note(tmp_path, monkeypatch):
    write_ranks(tmp_path, 3, 40)
    (tmp_path / "notes.json").write_text('{"not": "a trace"}')
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "zero.json.gz").symlink_to("/dev/zero")
    locked = tmp_path / "trace.rank2.arrow"
    if os.geteuid() == 0:  # root reads mode-000 files: make the reader see what a user would
        import analyzer.measure.rank_tasks as tasks

        def denied(real):
            def load(path):
                if str(path) == str(locked):
                    raise PermissionError(13, "Permission denied", str(path))
                return real(path)

            return load

        for reader in ("load_columns", "load_trace"):  # the fast path and the reader both open the file
            monkeypatch.setattr(tasks, reader, denied(getattr(tasks, reader)))
    else:
        locked.chmod(0)
    result = runner.invoke(app, [str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    notes = json.loads(result.output)["notes"]
    assert "skipped trace.rank2.arrow: cannot read (Permission denied)" in notes
    assert any(n.startswith("skipped notes.json:") for n in notes)
    assert "skipped pipe.json: not a regular file" in notes and "skipped zero.json.gz: not a regular file" in notes
    assert any("1 of 3 rank(s) have no trace here (ranks 2)" in n for n in notes)


def test_an_unreadable_trace_file_is_one_line(tmp_path, monkeypatch):
    import gpuanalyze.ingest.sources as sources_module
    import gpuanalyze.ingest.trace.columns as columns_module

    path = write_trace(tmp_path / "t.arrow", [make_row(i) for i in range(5)])

    def denied(p):
        raise PermissionError(13, "Permission denied", str(p))

    # measure reads one file through the column reader (which gives None for an unreadable file), then
    # through sources.load_file, which says why
    monkeypatch.setattr(columns_module, "map_file", denied)
    monkeypatch.setattr(sources_module, "load_trace", denied)
    result = runner.invoke(app, [str(path)])
    assert (
        result.exit_code == 2 and result.output.strip() == f"gpuanalyze: error: {path}: cannot read (Permission denied)"
    )


def test_a_directory_of_only_unreadable_files_is_one_line(tmp_path):
    (tmp_path / "a.json").write_text("[1, 2]")
    (tmp_path / "b.arrow").write_text("nope")
    result = runner.invoke(app, [str(tmp_path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_64_ranks_by_2000_steps_on_the_process_pool(tmp_path):
    """64 ranks x 2,000 steps, analysed equally on two worker processes (the local engine's pool)."""
    write_ranks(tmp_path, 64, 2000, stragglers={7: ("forward", 4.0), 21: ("other", 5.0), 40: ("data", 3.0)})
    got = _check(tmp_path, workers=2)
    named = [(s.rank, s.phase) for s in got.metrics.distributed.stragglers]
    # rank 21 arrives last; rank 7, 1 ms earlier, is among the last on about half the steps
    assert named[0] == (21, "other") and set(named) <= {(21, "other"), (7, "forward")}
    assert analyze(tmp_path, ReadOptions(workers=2)).bottleneck == analyze(load_any(tmp_path)).bottleneck == "sync"


@pytest.mark.slow
def test_ray_engine_gives_the_local_result(tmp_path):
    """A local Ray limited to 2 CPUs; skipped when Ray is not installed or cannot start here."""
    ray = pytest.importorskip("ray")
    try:  # one local Ray for the whole test: engines find it initialised and leave it running
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types when it cannot start
        pytest.skip(f"Ray cannot start here: {exc}")
    try:
        _ray_checks(tmp_path)
    finally:
        ray.shutdown()


def _ray_checks(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    write_ranks(runs, 8, 300, stragglers={5: ("backward", 4.0)})
    kineto = tmp_path / "kineto"
    kineto.mkdir()
    for r in range(3):
        write(kineto / f"rank{r}.json", two_step_trace(rank=r, world=3))
    for path in (runs, kineto):
        local = measure(path)
        ray = measure(path, engine="ray", workers=2)
        assert ray.metrics.distributed == local.metrics.distributed
        assert ray.metrics.share == local.metrics.share and ray.metrics.kernels == local.metrics.kernels
        assert ray.run == local.run and ray.notes == local.notes
    from analyzer.api import report_parts
    from tests.test_report_scale import assert_same_charts

    ray_report, ray_charts = report_parts(runs, ReadOptions(engine="ray", workers=2))  # the chart pass as Ray tasks
    local_report, local_charts = report_parts(runs)
    assert ray_report.bottleneck == local_report.bottleneck
    assert_same_charts(ray_charts, local_charts)
    out = tmp_path / "out"
    out.mkdir()
    result = runner.invoke(app, ["import", str(kineto), "-o", str(out), "--engine", "ray", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["rank0.arrow", "rank1.arrow", "rank2.arrow"]
