"""A newcomer's mistakes: each is one line that says what the input is and what to do, a non-zero exit,
no traceback, and nothing left behind."""

import pickle
import shlex
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from tests.conftest import ROOT, SAMPLES

runner = CliRunner()


def _one_error_line(result, says):
    lines = result.output.splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("gpuanalyze: error: ") and says in lines[0] and "Traceback" not in result.output
    return lines[0]


def test_profile_without_torch_is_one_line_naming_the_extra():
    code = "import sys; sys.modules['torch'] = None\nimport analyzer\nanalyzer.profile(None)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "gpuanalyze: analyzer.profile needs torch (not installed): pip install 'gpuanalyze[torch]'\n"
    extras = (ROOT / "pyproject.toml").read_text()
    assert '\ntorch = ["torch' in extras  # the extra the line names


def test_a_toml_or_text_file_is_said_to_be_one_not_json():
    line = _one_error_line(runner.invoke(app, [str(ROOT / "pyproject.toml")]), "it is a TOML or INI file")
    assert "JSON" not in line and "give a .arrow trace" in line
    _one_error_line(runner.invoke(app, [str(ROOT / "README.md")]), "it is a text file")


def test_a_pytorch_checkpoint_is_named_as_one(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.zeros(2)}, tmp_path / "model.pt")
    torch.save({"w": torch.zeros(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"a": 1}))
    for name in ("model.pt", "legacy.pt", "plain.pkl"):
        _one_error_line(runner.invoke(app, [str(tmp_path / name)]), "it is a PyTorch checkpoint, torch.save's zip")


def test_the_bundled_samples_folder_points_to_fleet_and_that_command_runs_as_printed(monkeypatch):
    monkeypatch.chdir(ROOT)
    line = _one_error_line(runner.invoke(app, ["sample_traces"]), "the directory mixes runs")
    printed = line.rsplit("rank them all with ", 1)[1]
    assert printed == "gpuanalyze fleet sample_traces"
    ranked = runner.invoke(app, shlex.split(printed)[1:], env={"COLUMNS": "80"})
    assert ranked.exit_code == 0 and f"{len(list(SAMPLES.glob('*.arrow'))) - 1} run(s)" in ranked.output


def test_run_of_a_command_that_never_trains_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUANALYZE_RUN", raising=False)
    result = runner.invoke(app, ["run", "--", "true"])
    assert result.exit_code == 0 and "no trace" in result.output
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "out").mkdir()  # a directory the user made is theirs: kept
    assert runner.invoke(app, ["run", "--out", "out", "--", "true"]).exit_code == 0
    assert (tmp_path / "out").is_dir()
