import pytest

from analyzer import analyze
from analyzer.planning.cost import CostInputs
from tests.conftest import make_row

GB = 10**9


def _f(report, kind):
    return next(f for f in report.findings if f.bottleneck == kind)


def test_data_fix_is_bounded_by_gpu_busy(trace_factory):
    rows = [make_row(i, wall=20.0, data=15.0, busy=8.0) for i in range(20)]
    f = _f(analyze(trace_factory(rows)), "data_loading")
    assert f.projected_step_time_ms == pytest.approx(8.0) and "GPU-busy" in f.projection_rule


def test_data_fix_is_bounded_by_the_measured_loader_ceiling(trace_factory, tmp_path):
    import json

    from analyzer.machine.ceilings import load_ceilings

    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "backend": "cpu",
                "device": "x",
                "results": [{"benchmark": "dataloader", "variant": "pipeline", "value": 3200.0}],
            }
        )
    )
    rows = [make_row(i, wall=20.0, data=15.0, samples=32) for i in range(20)]
    f = _f(analyze(trace_factory(rows), ceilings=load_ceilings(path)), "data_loading")
    assert f.projected_step_time_ms == pytest.approx(10.0)  # 32 samples at 3200/s


def test_batch_projection_uses_memory_headroom(trace_factory):
    rows = [make_row(i, wall=20.0, busy=6.0, data=0.0, peak=10 * GB) for i in range(20)]
    f = _f(analyze(trace_factory(rows, run={"gpu_memory_bytes": 80 * GB})), "batch_size")
    assert f.projected_step_time_ms == pytest.approx(6.0 + 14.0 / 4)
    assert "x4" in f.projection_rule


def test_kernels_projection_from_the_datasheet_ratio(trace_factory):
    rows = [make_row(i, wall=20.0, busy=18.0) for i in range(20)]
    report = analyze(
        trace_factory(rows, run={"gpu_name": "NVIDIA H100 80GB HBM3", "param_dtype": "float32"}),
        cost=CostInputs(steps_per_run=1000),
    )
    f = _f(report, "kernels")
    ratio = 989 / 67
    assert f.projected_step_time_ms == pytest.approx(20.0 - 18.0 * (1 - 1 / ratio))
    assert f.savings_hours_per_run == pytest.approx(1000 * (20.0 - f.projected_step_time_ms) / 1e3 / 3600)


@pytest.mark.slow
def test_projection_comes_true_for_the_data_loader_fix():
    """The recommended num_workers, applied to the real loop, lands near the projection."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "projection_validation.py"), "--steps", "40"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    error = float(out.stdout.rsplit("prediction error:", 1)[1].strip().rstrip("%"))
    assert abs(error) <= 20, out.stdout
