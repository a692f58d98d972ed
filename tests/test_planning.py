import json

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from tests.conftest import SAMPLES

runner = CliRunner()


def _toml(path, text):
    path.write_text(text)
    return str(path)


def test_compare_reproduces_the_server_example(tmp_path):
    a = _toml(tmp_path / "a.toml", 'name = "server A"\nprice_per_gpu_hour = 1.20\nhours_per_run = 80\n')
    b = _toml(tmp_path / "b.toml", 'name = "server B"\nprice_per_gpu_hour = 2.40\nhours_per_run = 35\n')
    result = runner.invoke(app, ["compare", a, b, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [o["per_run_usd"] for o in data["options"]] == pytest.approx([96.0, 84.0])
    assert data["cheapest"] == "server B" and data["saving_usd_per_run"] == pytest.approx(12.0)
    text = runner.invoke(app, ["compare", a, b]).output
    assert "server B is cheapest per completed run, by $12.00" in text


def test_compare_traces_with_run_length(tmp_path):
    traces = [str(SAMPLES / "cpu_data_loading.arrow"), str(SAMPLES / "cpu_healthy.arrow")]
    result = runner.invoke(app, ["compare", *traces, "--samples-per-run", "1e6", "--price-per-gpu-hour", "1", "--json"])
    data = json.loads(result.output)
    by = {o["name"]: o for o in data["options"]}
    assert by["cpu_healthy.arrow"]["per_run_usd"] < by["cpu_data_loading.arrow"]["per_run_usd"]
    assert data["cheapest"] == "cpu_healthy.arrow"
    plain = runner.invoke(app, ["compare", *traces])  # no run length: step times only, no cost ranking
    assert plain.exit_code == 0 and "run length" in plain.output
