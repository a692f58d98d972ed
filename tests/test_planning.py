import json

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.planning.model_config import shape_from_hf_config
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


def test_a_config_gives_the_models_size_and_shape(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
                "vocab_size": 32000,
                "hidden_act": "silu",
            }
        )
    )
    shape = shape_from_hf_config(cfg)
    assert 6.5e9 < shape.params < 7.0e9  # a LLaMA-7B shape
    assert (shape.layers, shape.hidden, shape.heads) == (32, 4096, 32)
