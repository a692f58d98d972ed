import dataclasses

import numpy as np
import polars as pl
import pytest

from analyzer.api import analyze
from analyzer.render import chart_data as cd
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace
from tests.conftest import make_row
from tests.report_helpers import kernel_stats, synthetic_trace


def test_small_run_is_drawn_step_by_step(trace_factory):
    rows = [make_row(i, wall=40.0 if i == 25 else 20.0, data=5.0) for i in range(30)]
    trace = load_trace(trace_factory(rows))
    report = analyze(trace)
    data = cd.chart_data(trace, report)
    s = data.steps
    assert s.width == 1 and s.step.tolist() == list(range(30))
    assert s.parts[S.DATA_WAIT_MS].tolist() == [5.0] * 30
    assert S.H2D_MS not in s.parts  # unknown parts are not drawn as zero
    assert s.warmup_last_step == report.metrics.warmup_steps - 1 and s.windows == ()
    assert s.busy_share is None
    d = data.distribution
    assert d.counts.sum() == report.metrics.accounting.analysed
    assert d.outliers == 1 and d.top == ((0, 25, 40.0),)
    assert data.heatmap is None


def test_long_many_rank_run_is_binned_within_the_limits():
    trace = synthetic_trace(ranks=300, steps=2000, straggler=7)
    report = analyze(trace)
    data = cd.chart_data(trace, report)
    s = data.steps
    assert len(s.step) <= cd.MAX_POINTS and s.width == 2
    frame = trace.frame
    first_bin = frame.filter(pl.col(S.STEP) < 2)
    assert s.wall[0] == pytest.approx(first_bin.get_column(S.WALL_MS).mean(), rel=1e-5)
    assert s.parts[S.FORWARD_MS][0] == pytest.approx(first_bin.get_column(S.FORWARD_MS).mean(), rel=1e-5)
    busy = first_bin.get_column(S.GPU_BUSY_MS).sum() / first_bin.get_column(S.WALL_MS).sum()
    assert s.busy_share is not None and s.busy_share[0] == pytest.approx(busy, rel=1e-5)
    h = data.heatmap
    assert h is not None and h.wall.size <= cd.MAX_CELLS and h.wall.dtype == np.float32
    assert h.ranks.tolist() == list(range(300)) and h.stragglers == (7,)
    cell = frame.filter((pl.col(S.RANK) == 7) & (pl.col(S.STEP) < h.width))
    assert h.wall[7, 0] == pytest.approx(cell.get_column(S.WALL_MS).mean(), rel=1e-5)
    assert h.wait is not None and h.wait[7, 0] == pytest.approx(cell.get_column(S.SYNC_MS).mean(), rel=1e-5)
    assert not np.isnan(h.wall).any()


def test_profiler_windows_are_marked(trace_factory):
    rows = [make_row(i, busy=10.0) for i in range(40)]
    for i in (20, 21, 22, 35):
        rows[i]["kernel_stats"] = kernel_stats("k")
    trace = load_trace(trace_factory(rows))
    report = analyze(trace)
    assert report.metrics.accounting.profiler_windows == 4
    data = cd.chart_data(trace, report)
    assert data.steps.windows == ((20, 22), (35, 35))
    assert data.distribution.counts.sum() == report.metrics.accounting.analysed


def test_far_outliers_do_not_squash_the_histogram(trace_factory):
    rows = [make_row(i, wall=20.0 + (i % 5) * 0.1) for i in range(100)]
    rows[60] = make_row(60, wall=5000.0)
    trace = load_trace(trace_factory(rows))
    d = cd.chart_data(trace, analyze(trace)).distribution
    assert d.edges[-1] < 100 and d.beyond == 1 and d.max_ms == 5000.0
    assert d.top[0] == (0, 60, 5000.0)


def _slow_warmup(trace, skip, ms=28_000.0):
    """The first ``skip`` steps of every rank take ``ms`` (a compile), in forward."""
    warm = pl.col(S.STEP) < skip
    frame = trace.frame.with_columns(
        pl.when(warm).then(ms).otherwise(pl.col(S.WALL_MS)).alias(S.WALL_MS),
        pl.when(warm).then(ms - 15.0).otherwise(pl.col(S.FORWARD_MS)).alias(S.FORWARD_MS),
    )
    return dataclasses.replace(trace, frame=frame)


@pytest.mark.parametrize("steps", [60, 6000])  # drawn step by step, and binned (the first bin holds warm-up)
def test_warmup_is_drawn_but_left_out_of_the_step_charts_scale(steps):
    skip = analyze(synthetic_trace(ranks=4, steps=steps)).metrics.warmup_steps
    assert skip > 0
    trace = _slow_warmup(synthetic_trace(ranks=4, steps=steps), skip)
    report = analyze(trace)
    s = cd.chart_data(trace, report).steps
    assert s.wall[0] > 1000  # the warm-up is still drawn
    assert 20.0 <= s.y_max < 40.0  # ~20 ms steps: the axis is theirs, not the 28 s warm-up's
    assert s.warmup_max is not None and s.warmup_max > 1000  # and the chart says it clipped it


def test_without_a_slow_warmup_nothing_is_clipped():
    trace = synthetic_trace(ranks=4, steps=60)
    s = cd.chart_data(trace, analyze(trace)).steps
    assert s.warmup_max is None and 20.0 <= s.y_max < 25.0


def test_warmup_columns_are_left_out_of_the_heatmaps_colour_scale():
    pytest.importorskip("plotly")
    from analyzer.render import html_charts

    base = synthetic_trace(ranks=4, steps=60)
    skip = analyze(base).metrics.warmup_steps
    trace = _slow_warmup(base, skip)
    report = analyze(trace)
    heat = cd.chart_data(trace, report).heatmap
    assert heat is not None and heat.warmup_columns == skip and heat.width == 1
    fig = html_charts.heatmap(heat, heat.wall, "step time", "Viridis")
    assert fig.data[0].zmax < 40.0 and np.nanmax(heat.wall) > 1000
    assert "warm-up columns clipped" in fig.layout.title.text
    step_fig = html_charts.step_time(cd.chart_data(trace, report).steps, report)
    assert step_fig.layout.yaxis.range[1] < 40.0
    assert any("warm-up (clipped: up to 28,000 ms)" in (a.text or "") for a in step_fig.layout.annotations)
