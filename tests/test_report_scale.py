"""The report of a directory of ranks, drawn out of core: the chart data equals the in-memory one."""

import dataclasses
import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

import analyzer.analysis.quantiles as quantiles
from analyzer.api import chart_data_for, report_parts
from analyzer.cli import app
from analyzer.errors import TraceError
from analyzer.render.chart_data import ChartData
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import make_row, write_trace
from tests.scale_fixtures import write_ranks

runner = CliRunner()


def assert_same_charts(got: ChartData, want: ChartData) -> None:
    for part in ("steps", "distribution", "heatmap"):
        a, b = getattr(got, part), getattr(want, part)
        assert (a is None) == (b is None), part
        if a is None:
            continue
        for f in dataclasses.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(x, dict):
                assert x.keys() == y.keys(), (part, f.name)
                for k in x:
                    np.testing.assert_allclose(x[k], y[k], rtol=1e-6, err_msg=f"{part}.{f.name}.{k}")
            elif isinstance(x, np.ndarray):
                assert x.dtype == y.dtype and x.shape == y.shape, (part, f.name)
                if x.dtype.kind == "f":  # means summed over ranks in another order: float32 rounding at most
                    np.testing.assert_allclose(x, y, rtol=1e-6, equal_nan=True, err_msg=f"{part}.{f.name}")
                else:
                    assert np.array_equal(x, y), (part, f.name)
            else:
                assert x == y, (part, f.name)


@pytest.fixture
def small_sketches(monkeypatch):
    """Sketches of 8 values: the quartiles of the outlier fence come from the second quantile pass."""
    monkeypatch.setattr(quantiles, "SAMPLE", 8)


def _uneven_ranks(tmp_path):
    write_ranks(tmp_path, 5, 3000, gpu=True, stragglers={1: ("data", 5.0), 3: ("other", 9.0)}, world=7)
    # a short rank written out of order (the reader sorts it), one with a gap, a NaN phase and a slow step
    short = [make_row(i, rank=5, wall=30.0, busy=20.0, sync=12.0) for i in range(25)]
    write_trace(tmp_path / "trace.rank5.arrow", short[::-1], run={"world_size": 7, "rank": 5})
    gappy = [make_row(i, rank=6, wall=31.0, busy=21.0, sync=10.0) for i in (*range(50), *range(2900, 3100))]
    gappy[10][S.DATA_WAIT_MS] = math.nan
    gappy[120][S.WALL_MS] = 900.0
    write_trace(tmp_path / "trace.rank6.arrow", gappy, run={"world_size": 7, "rank": 6})


def _sampled_windows(tmp_path):
    stats = json.dumps({"gpu_busy_ms": 5.0, "kernel_count": 3, "kernel_median_us": 12.0, "gemm_simt_fp32_ms": 4.0})
    for rank in range(3):
        rows = [make_row(i, rank=rank, wall=20.0 + rank + (i % 7) * 0.5, busy=15.0) for i in range(400)]
        for i in (*range(100, 110), *range(300, 400, 9)):
            rows[i]["kernel_stats"] = stats
        write_trace(tmp_path / f"trace.rank{rank}.arrow", rows, run={"world_size": 3, "rank": rank})


@pytest.mark.parametrize("make", [_uneven_ranks, _sampled_windows])
def test_out_of_core_chart_data_equals_the_in_memory_chart_data(tmp_path, small_sketches, make):
    make(tmp_path)
    report, data = report_parts(tmp_path)
    in_memory, want = report_parts(load_any(tmp_path))
    assert report.bottleneck == in_memory.bottleneck and report.metrics.accounting == in_memory.metrics.accounting
    assert_same_charts(data, want)
    assert data.distribution.counts.sum() + data.distribution.beyond == report.metrics.accounting.analysed
    assert data.heatmap is not None and data.heatmap.ranks.tolist() == sorted(load_any(tmp_path).frame["rank"].unique())


def test_the_outliers_are_the_slowest_analysed_steps(tmp_path):
    _uneven_ranks(tmp_path)
    report, data = report_parts(tmp_path)
    d = data.distribution
    assert d.top[0] == (6, 2970, 900.0) and d.max_ms == 900.0 and d.beyond >= 1
    assert d.fence_ms >= 1.1 * report.metrics.step_median_ms


def test_gpuanalyze_report_dir_runs_out_of_core_on_workers(tmp_path):
    pytest.importorskip("plotly")
    run = tmp_path / "run"
    run.mkdir()
    write_ranks(run, 4, 400, stragglers={2: ("other", 6.0)})
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(run), "--engine", "local", "--workers", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert 'data-chart="heat-step"' in page and 'data-chart="distribution"' in page
    assert "verdict sync" in result.output


def test_charts_of_a_trace_that_changed_since_the_analysis_are_refused(tmp_path):
    write_ranks(tmp_path, 3, 80)
    report, _ = report_parts(tmp_path)
    write_ranks(tmp_path, 3, 60)
    with pytest.raises(TraceError, match="changed since it was analysed"):
        chart_data_for(report)
