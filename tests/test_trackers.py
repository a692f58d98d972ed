"""`--log mlflow|wandb` and the callbacks' ``log_to=``: values read back from a real MLflow file
store and a real W&B offline run directory."""

from __future__ import annotations

import importlib.util
import math
import warnings

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.errors import GpuAnalyzeError, GpuAnalyzeWarning
from tests.conftest import SAMPLES

runner = CliRunner()
SAMPLE = SAMPLES / "cpu_data_loading.arrow"
COST = ["--steps-per-run", "100000", "--price-per-gpu-hour", "2.5"]


def _report(**cost):
    from analyzer.api import ReadOptions, analyze
    from analyzer.planning.cost import CostInputs

    return analyze(SAMPLE, ReadOptions(cost=CostInputs(**cost) if cost else None))


def test_flat_summary_holds_verdict_breakdown_projection_and_savings():
    from analyzer.render.flat_summary import flat_summary

    report = _report(steps_per_run=100_000, price_per_gpu_hour=2.5)
    flat = flat_summary(report)
    top = report.findings[0]
    assert flat["bottleneck"] == "data_loading" and flat["confidence"] == report.confidence.value
    assert flat["breakdown_data_wait_ms"] == report.metrics.breakdown_ms["data_wait_ms"]
    assert flat["projected_step_time_ms"] == top.projection.step_ms
    assert flat["saved_usd_per_run"] == pytest.approx(top.savings.usd_per_run)
    assert flat["saved_usd_per_run"] > 0
    assert all(v is None or isinstance(v, str | int | float) for v in flat.values())
    assert flat_summary(_report())["saved_usd_per_run"] is None  # no run length: no savings, not zero


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("mlflow is not installed (pip install 'gpuanalyze[mlflow]')")
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    yield mlflow
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(None)


def _only_run(mlflow):
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert len(runs) == 1
    return runs[0]


@pytest.mark.slow  # importing mlflow takes ~10 s on the shared CI machine
def test_log_mlflow_stores_the_summary_and_the_report_in_a_file_store(mlflow_store):
    from analyzer.render.flat_summary import flat_summary

    result = runner.invoke(app, [str(SAMPLE), "--json", "--log", "mlflow", *COST])
    assert result.exit_code == 0, result.output
    run = _only_run(mlflow_store)
    expected = flat_summary(_report(steps_per_run=100_000, price_per_gpu_hour=2.5))
    metrics, tags = run.data.metrics, run.data.tags
    for key in ("confidence", "step_time_mean_ms", "breakdown_data_wait_ms", "projected_step_time_ms"):
        assert metrics[f"gpuanalyze/{key}"] == pytest.approx(expected[key])
    assert metrics["gpuanalyze/saved_usd_per_run"] == pytest.approx(expected["saved_usd_per_run"])
    assert (
        tags["gpuanalyze/bottleneck"] == "data_loading"
        and tags["mlflow.runName"] == "gpuanalyze-cpu_data_loading.arrow"
    )
    artifacts = [a.path for a in mlflow_store.MlflowClient().list_artifacts(run.info.run_id, "gpuanalyze")]
    if importlib.util.find_spec("plotly") is not None:
        assert artifacts == ["gpuanalyze/gpuanalyze-report.html"]


@pytest.mark.slow  # importing mlflow takes ~10 s on the shared CI machine
def test_log_mlflow_goes_into_the_active_run(mlflow_store):
    from analyzer.track.log_options import LogOptions
    from analyzer.track.log_report import log_report

    report = _report()
    with mlflow_store.start_run(run_name="mine") as active:
        lines = log_report(report, LogOptions(to=("mlflow",), html=False))
        assert mlflow_store.active_run().info.run_id == active.info.run_id  # left open for the user
    assert lines == [f"logged to mlflow run {active.info.run_id}"]
    run = _only_run(mlflow_store)
    assert run.info.run_id == active.info.run_id
    assert run.data.tags["gpuanalyze/confidence_level"] == report.confidence.level


