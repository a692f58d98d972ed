"""Every command's --help at 80 columns: no line over 80, no sentence broken mid-word; notes too."""

from __future__ import annotations

import re

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from analyzer.cli import COMMANDS, app
from analyzer.cli.base import verdicts_help
from tests.conftest import SAMPLES

runner = CliRunner()
_BOX = re.compile("[│╭╮╰╯─┃━]")


def _source_help(command: str | None) -> list[str]:
    """The help texts the command's --help renders (its own and its parameters'), as written."""
    import typer.main

    group = typer.main.get_command(app)
    cmd = group if command is None else group.commands[command]  # type: ignore[attr-defined]
    texts = [verdicts_help() if command is None else cmd.help or ""]  # the group shows verdicts_help()
    texts += [getattr(p, "help", None) or "" for p in cmd.params]
    if command is None:
        texts += [c.help or "" for c in group.commands.values()]  # type: ignore[attr-defined]
    return [t.replace("\\[", "[") for t in texts]


@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_help_fits_80_columns_and_breaks_only_between_words(command):
    args = ["--help"] if command is None else [command, "--help"]
    result = runner.invoke(app, args, env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    shown = set(_BOX.sub(" ", result.output).split())
    for text in _source_help(command):
        # the command list shows a command's first paragraph; words longer than a help column may be cut
        first = text.split("\n\n")[0] if command is None else text
        for word in first.split():
            if len(word) <= 24:
                assert word in shown, f"{word!r} is broken (or missing) in the help of {command or 'gpuanalyze'}"


def test_the_export_note_fits_80_columns(tmp_path):
    out = tmp_path / "t.json"
    result = runner.invoke(app, ["export", str(SAMPLES / "cpu_ddp_straggler.rank0.arrow"), "--chrome-trace", str(out)])
    assert result.exit_code == 0, result.output
    note = result.output[result.output.index("note: ") :].splitlines()
    assert " ".join(line.strip() for line in note).endswith("read one file per rank: add --split-ranks")
    assert len(note) == 2 and max(cell_len(line) for line in note) <= 80
