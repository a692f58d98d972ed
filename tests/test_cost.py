import json

import pytest
from typer.testing import CliRunner

from analyzer import ReadOptions, analyze
from analyzer.cli import app
from analyzer.errors import GpuAnalyzeError
from analyzer.planning.cost import CostInputs, load_cost_config, run_cost
from tests.conftest import SAMPLES, make_row

runner = CliRunner()


def test_cost_per_run_arithmetic():
    c = run_cost(
        100.0, CostInputs(price_per_gpu_hour=2.0, steps_per_run=36_000, storage_usd=5.0), batch_samples=32, world_size=8
    )
    assert (c.hours_per_run, c.gpu_hours, c.gpu_usd, c.per_run_usd) == (1.0, 8.0, 16.0, 21.0)


def test_samples_become_steps():
    c = run_cost(1000.0, CostInputs(samples_per_run=3600 * 32), batch_samples=32, world_size=1)
    assert c.steps_per_run == 3600 and c.hours_per_run == pytest.approx(1.0) and c.per_run_usd is None


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"price_per_gpu_hour": -1.0}, "from 0 to"),
        ({"price_per_gpu_hour": float("nan")}, "from 0 to"),
        ({"steps_per_run": float("inf")}, "from 0 to"),
        ({"steps_per_run": "many"}, "from 0 to"),
        ({"steps_per_run": 0}, "positive"),
        ({"samples_per_run": 1e300}, "from 0 to"),
        ({"steps_per_run": 10, "samples_per_run": 10}, "once"),
        ({"gpus": 0}, "gpus"),
    ],
)
def test_bad_cost_inputs(kwargs, match):
    with pytest.raises(GpuAnalyzeError, match=match):
        CostInputs(**kwargs)


def test_toml_config_and_overrides(tmp_path):
    path = tmp_path / "cost.toml"
    path.write_text("price_per_gpu_hour = 1.5\nsteps_per_run = 1000\nrecovery_usd = 2.0\n")
    c = load_cost_config(path, price_per_gpu_hour=3.0)
    assert (c.price_per_gpu_hour, c.steps_per_run, c.other_usd) == (3.0, 1000, 2.0)
    path.write_text("price = 1\n")
    with pytest.raises(GpuAnalyzeError, match="unknown key"):
        load_cost_config(path)


def test_json_cost_and_savings_ranked(trace_factory):
    # 20 ms steps: 10 ms data wait, 5 ms sync -> data fix saves 10 ms, sync fix 5 ms per step
    path = trace_factory([make_row(i, wall=20.0, data=10.0, sync=5.0, fwd=2, bwd=2, opt=1) for i in range(20)])
    out = runner.invoke(
        app, [str(path), "--json", "--price-per-gpu-hour", "2", "--steps-per-run", "360000", "--gpus", "4"]
    )
    data = json.loads(out.output)
    assert data["cost"]["hours_per_run"] == pytest.approx(2.0) and data["cost"]["per_run_usd"] == pytest.approx(16.0)
    first, second = data["findings"]
    assert (first["bottleneck"], second["bottleneck"]) == ("data_loading", "sync")
    assert first["projected_step_time_ms"] == pytest.approx(10.0)
    assert first["savings"] == {"hours_per_run": 1.0, "gpu_hours_per_run": 4.0, "usd_per_run": 8.0}
    assert second["savings"]["hours_per_run"] == pytest.approx(0.5)


def test_run_length_without_batch_size_is_explained(trace_factory):
    path = trace_factory([make_row(i, samples=None) for i in range(5)])
    result = runner.invoke(app, [str(path), "--samples-per-run", "1000"])
    assert result.exit_code == 2 and "steps_per_run" in result.output


def test_mfu_against_the_datasheet():
    report = analyze(SAMPLES / "h200_fp32_compute.arrow", ReadOptions(flops_per_step=1.5e11))
    u = report.mfu
    assert u.precision == "float32" and u.datasheet_tflops == 67
    assert u.achieved_tflops == pytest.approx(1.5e11 / (report.metrics.step_mean_ms / 1e3) / 1e12)
    assert u.mfu_datasheet == pytest.approx(u.achieved_tflops / 67)
