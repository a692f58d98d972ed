"""Shared options are declared once (cli/options.py): every command that prices a run takes the same cost
options, through one command class and one helper, and no command module imports another for an option."""

from __future__ import annotations

import ast
import inspect

import pytest
from typer.testing import CliRunner

from analyzer.cli import app, options
from analyzer.cli.options import cost_inputs
from tests.conftest import ROOT, SAMPLES

runner = CliRunner()
FLAGS = ["--" + name.replace("_", "-") for name in inspect.signature(options.cost).parameters]


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
    assert cost_inputs({}) is None
    config = tmp_path / "cost.toml"
    config.write_text("price_per_gpu_hour = 1.0\nsteps_per_run = 100\n")
    got = cost_inputs({"cost_config": config, "price_per_gpu_hour": 3.0})
    assert got is not None and got.price_per_gpu_hour == 3.0 and got.steps_per_run == 100


def test_the_options_reach_the_analysis_as_one_read_options(monkeypatch) -> None:
    import analyzer.api

    seen = []
    real = analyzer.api.analyze
    monkeypatch.setattr(analyzer.api, "analyze", lambda trace, read: seen.append(read) or real(trace, read))
    args = ["analyze", str(SAMPLES / "cpu_healthy.arrow"), "--steps-per-run", "1000", "--workers", "1", "--json"]
    result = runner.invoke(app, [*args, "--max-bytes", "1M", "--price-per-gpu-hour", "2"])
    assert result.exit_code == 0, result.output
    (read,) = seen
    assert read.cost is not None and (read.cost.steps_per_run, read.cost.price_per_gpu_hour) == (1000, 2.0)
    assert (read.workers, read.max_bytes, read.engine, read.machine_ceilings) == (1, 1 << 20, "local", True)


def test_each_group_is_one_help_panel() -> None:
    result = runner.invoke(app, ["report", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and max(len(line) for line in result.output.splitlines()) <= 80
    assert "Cost options" in result.output and "Read options" in result.output


def test_command_modules_take_shared_options_from_options_not_from_each_other() -> None:
    shared = {"analyzer.cli.base", "analyzer.cli.options", "analyzer.cli.log_option"}
    commands = {p.stem for p in (ROOT / "analyzer" / "cli").glob("*.py")} - {"__init__", "__main__", "base"}
    found = {}
    for name in commands:
        tree = ast.parse((ROOT / "analyzer" / "cli" / f"{name}.py").read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {
            f"analyzer.cli.{a.name}"
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module == "analyzer.cli"
            for a in n.names
        }
        found[name] = sorted(m for m in imported if m.startswith("analyzer.cli.") and m not in shared)
    assert {k: v for k, v in found.items() if v} == {}


def test_the_options_module_builds_no_signature() -> None:
    """Options are plain Annotated types: no signature rewriting, no eval of annotations."""
    text = (ROOT / "analyzer" / "cli" / "options.py").read_text()
    assert "eval(" not in text and "__signature__" not in text


def test_building_the_cli_again_escapes_no_help_twice():
    import typer.main

    def helps() -> dict[str, str]:
        group = typer.main.get_command(app)
        return {f"{c.name} {p.name}": p.help for c in group.commands.values() for p in c.params if p.help}  # type: ignore[attr-defined]

    first = helps()
    assert any("\\[" in h for h in first.values())  # some help is escaped at all
    for _ in range(3):
        assert helps() == first
