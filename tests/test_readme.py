"""The README is a front page that stays true: at most 12 KB, its test command the one CI runs, its
example output what the command prints today, every link it gives present."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from analyzer.cli import app
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_the_readme_is_at_most_12_kb() -> None:
    assert len(README.encode()) <= 12 * 1024


def test_its_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    (command,) = [line for line in README.splitlines() if line.startswith("pip install torch==2.13.0 && ")]
    assert command in ci


def test_its_example_output_is_what_the_command_prints() -> None:
    block = README.split("$ gpuanalyze sample_traces/cpu_data_loading.arrow", 1)[1].split("```", 1)[0]
    shown = [line.rstrip() for line in block.splitlines()[1:] if line.strip()]
    result = CliRunner().invoke(app, [str(ROOT / "sample_traces" / "cpu_data_loading.arrow"), "--width", "80"])
    assert result.exit_code == 0, result.output
    printed = {line.rstrip().replace(str(ROOT) + "/", "") for line in result.output.splitlines()}
    missing = [line for line in shown if line not in printed and not line.startswith("╭─ gpuanalyze:")]
    assert len(shown) > 20 and missing == []


def test_every_link_is_present() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links and [p for p in links if not p.startswith("http") and not (ROOT / p).exists()] == []


def test_it_says_where_the_real_traces_come_from_and_that_tests_skip_without_them() -> None:
    from tests.conftest import SHARED

    flat = " ".join(README.split())
    assert ROOT.parent / "shared" == SHARED and "`../shared`" in flat
    assert "skipped with the reason when it is absent" in flat