@pytest.mark.slow  # importing mlflow takes ~10 s on the shared CI machine
def test_without_plotly_the_metrics_are_logged_and_the_report_skipped(mlflow_store, monkeypatch):
    from analyzer.track import report_artifact
    from analyzer.track.log_options import LogOptions
    from analyzer.track.log_report import log_report

    real = importlib.util.find_spec
    monkeypatch.setattr(report_artifact.importlib.util, "find_spec", lambda n: None if n == "plotly" else real(n))
    lines = log_report(_report(), LogOptions(to=("mlflow",)))
    assert lines[0] == report_artifact.SKIPPED_NO_PLOTLY
    run = _only_run(mlflow_store)
    assert run.data.metrics["gpuanalyze/steps"] == 57
    assert mlflow_store.MlflowClient().list_artifacts(run.info.run_id) == []


def test_a_missing_tracker_is_one_line_naming_the_extra(monkeypatch):
    from analyzer.track import log_options

    real = importlib.util.find_spec
    monkeypatch.setattr(log_options.importlib.util, "find_spec", lambda n: None if n == "wandb" else real(n))
    result = runner.invoke(app, [str(SAMPLE), "--log", "wandb"])
    assert result.exit_code == 2
    assert result.output.strip() == "gpuanalyze: error: --log wandb needs wandb: pip install 'gpuanalyze[wandb]'"
    result = runner.invoke(app, [str(SAMPLE), "--log", "tensorboard"])
    assert result.exit_code == 2 and "choose one of mlflow, wandb" in result.output
    assert "Traceback" not in result.output


def test_without_mlflows_store_packages_log_mlflow_says_what_to_install_or_set_before_analysing(monkeypatch):
    from analyzer.cli import log_option

    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("mlflow is not installed (pip install 'gpuanalyze[mlflow]')")
    real = importlib.util.find_spec
    monkeypatch.setattr(log_option.importlib.util, "find_spec", lambda n: None if n == "sqlalchemy" else real(n))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = runner.invoke(app, [str(SAMPLE), "--log", "mlflow"])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1  # nothing analysed or printed before it
    assert result.output.startswith("gpuanalyze: error: --log mlflow: MLflow's default store (sqlite:///mlflow.db)")
    assert "needs sqlalchemy: pip install 'gpuanalyze[mlflow]', or set MLFLOW_TRACKING_URI" in result.output
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # a server of the user's: not checked here
    assert log_option.log_targets(["mlflow"]) is not None


