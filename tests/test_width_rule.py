"""One width rule for every command: --width, else $COLUMNS (clamped to [40, 1000]), else the
terminal's, else 80 (render/console.py: layout_width)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.render.console import MAX_WIDTH, MIN_WIDTH, layout_width
from tests.conftest import SAMPLES, make_row, write_trace

runner = CliRunner()
SAMPLE = str(SAMPLES / "cpu_data_loading.arrow")


def _commands(tmp_path):
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        (runs / name).mkdir(parents=True)
        write_trace(runs / name / "trace.arrow", [make_row(i, wall=20.0, data=12.0) for i in range(30)])
    return {
        "analyze": [SAMPLE],
        "compare": ["compare", SAMPLE, SAMPLE],
        "fleet": ["fleet", str(runs), "--workers", "1"],  # the layout, not the process pool
        "watch": ["watch", SAMPLE],
        "env": ["env"],
    }


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize(
    ("columns", "expected"),
    [("5", MIN_WIDTH), ("100000", MAX_WIDTH), ("120", 120), ("wide", 80), ("", 80)],
)
def test_columns_is_read_and_clamped(monkeypatch, columns, expected):
    monkeypatch.setenv("COLUMNS", columns)
    assert layout_width() == expected
    assert layout_width(66) == 66  # --width wins


@pytest.mark.parametrize("name", ["analyze", "compare", "fleet", "watch", "env"])
def test_every_command_follows_columns_clamped(tmp_path, name):
    args = _commands(tmp_path)[name]
    narrow = runner.invoke(app, args, env={"COLUMNS": "5"})
    assert narrow.exit_code == 0, narrow.output
    assert _widest(narrow.output) <= MIN_WIDTH + 2  # a long path may overflow by a character or two
    assert _widest(narrow.output) >= MIN_WIDTH - 8  # laid out for 40 columns, not for 5
    wide = runner.invoke(app, args, env={"COLUMNS": "100000"})
    assert wide.exit_code == 0 and _widest(wide.output) <= MAX_WIDTH


@pytest.mark.parametrize("name", ["analyze", "compare", "fleet", "watch"])
def test_every_report_command_takes_width(tmp_path, name):
    args = _commands(tmp_path)[name]
    result = runner.invoke(app, [*args, "--width", "60"], env={"COLUMNS": "150"})
    assert result.exit_code == 0, result.output
    assert _widest(result.output) <= 62


def test_notes_follow_the_width_rule(monkeypatch, capsys):
    from analyzer.cli.base import note

    monkeypatch.setenv("COLUMNS", "50")
    note("word " * 40)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 50


def test_the_run_commands_report_takes_its_width(capsys):
    from analyzer.api import analyze
    from analyzer.run.summary import print_terminal

    print_terminal(analyze(SAMPLE), width=52)
    assert _widest(capsys.readouterr().out) <= 52
