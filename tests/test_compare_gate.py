"""The regression gate: `gpuanalyze compare BEFORE AFTER --fail-if-slower PCT` exits 1 only when
AFTER is slower by more than PCT beyond the runs' noise (bootstrap over steps), 0 otherwise, 2 on
bad input; run labels come from tags and directories; a mistyped command gets a suggestion."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.errors import GpuAnalyzeError
from analyzer.planning.gate import GateOptions, regression_gate
from analyzer.planning.run_label import run_label, unique_labels
from analyzer.planning.step_series import StepSeries
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row, write_trace

runner = CliRunner()


def _run(path: Path, mean: float, sd: float, *, seed: int, n: int = 40, samples: int = 32) -> Path:
    """A run whose steps last ``mean`` ms give or take ``sd`` (seeded noise), in ``path``."""
    walls = np.random.default_rng(seed).normal(mean, sd, n).clip(min=mean / 2)
    rows = [
        make_row(i, wall=float(w), fwd=mean * 0.3, bwd=mean * 0.4, opt=1.0, samples=samples)
        for i, w in enumerate(walls)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_trace(path, rows, end=EndInfo(status="ok", steps=n))


def _gate(tmp_path: Path, before: tuple[float, float], after: tuple[float, float], *args: str):
    a = _run(tmp_path / "baseline" / "trace.arrow", *before, seed=1)
    b = _run(tmp_path / "new" / "trace.arrow", *after, seed=2)
    return runner.invoke(app, ["compare", str(a), str(b), *args])


def test_an_equal_pair_with_noise_passes(tmp_path):
    result = _gate(tmp_path, (20.0, 1.5), (20.0, 1.5), "--fail-if-slower", "5")
    assert result.exit_code == 0, result.output
    assert "Gate [step_time]" in result.output and "pass:" in result.output


def test_a_clearly_slower_pair_fails_with_the_numbers(tmp_path):
    result = _gate(tmp_path, (20.0, 0.5), (26.0, 0.5), "--fail-if-slower", "5")
    assert result.exit_code == 1, result.output
    assert "FAIL: slower by 3" in result.output and "95% interval: slower by" in result.output
    a, b = tmp_path / "baseline" / "trace.arrow", tmp_path / "new" / "trace.arrow"
    as_json = runner.invoke(app, ["compare", str(a), str(b), "--fail-if-slower", "5", "--json"])
    assert as_json.exit_code == 1
    data = json.loads(as_json.output)
    gate = data["gate"]
    assert gate["failed"] is True and gate["exit_code"] == 1
    (check,) = gate["checks"]
    assert check["metric"] == "step_time" and check["tolerance_pct"] == 5
    assert check["change_pct"] == pytest.approx(30.0, abs=3.0) and 5 < check["low_pct"] <= check["change_pct"]
    assert [o["name"] for o in data["options"]] == ["baseline", "new"]


def test_slower_than_the_tolerance_but_within_noise_passes(tmp_path):
    result = _gate(tmp_path, (20.0, 8.0), (21.6, 8.0), "--fail-if-slower", "5", "--json")
    assert result.exit_code == 0, result.output
    (check,) = json.loads(result.output)["gate"]["checks"]
    assert check["low_pct"] < 5 and check["failed"] is False


def test_a_throughput_drop_fails_the_throughput_gate(tmp_path):
    a = _run(tmp_path / "a.arrow", 20.0, 0.5, seed=1)
    b = _run(tmp_path / "b.arrow", 20.0, 0.5, seed=2, samples=24)
    result = runner.invoke(app, ["compare", str(a), str(b), "--fail-if-throughput-drops", "10"])
    assert result.exit_code == 1 and "Gate [throughput]" in result.output and "lower throughput by 25" in result.output
    assert runner.invoke(app, ["compare", str(a), str(b), "--fail-if-slower", "10"]).exit_code == 0


def test_a_bad_file_is_one_line_and_exit_2(tmp_path):
    a = _run(tmp_path / "a.arrow", 20.0, 0.5, seed=1)
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(b"not a trace")
    result = runner.invoke(app, ["compare", str(a), str(bad), "--fail-if-slower", "5"])
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("gpuanalyze: error:")


@pytest.mark.parametrize("pct", ["-1", "nan", "5000"])
def test_a_bad_tolerance_is_exit_2(tmp_path, pct):
    a = _run(tmp_path / "a.arrow", 20.0, 0.5, seed=1)
    result = runner.invoke(app, ["compare", str(a), str(a), "--fail-if-slower", pct])
    assert result.exit_code == 2 and "--fail-if-slower takes a percentage" in result.stderr


def test_the_gate_needs_exactly_two_runs(tmp_path):
    a = _run(tmp_path / "a.arrow", 20.0, 0.5, seed=1)
    result = runner.invoke(app, ["compare", str(a), str(a), str(a), "--fail-if-slower", "5"])
    assert result.exit_code == 2 and "exactly two traces" in result.stderr


def test_the_bootstrap_is_seeded_and_needs_steps():
    rng = np.random.default_rng(0)
    before = StepSeries(rng.normal(20, 1, 30), None, None)
    after = StepSeries(rng.normal(21, 1, 30), None, None)
    opts = GateOptions(fail_if_slower_pct=1.0)
    assert regression_gate(before, after, opts) == regression_gate(before, after, opts)
    with pytest.raises(GpuAnalyzeError, match="at least 5"):
        regression_gate(StepSeries(np.ones(3), None, None), after, opts)
    with pytest.raises(GpuAnalyzeError, match="batch sizes"):
        regression_gate(before, after, GateOptions(fail_if_throughput_drops_pct=1.0))


def test_labels_come_from_tags_then_directories_and_are_unique():
    assert run_label(Path("runs/baseline/trace.arrow")) == "baseline"
    assert run_label(Path("runs/baseline/trace.arrow"), {"name": "bf16 try"}) == "bf16 try"
    assert run_label(Path("old.arrow")) == "old.arrow"
    paths = [Path("x/run/trace.arrow"), Path("y/run/trace.arrow")]
    assert unique_labels(["run", "run"], paths) == ["run (x/run)", "run (y/run)"]
    assert unique_labels(["a.arrow", "a.arrow"], [Path("a.arrow")] * 2) == ["a.arrow #1", "a.arrow #2"]


def test_an_unknown_command_names_the_closest_and_lists_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["cost"])
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gpuanalyze: error: no such command or file 'cost'; did you mean 'compare'?")
    assert "fleet" in line and "analyze" in line
    assert "did you mean 'compare'" in runner.invoke(app, ["comapre"]).stderr


def test_an_existing_path_still_means_analyze(tmp_path, monkeypatch):
    _run(tmp_path / "cost" / "trace.arrow", 20.0, 0.5, seed=1)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["cost", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["steps"] > 0


@pytest.mark.slow
def test_the_console_script_exits_0_1_and_2(tmp_path):
    """Through the entry point in a fresh process (only the compare command's module registered)."""
    import subprocess
    import sys

    def gpuanalyze(*args: str) -> subprocess.CompletedProcess[str]:
        code = "import sys; from analyzer.cli import main; main(sys.argv[1:])"
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)

    base = _run(tmp_path / "baseline" / "trace.arrow", 20.0, 1.5, seed=1)
    same = _run(tmp_path / "same" / "trace.arrow", 20.0, 1.5, seed=2)
    slow = _run(tmp_path / "slow" / "trace.arrow", 26.0, 0.5, seed=3)
    assert gpuanalyze("compare", str(base), str(same), "--fail-if-slower", "5").returncode == 0
    failed = gpuanalyze("compare", str(base), str(tmp_path / "slow"), "--fail-if-slower", "5")
    assert failed.returncode == 1 and "FAIL: slower by" in failed.stdout and slow.exists()
    bad = gpuanalyze("compare", str(base), str(tmp_path / "missing.arrow"), "--fail-if-slower", "5")
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1
    unknown = gpuanalyze("cost")
    assert unknown.returncode == 2 and "did you mean 'compare'?" in unknown.stderr and "fleet" in unknown.stderr