@pytest.mark.slow  # importing mlflow takes ~10 s on the shared CI machine
def test_log_mlflow_works_with_the_extra_as_installed_and_no_variables_set(tmp_path):
    """`pip install 'gpuanalyze[mlflow]'` then `--log mlflow`: MLflow's own default store in the working directory."""
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("mlflow is not installed (pip install 'gpuanalyze[mlflow]')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = subprocess.run(
        [sys.executable, "-m", "analyzer", str(SAMPLE), "--json", "--log", "mlflow"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "gpuanalyze: logged to mlflow run " in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "mlflow.db").is_file()


def test_a_callbacks_tracker_failure_warns_once_and_returns(monkeypatch):
    from analyzer.track import mlflow_log
    from analyzer.track.log_options import LogOptions
    from analyzer.track.log_report import log_quietly

    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("mlflow is not installed (pip install 'gpuanalyze[mlflow]')")

    def broken(*args, **kwargs):
        raise ConnectionError("tracking server down")

    monkeypatch.setattr(mlflow_log, "log_mlflow", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert log_quietly(_report(), LogOptions(to=("mlflow",), html=False)) == []
    assert [str(w.message) for w in caught if w.category is GpuAnalyzeWarning] == [
        "gpuanalyze: could not log the report to mlflow (--log mlflow: ConnectionError: tracking server down)"
    ]


def test_callback_log_to_is_checked_when_the_callback_is_made():
    from analyzer.integrations._session import make_log_to

    with pytest.raises(GpuAnalyzeError, match="choose one of mlflow, wandb"):
        make_log_to("tensorboard")
    assert make_log_to(None) is None


def test_the_callbacks_report_starts_on_a_fresh_line(capsys):
    """A progress bar leaves the cursor mid-line (tqdm redraws with \\r): the report must not start there."""
    import logging

    from analyzer.integrations._session import Session
    from analyzer.record.profile_options import ProfileOptions

    session = Session(ProfileOptions(), recorder="test", logger=logging.getLogger("t"), report=True)
    print("\r 40%|████      | 4/10", end="")  # what tqdm leaves behind
    assert session.analyse(SAMPLE) is not None
    out = capsys.readouterr().out
    bar, rest = out.split("\n", 1)
    assert bar.endswith("4/10") and rest.lstrip("\n").startswith("╭")
    assert "DATA LOADING" in rest


@pytest.mark.slow
def test_log_wandb_offline_stores_the_summary_and_the_report(tmp_path, monkeypatch):
    if importlib.util.find_spec("wandb") is None:
        pytest.skip("wandb is not installed (pip install 'gpuanalyze[wandb]')")
    from analyzer.render.flat_summary import flat_summary
    from tests.tracker_helpers import wandb_artifacts, wandb_summary

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = runner.invoke(app, [str(SAMPLE), "--log", "wandb", *COST])
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    summary = wandb_summary(run_dir)
    expected = flat_summary(_report(steps_per_run=100_000, price_per_gpu_hour=2.5))
    assert summary["gpuanalyze/bottleneck"] == "data_loading"
    for key in ("confidence", "breakdown_data_wait_ms", "projected_step_time_ms", "saved_usd_per_run"):
        assert math.isclose(summary[f"gpuanalyze/{key}"], expected[key], rel_tol=1e-9)
    if importlib.util.find_spec("plotly") is not None:
        assert (run_dir / "files" / "gpuanalyze-report.html").read_text().startswith("<!DOCTYPE html>")
        assert wandb_artifacts(run_dir) == ["gpuanalyze-report"]


@pytest.mark.slow
def test_gpuanalyze_run_log_mlflow_logs_the_commands_trace_and_keeps_its_exit_status(tmp_path, monkeypatch):
    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("mlflow is not installed (pip install 'gpuanalyze[mlflow]')")
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    from tests.test_run import TRAIN

    script = tmp_path / "train.py"
    script.write_text(TRAIN)  # exits with status 3
    store = f"file:{tmp_path / 'mlruns'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUANALYZE_")}
    env |= {"MLFLOW_TRACKING_URI": store, "MLFLOW_ALLOW_FILE_STORE": "true"}
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "analyzer.run", "--out", str(out), "--log", "mlflow", "--", sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr
    assert "gpuanalyze: logged to mlflow run" in done.stderr
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(store)
    try:
        (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    finally:
        mlflow.set_tracking_uri(None)
    assert run.data.tags["gpuanalyze/bottleneck"] == "data_loading"
    assert run.data.metrics["gpuanalyze/steps"] > 0


def test_a_tracker_sees_the_command_line_redacted_and_short_http_defaults(monkeypatch):
    import os
    import sys

    from analyzer.track.tracker_call import MLFLOW_HTTP_DEFAULTS, tracker_call

    argv = ["gpuanalyze", "run", "--", "python", "train.py", "--hf-token", "hf_PLANTED", "--api-key=PLANTED2"]
    monkeypatch.setattr(sys, "argv", list(argv))
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "5")  # the user's own setting wins
    with tracker_call() as seen:
        assert sys.argv == seen and "hf_PLANTED" not in " ".join(seen) and "PLANTED2" not in " ".join(seen)
        assert seen[-2:] == ["***", "--api-key=***"]
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == MLFLOW_HTTP_DEFAULTS["MLFLOW_HTTP_REQUEST_TIMEOUT"]
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "5"
    assert sys.argv == argv and "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ


