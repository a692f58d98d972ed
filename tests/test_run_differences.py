"""`compare` says when two traces are two different jobs, not one job's before/after."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from analyzer.cli import app
from tests.conftest import make_row, write_trace

runner = CliRunner()


def _trace(path, *, models, world, run_id, batch, data=15.0):
    rows = [make_row(i, wall=20.0, data=data) for i in range(30)]
    for r in rows:
        r["batch_samples"] = batch
    run = {"models": models, "world_size": world, "rank": 0, "run_id": run_id, "gpu_name": "NVIDIA H100 80GB HBM3"}
    return write_trace(path, rows, run=run)


def test_two_unrelated_jobs_are_said_to_differ(tmp_path):
    a = _trace(tmp_path / "a.arrow", models=["ResNet"], world=1, run_id="r1", batch=32)
    b = _trace(tmp_path / "b.arrow", models=["GPT2"], world=1, run_id="r2", batch=64, data=1.0)
    result = runner.invoke(app, ["compare", str(a), str(b), "--width", "200"])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "model: ResNet vs GPT2" in flat and "batch: 32 samples vs 64 samples" in flat
    assert "run id: r1 vs r2" in flat and "two different jobs" in flat
    data = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--json"]).output)
    assert "model: ResNet vs GPT2" in data["differences"] and data["projection_checks"] == []


def test_one_job_before_and_after_is_not_called_two_jobs(tmp_path):
    a = _trace(tmp_path / "a.arrow", models=["ResNet"], world=1, run_id="r1", batch=32)
    b = _trace(tmp_path / "b.arrow", models=["ResNet"], world=1, run_id="r2", batch=32, data=1.0)
    result = runner.invoke(app, ["compare", str(a), str(b), "--width", "200"])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "two different jobs" not in flat and "run id: r1 vs r2" in flat


def test_world_size_differs(tmp_path):
    a = _trace(tmp_path / "a.arrow", models=["M"], world=1, run_id="r1", batch=32)
    b = _trace(tmp_path / "b.arrow", models=["M"], world=8, run_id="r2", batch=32)
    data = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--json"]).output)
    assert "world size: 1 vs 8" in data["differences"]


def test_a_cpu_run_against_an_accelerator_run_says_so(tmp_path):
    """The bundled CPU and H200 samples record no GPU name on the CPU side: the device differs all the same."""
    from tests.conftest import SAMPLES

    args = ["compare", str(SAMPLES / "cpu_data_loading.arrow"), str(SAMPLES / "h200_data_loading.arrow"), "--json"]
    data = json.loads(runner.invoke(app, args).output)
    assert "device: cpu vs cuda" in data["differences"]  # was no difference at all
