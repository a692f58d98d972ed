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


def _kineto_steps(kernel: str, *, cpu_us: float, kernel_us: float, n: int = 12) -> dict:
    """``n`` steps of one GPU kernel each, after ``cpu_us`` of a CPU op that launches nothing (host work)."""
    from tests.kineto_fixtures import ev
    from tests.mechanism_fixtures import _doc

    events, step = [], cpu_us + kernel_us + 20
    for i in range(n):
        lo = i * step
        events.append(ev("user_annotation", f"ProfilerStep#{i}", lo, step))
        if cpu_us:
            events.append(ev("cpu_op", "aten::numpy_preprocess", lo + 1, cpu_us))
        events += [
            ev("cuda_runtime", "cudaLaunchKernel", lo + cpu_us + 2, 5, correlation=i + 1),
            ev("kernel", kernel, lo + cpu_us + 10, kernel_us, stream=7, correlation=i + 1),
        ]
    return _doc(events, "NVIDIA A100-SXM4-80GB", (8, 0))


def _differences(tmp_path, before: dict, after: dict) -> list[str]:
    from tests.kineto_fixtures import write

    a, b = write(tmp_path / "before.json", before), write(tmp_path / "after.json", after)
    result = runner.invoke(app, ["compare", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["differences"]


def test_compare_recognises_autocast_from_the_kernels(tmp_path):
    """Autocast leaves the parameters float32: the GEMMs moving to tensor cores say it (recognised nowhere before)."""
    fp32 = _kineto_steps("volta_sgemm_128x64_nn", cpu_us=0, kernel_us=980)
    bf16 = _kineto_steps("ampere_bf16_s16816gemm_bf16_128x128", cpu_us=0, kernel_us=400)
    assert _differences(tmp_path, fp32, bf16) == ["precision: GEMM/convolution time on tensor cores 0% -> 100%"]


def test_compare_recognises_autocast_from_what_the_recorder_saw(tmp_path):
    """A CPU run records no dtypes and its parameters stay float32 under autocast: the recorder's EndInfo.autocast
    says it (planning/run_differences.precision_change)."""
    from gpuanalyze.ingest.trace.runinfo import EndInfo

    rows = [make_row(i, wall=20.0, fwd=10.0) for i in range(30)]
    a = write_trace(tmp_path / "a.arrow", rows, end=EndInfo(status="ok", steps=30))
    b = write_trace(tmp_path / "b.arrow", rows, end=EndInfo(status="ok", steps=30, autocast="cpu:bfloat16"))
    data = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--json"]).output)
    assert "precision: autocast off -> cpu:bfloat16" in data["differences"]


def test_compare_recognises_removed_host_work(tmp_path):
    kernel = "ampere_bf16_s16816gemm_bf16_128x128"
    with_host = _kineto_steps(kernel, cpu_us=3000, kernel_us=980)
    without = _kineto_steps(kernel, cpu_us=0, kernel_us=980)
    assert _differences(tmp_path, with_host, without) == [
        "host work removed: GPU idle owned by CPU ops that launch no GPU work 3.00 -> 0.00 ms per step"
    ]
    # the unattributed host phase of a trace with phases (a per-step logging call taken out)
    a = write_trace(tmp_path / "a.arrow", [make_row(i, wall=30.0) for i in range(30)])
    b = write_trace(tmp_path / "b.arrow", [make_row(i, wall=19.0) for i in range(30)])
    data = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--json"]).output)
    assert "host work removed: unattributed host time 11.50 -> 0.50 ms per step" in data["differences"]


def test_compare_attributes_what_the_unchanged_phases_moved_to_the_machine(tmp_path):
    """A loader fix (data wait 40 -> 1 ms) measured on a quieter machine: forward and backward, which no
    recognised change touches, fell 70 -> 15 ms too; that part of the change is said to be the machine's."""
    rows = [make_row(i, wall=112.0, data=40.0, fwd=30.0, bwd=40.0, opt=1.0) for i in range(30)]
    a = write_trace(tmp_path / "a.arrow", rows)
    b = write_trace(tmp_path / "b.arrow", [make_row(i, wall=18.0, data=1.0, fwd=6.0, bwd=9.0) for i in range(30)])
    result = runner.invoke(app, ["compare", str(a), str(b), "--width", "80"])
    assert result.exit_code == 0 and max(len(line) for line in result.output.splitlines()) <= 80
    flat = " ".join(result.output.split())
    assert "forward, backward and optimizer, which no change recognised here touches, went 71.00 -> 16.50" in flat
    assert "-54.50 of the step's -94.00 ms" in flat
    same = write_trace(tmp_path / "c.arrow", [make_row(i, wall=73.0, data=1.0, fwd=30.0, bwd=40.0) for i in range(30)])
    data = json.loads(runner.invoke(app, ["compare", str(a), str(same), "--json"]).output)
    assert not any("forward, backward" in d for d in data["differences"])  # compute unchanged: nothing to say


def test_free_cores_explain_a_faster_run_as_well_as_a_slower_one():
    from analyzer.planning.host_difference import _against

    assert _against(0.5, -40.0) == (  # AFTER had twice the free cores
        "host: its free cores alone would make a CPU-bound step faster by 50.0%; it is faster by 40.0%, within "
        "that: rerun both on one quiet host before trusting the gate"
    )
    assert _against(1.0, -90.0).endswith("beyond that")  # was "its -90.0% is not the host's"