def _series(values: np.ndarray) -> StepSeries:
    return StepSeries(values, None, None)


def test_a_checkpoint_spike_in_before_does_not_hide_a_2x_slowdown():
    rng = np.random.default_rng(5)
    before = rng.normal(20, 0.5, 200)
    before[50] = 8000.0  # one 8 s checkpoint step
    after = rng.normal(40, 0.5, 200)
    result = regression_gate(_series(before), _series(after), GateOptions(fail_if_slower_pct=10))
    (check,) = result.checks
    assert result.failed and check.change_pct == pytest.approx(100, abs=5)
    assert check.spikes is not None and check.spikes[0].steps == 1 and check.spikes[0].mean_ms == 8000.0
    assert check.spikes[1].steps == 0


def _drifting(seed: int, n: int = 400) -> np.ndarray:
    """One job's run whose step time climbs by a random 0-25% over the run (thermal, a neighbour)."""
    rng = np.random.default_rng(seed)
    return 20.0 * (1 + rng.uniform(0, 0.25) * np.linspace(0, 1, n)) * rng.normal(1, 0.02, n)


def test_drifting_pairs_of_one_job_pass_and_report_their_drift():
    results = [
        regression_gate(_series(_drifting(2 * k)), _series(_drifting(2 * k + 1)), GateOptions(fail_if_slower_pct=5))
        for k in range(10)
    ]
    assert not any(r.failed for r in results)
    assert all(r.checks[0].drift_allowance_pct > 0 for r in results)
    assert max(abs(r.checks[0].drift_pct[0]) for r in results) > 5


def test_the_bootstrap_resamples_a_bounded_number_of_steps():
    rng = np.random.default_rng(1)
    before, after = rng.normal(20, 0.5, 100_000), rng.normal(30, 0.5, 100_000)
    result = regression_gate(_series(before), _series(after), GateOptions(fail_if_slower_pct=10))
    (check,) = result.checks
    assert result.failed and check.steps == (100_000, 100_000) and max(check.resampled) <= 4096


