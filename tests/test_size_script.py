"""scripts/size.py counts what issue 38 counts (lines as `wc -l`, docs bytes, every command's options) and fails
past a limit only when the gate is enforced."""

import importlib.util
import re
import subprocess

import pytest

from tests.conftest import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("size", ROOT / "scripts" / "size.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lines_and_bytes_are_counted_as_wc_counts_them(tmp_path):
    size = _script()
    for folder, text in (("analyzer", "a\nb\n"), ("ingest", "c"), ("kernels", "d\n")):
        (tmp_path / folder / "sub").mkdir(parents=True)
        (tmp_path / folder / "sub" / "m.py").write_text(text)
        (tmp_path / folder / "notes.txt").write_text("not code\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_bytes(b"x" * 10)
    (tmp_path / "docs" / "b.png").write_bytes(b"x" * 99)
    assert size.product_lines(tmp_path) == 3  # wc -l counts newlines: the last line of "c" has none
    assert size.docs_bytes(tmp_path) == 10


def test_every_option_of_every_command_is_counted():
    from typer.testing import CliRunner

    from analyzer.cli import app

    counts = _script().cli_options()
    help_text = CliRunner().invoke(app, ["compare", "--help"], env={"COLUMNS": "200"}).output
    listed = set(re.findall(r"^\W+(--[a-z-]+)", help_text, re.M))  # each option's own row
    assert counts["compare"] == len(listed - {"--help"})
    assert "mcp" in counts and "--help" not in str(counts)


@pytest.mark.parametrize(("gate", "code"), [("warn", 0), ("enforce", 1), (None, 1)])
def test_past_a_limit_fails_unless_told_to_warn(gate, code, monkeypatch, capsys):
    size = _script()
    if gate is None:
        monkeypatch.delenv("SIZE_GATE", raising=False)  # the default enforces
    else:
        monkeypatch.setenv("SIZE_GATE", gate)
    monkeypatch.setattr(size, "LIMITS", {"product lines": 10**9, "docs bytes": 10**9, "CLI options": 1})
    assert size.main() == code
    out = capsys.readouterr()
    assert "CLI options:" in out.out and out.err.strip().endswith("> 1") and "lines" not in out.err


def test_ci_runs_it():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python scripts/size.py" in ci and "SIZE_GATE" in ci
    result = subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], capture_output=True, check=False)
    assert result.returncode == 0, result.stderr
