"""The cost options are declared once (cli/options.py) and every command that prices a run takes the same set."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.cli.options import COST_OPTIONS, cost_inputs
from tests.conftest import SAMPLES

runner = CliRunner()
FLAGS = ["--" + name.replace("_", "-") for name in COST_OPTIONS]


@pytest.mark.parametrize("command", ["analyze", "report", "compare"])
def test_each_pricing_command_takes_every_cost_option(command: str) -> None:
    from typer.main import get_command

    click_command = get_command(app).commands[command]  # type: ignore[attr-defined]
    flags = {opt for param in click_command.params for opt in param.opts}
    assert set(FLAGS) <= flags
    assert "--cost" not in flags  # the parameter the options replace is not an option itself


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_a_bad_cost_value_is_one_line_and_exit_2(command: str) -> None:
    trace = str(SAMPLES / "cpu_healthy.arrow")
    args = [command, trace, "--gpus", "0"] if command == "analyze" else [command, trace, trace, "--gpus", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["gpuanalyze: error: gpus must be a positive whole number"]


def test_no_cost_option_is_no_cost_and_options_win_over_the_file(tmp_path) -> None:
    assert cost_inputs(None) is None
    config = tmp_path / "cost.toml"
    config.write_text("price_per_gpu_hour = 1.0\nsteps_per_run = 100\n")
    got = cost_inputs(config, price_per_gpu_hour=3.0)
    assert got is not None and got.price_per_gpu_hour == 3.0 and got.steps_per_run == 100
