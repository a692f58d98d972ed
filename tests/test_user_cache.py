"""The user cache the XDG way, and every command from an empty HOME (a new container, a CI runner)."""

from __future__ import annotations

import stat

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from analyzer.machine.ceilings_store import default_path, prepare_directory
from analyzer.machine.user_cache import cache_home
from tests.conftest import SAMPLES

runner = CliRunner()


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_the_ceilings_directory_is_created_0700_from_an_empty_home(empty_home):
    path = default_path()
    assert path == empty_home / ".cache" / "gpuanalyze" / "ceilings.json"
    prepare_directory(path)
    assert _mode(empty_home / ".cache") == 0o700 and _mode(path.parent) == 0o700


def test_xdg_cache_home_is_honoured_and_a_relative_one_ignored(empty_home, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "gpuanalyze" / "ceilings.json"
    prepare_directory(default_path())
    assert _mode(tmp_path / "xdg") == 0o700
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert cache_home() == empty_home / ".cache"


SAMPLE = str(SAMPLES / "cpu_data_loading.arrow")


@pytest.mark.parametrize(
    "args",
    [
        [SAMPLE],
        ["analyze", SAMPLE, "--json"],
        ["export", SAMPLE, "--chrome-trace", "{tmp}/out.json"],
        ["fleet", str(SAMPLES), "--workers", "1"],
        ["compare", SAMPLE, SAMPLE],
        ["env"],
        ["run", "--print-env"],
    ],
    ids=lambda a: a[0] if not a[0].startswith("/") else "trace",
)
def test_every_command_runs_from_an_empty_home(empty_home, tmp_path, args):
    result = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert "Traceback" not in result.output and "does not exist" not in result.output, result.output
    assert result.exit_code in (0, 1), result.output  # 1: a verdict that gates (never a crash, never 2)


@pytest.mark.slow
def test_bench_saves_ceilings_from_an_empty_home(empty_home):
    pytest.importorskip("torch")
    result = runner.invoke(app, ["bench", "matmul", "--backend", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    assert (empty_home / ".cache" / "gpuanalyze" / "ceilings.json").is_file()
    assert _mode(empty_home / ".cache" / "gpuanalyze") == 0o700