def test_a_pair_whose_world_size_changed_is_refused_with_one_line(tmp_path):
    rows = [make_row(i, wall=20.0, fwd=6.0, bwd=8.0, opt=1.0) for i in range(40)]
    a = write_trace(tmp_path / "a.arrow", rows, run={"world_size": 8, "rank": 0})
    b = write_trace(tmp_path / "b.arrow", rows, run={"world_size": 7, "rank": 0})
    result = runner.invoke(app, ["compare", str(a), str(b), "--fail-if-slower", "5"])
    assert result.exit_code == 2, result.output
    assert "world size: 8 vs 7" in result.output and "no verdict" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_unrelated_jobs_are_refused_by_the_gate(tmp_path):
    rows = [make_row(i, wall=20.0, fwd=6.0, bwd=8.0, opt=1.0) for i in range(40)]
    a = write_trace(tmp_path / "a.arrow", rows, run={"argv": "python train_resnet.py --lr 0.1"})
    b = write_trace(tmp_path / "b.arrow", rows, run={"argv": "python finetune_gpt2.py"})
    result = runner.invoke(app, ["compare", str(a), str(b), "--fail-if-slower", "5"])
    assert result.exit_code == 2 and "script: train_resnet.py vs finetune_gpt2.py" in result.output
    assert runner.invoke(app, ["compare", str(a), str(b)]).exit_code == 0  # without the gate: a note, not a refusal


def test_compare_shows_how_the_idle_owners_moved(tmp_path):
    """A fix that removes a 4 ms loader wait: the loader's idle time per step is the owner that moved, by ~4 ms."""
    from tests.kineto_fixtures import loader_bound_trace, write

    before = write(tmp_path / "before.json", loader_bound_trace(4000.0))
    after = write(tmp_path / "after.json", loader_bound_trace(200.0))
    result = CliRunner().invoke(app, ["compare", str(before), str(after), "--json"])
    assert result.exit_code == 0, result.output
    moved = json.loads(result.output)["idle_owners_moved"]
    assert moved[0]["owner"] == "data_loader"
    assert moved[0]["delta_ms"] == pytest.approx(-3.8, abs=0.2)
    shown = CliRunner().invoke(app, ["compare", str(before), str(after)], env={"COLUMNS": "100"})
    assert shown.exit_code == 0 and "idle owners moved" in shown.output and "data_loader" in shown.output


def test_an_after_that_lost_a_rank_is_refused_although_its_world_size_is_the_same(tmp_path):
    """AFTER recorded 3 of the job's 4 ranks (one rank's file lost): a verdict on 3 ranks would pass a
    slowdown the missing rank carried; the gate refuses with one line (exit 2)."""
    for name, ranks in (("before", 4), ("after", 3)):
        (tmp_path / name).mkdir()
        for rank in range(ranks):
            rows = [make_row(i, rank=rank, wall=20.0, fwd=6.0, bwd=8.0, opt=1.0) for i in range(40)]
            write_trace(tmp_path / name / f"trace.rank{rank}.arrow", rows, run={"world_size": 4, "rank": rank})
    result = runner.invoke(app, ["compare", str(tmp_path / "before"), str(tmp_path / "after"), "--fail-if-slower", "5"])
    assert result.exit_code == 2, result.output
    assert "ranks: 4 vs 3" in result.output and "no verdict" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_a_faster_run_reads_in_words_with_its_interval_in_range_and_the_verdict_first_and_last(tmp_path):
    """For a CI log: "faster by 90%" (was "slower by -90.0%"), an interval that no step time can leave (it reached
    -123.9%: a drifting BEFORE widened it past an instant step), the pass/fail line first and last at 80 columns."""
    walls = np.linspace(100.0, 300.0, 40)  # BEFORE drifts: +200% from its first to its last third
    rows = [make_row(i, wall=float(w), fwd=30.0, bwd=40.0, opt=1.0) for i, w in enumerate(walls)]
    a = write_trace(tmp_path / "a.arrow", rows, end=EndInfo(status="ok", steps=40))
    b = _run(tmp_path / "b.arrow", 20.0, 0.2, seed=2)
    result = runner.invoke(app, ["compare", str(a), str(b), "--fail-if-slower", "5", "--width", "80"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith("Gate [step_time]") and "pass: faster by 9" in " ".join(result.output.split())
    last = " ".join(result.output.split()).rsplit("Gate [step_time]", 1)[1]
    assert "pass: faster by 9" in last and "spikes" not in last and "drift" not in last
    assert "slower by -" not in result.output and "+-" not in result.output
    (check,) = json.loads(runner.invoke(app, ["compare", str(a), str(b), "--fail-if-slower", "5", "--json"]).output)[
        "gate"
    ]["checks"]
    assert check["low_pct"] == -100.0 < check["change_pct"] < check["high_pct"] < 0
