import json

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.version import __version__
from tests.conftest import SAMPLES, make_row

runner = CliRunner()
KEYS = {"bottleneck", "confidence", "steps", "ranks", "step_time_mean_ms", "breakdown_ms", "findings"}


def test_default_command_analyses_a_trace_path(trace_factory):
    path = trace_factory([make_row(i, wall=20.0, data=10.0) for i in range(20)])
    result = runner.invoke(app, [str(path)])
    assert result.exit_code == 0, result.output
    assert "DATA LOADING" in result.output
    assert "Step time breakdown" in result.output and "num_workers" in result.output


def test_json_has_the_stable_keys(trace_factory):
    path = trace_factory([make_row(i, wall=20.0, data=10.0) for i in range(20)])
    result = runner.invoke(app, [str(path), "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data.keys() >= KEYS
    assert data["bottleneck"] == "data_loading" and data["steps"] == 18 and data["ranks"] == 1
    assert data["step_time_median_ms"] <= data["step_time_p90_ms"] and "step_time_ms" not in data
    assert data["breakdown_ms"]["data_wait"] == 10.0
    finding = data["findings"][0]
    assert {"bottleneck", "share", "evidence", "recommendations"} <= finding.keys()
    assert finding["evidence"][0]["source"].startswith("XProf")


# What each bundled real trace is judged to be (sample_traces/README.md explains why).
EXPECTED = {
    "cpu_data_loading.arrow": "data_loading",
    "cpu_healthy.arrow": "none",
    "h200_data_loading.arrow": "data_loading",
    "h200_cpu_healthy_scenario.arrow": "data_loading",
    "h200_small_batch.arrow": "batch_size",
    "h200_sync.arrow": "batch_size",
    "h200_fp32_compute.arrow": "kernels",
    "cpu_ddp_straggler.rank0.arrow": "sync",
    "cpu_ddp_straggler.rank1.arrow": "sync",
}


@pytest.mark.parametrize("sample", sorted(SAMPLES.glob("*.arrow")), ids=lambda p: p.name)
def test_every_bundled_sample_analyses(sample):
    result = runner.invoke(app, [str(sample), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["bottleneck"] == EXPECTED[sample.name]
    assert data["complete"] and data["steps"] > 50
    if "ddp" in sample.name:
        assert data["ranks"] == 2 and data["stragglers"][0]["rank"] == 1
    assert (data["gpu_utilization"] is None) == sample.name.startswith("cpu_")


@pytest.mark.parametrize("content", [None, b"", b"\x00garbage" * 50, b'{"traceEvents": []}'])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content):
    path = tmp_path / "bad.arrow"
    if content is not None:
        path.write_bytes(content)
    result = runner.invoke(app, [str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuanalyze: error:")
    assert "Traceback" not in result.output


def test_version_and_help():
    assert runner.invoke(app, ["--version"]).output.strip() == f"gpuanalyze {__version__}"
    for args in (["--help"], ["analyze", "--help"], ["env", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage" in result.output


def test_the_help_names_every_verdict_at_80_columns():
    from analyzer.analysis.findings import BOTTLENECKS

    result = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and max(len(line) for line in result.output.splitlines()) <= 80
    words = set(result.output.replace(",", " ").replace("(", " ").split())
    assert set(BOTTLENECKS) <= words, set(BOTTLENECKS) - words


def test_env_answers_without_a_gpu():
    result = runner.invoke(app, ["env"])
    assert result.exit_code == 0
    assert "cuda.is_available()" in result.output


def test_every_command_is_mapped_to_the_module_that_registers_it():
    from analyzer.cli import COMMANDS

    registered = {c.name for c in app.registered_commands}
    assert registered == set(COMMANDS)


def test_a_command_line_imports_only_its_own_command_module():
    import subprocess
    import sys

    runs = [str(SAMPLES / "h200_data_loading.arrow"), str(SAMPLES / "h200_small_batch.arrow")]
    code = (
        "import sys; from analyzer.cli import main\n"
        f"try:\n    main(['compare', *{runs!r}, '--json'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('analyzer.cli.')), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stderr.strip().splitlines()[-1]
    assert "analyzer.cli.plan" in loaded
    assert "analyzer.cli.report" not in loaded and "analyzer.cli.watch" not in loaded
    assert json.loads(out.stdout)["options"][0]["step_time_mean_ms"] > 0