def _files_holding(root, secret: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


@pytest.mark.slow
def test_no_command_line_secret_reaches_the_wandb_or_mlflow_store(tmp_path):
    if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("wandb") is None:
        pytest.skip("needs mlflow and wandb (pip install 'gpuanalyze[mlflow,wandb]')")
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    from tests.test_run import TRAIN

    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    stores = tmp_path / "stores"
    stores.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUANALYZE_", "WANDB_", "MLFLOW_"))}
    env |= {
        "MLFLOW_TRACKING_URI": f"file:{stores / 'mlruns'}",
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(stores),
        "WANDB_SILENT": "true",
    }
    command = [sys.executable, str(script), "--hf-token", "hf_PLANTEDSECRET1", "--api-key=PLANTEDSECRET2"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "analyzer.run",
            "--out",
            str(tmp_path / "out"),
            "--log",
            "wandb",
            "--log",
            "mlflow",
            "--",
            *command,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert "logged to wandb run" in done.stderr and "logged to mlflow run" in done.stderr, done.stderr
    assert list((stores / "wandb").glob("offline-run-*")) and (stores / "mlruns").is_dir()
    for secret in (b"hf_PLANTEDSECRET1", b"PLANTEDSECRET2"):
        assert _files_holding(stores, secret) == []
        assert _files_holding(tmp_path / "out", secret) == []  # the trace redacts too
    assert not [p for d in (stores / "wandb").rglob("code") for p in d.rglob("*") if p.is_file()], "no code captured"
    assert not list((stores / "wandb").rglob("requirements.txt")), "no requirements captured"


@pytest.mark.parametrize("given", [None, "mine\x1b]0;X\x07\u202e"])
def test_a_hostile_trace_name_or_run_name_reaches_the_tracker_escaped(tmp_path, monkeypatch, given):
    """Tracker run names are shown in their web UIs and terminals: a trace file named with an escape
    sequence or a bidi override (or a --run-name holding one) reaches them escaped."""
    import shutil

    import analyzer.track.log_report as log_report_module
    from analyzer.api import analyze
    from analyzer.track.log_options import LogOptions

    hostile = tmp_path / "t\x1b]0;X\x07\u202e.arrow"
    shutil.copy(SAMPLE, hostile)
    seen: list[str] = []
    monkeypatch.setattr(LogOptions, "check_installed", lambda self: None)
    monkeypatch.setattr(log_report_module, "_log_one", lambda tracker, values, html, name: seen.append(name) or "r1")
    lines = log_report_module.log_report(analyze(hostile), LogOptions(to=("mlflow",), run_name=given, html=False))
    assert lines == ["logged to mlflow run r1"]
    (name,) = seen
    assert not any(c in name for c in "\x1b\x07\u202e") and "\\x1b]0;X\\x07\\u202e" in name


class _Odd(BaseException):
    """A tracker's own BaseException subclass."""


class _UnprintableError(Exception):
    def __str__(self):
        raise ValueError("no message")


@pytest.mark.parametrize(
    ("raised", "says"),
    [
        (_Odd("odd"), "_Odd: odd"),
        (_UnprintableError(), "_UnprintableError: (its message cannot be shown)"),
        (SystemExit(0), "the tracker tried to exit (status 0)"),
    ],
)
def test_a_tracker_that_raises_anything_or_exits_is_one_line_and_never_ends_training(monkeypatch, raised, says):
    """--log: one GpuAnalyzeError line (exit 2), not a traceback nor a silent exit 0 with nothing logged;
    a callback's log_to: one warning, and the training goes on."""
    import analyzer.track.log_report as log_report_module
    from analyzer.track.log_options import LogOptions

    def log_one(*_args):
        raise raised

    monkeypatch.setattr(LogOptions, "check_installed", lambda self: None)
    monkeypatch.setattr(log_report_module, "_log_one", log_one)
    options = LogOptions(to=("wandb",), html=False)
    with pytest.raises(GpuAnalyzeError, match="--log wandb: " + says.replace("(", r"\(").replace(")", r"\)")):
        log_report_module.log_report(_report(), options)
    with pytest.warns(GpuAnalyzeWarning, match="could not log"):
        assert log_report_module.log_quietly(_report(), options) == []
    result = runner.invoke(app, [str(SAMPLE), "--log", "wandb"])
    assert result.exit_code == 2 and "Traceback" not in result.output and says in result.output


def test_a_terminating_signal_during_a_tracker_call_still_ends_the_command(monkeypatch):
    import analyzer.track.log_report as log_report_module
    from analyzer.track.log_options import LogOptions
    from analyzer.track.tracker_call import Terminated

    def log_one(*_args):
        raise Terminated(143)

    monkeypatch.setattr(LogOptions, "check_installed", lambda self: None)
    monkeypatch.setattr(log_report_module, "_log_one", log_one)
    with pytest.raises(SystemExit) as ended:
        log_report_module.log_report(_report(), LogOptions(to=("mlflow",), html=False))
    assert ended.value.code == 143
