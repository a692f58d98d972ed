"""The MCP tools in-process (analyzer/agents/tool_worker.py): the root rule, what each tool returns (the CLI's
JSON), the output bound. The server over a real stdio subprocess is tests/test_mcp_server.py."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket

import pytest
from msgspec import to_builtins
from typer.testing import CliRunner

from analyzer.agents import tool_worker as W
from analyzer.cli import app
from analyzer.errors import GpuAnalyzeError
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import SAMPLES, make_row, write_trace
from tests.hostile import corpus as hostile
from tests.kineto_fixtures import two_step_trace, write

runner = CliRunner()


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A root with a trace, a subdirectory, and a directory outside it; the worker reads under the root only."""
    inside, outside = tmp_path / "root", tmp_path / "outside"
    (inside / "sub").mkdir(parents=True)
    outside.mkdir()
    write_trace(inside / "run.arrow", [make_row(i) for i in range(12)])
    write_trace(outside / "secret.arrow", [make_row(i) for i in range(12)])
    monkeypatch.setattr(W, "ROOTS", [str(inside.resolve())])
    return inside


@pytest.mark.parametrize("given", ["run.arrow", "sub/../run.arrow", "./sub", "."])
def test_paths_under_the_root_are_read(root, given):
    assert W.inside(given).is_relative_to(root.resolve())


def test_an_absolute_path_under_the_root_is_read(root):
    assert W.inside(str(root / "run.arrow")) == (root / "run.arrow").resolve()


@pytest.mark.parametrize("given", ["../outside/secret.arrow", "sub/../../outside/secret.arrow", "/etc/passwd", "/"])
def test_a_path_that_resolves_outside_the_root_is_refused(root, given):
    with pytest.raises(GpuAnalyzeError, match="outside the roots"):
        W.inside(given)


def test_a_link_inside_the_root_pointing_out_is_refused(root):
    (root / "link.arrow").symlink_to(root.parent / "outside" / "secret.arrow")
    (root / "linked_dir").symlink_to(root.parent / "outside")
    for given in ("link.arrow", "linked_dir", "linked_dir/secret.arrow"):
        with pytest.raises(GpuAnalyzeError, match="outside the roots"):
            W.inside(given)


def test_a_directory_or_rank_file_beside_a_link_out_is_refused(root):
    """The analysis follows trace-named links in a directory it reads, and an .arrow file's rank siblings."""
    write_trace(root / "sub" / "t.rank0.arrow", [make_row(i) for i in range(12)])
    (root / "sub" / "t.rank1.arrow").symlink_to(root.parent / "outside" / "secret.arrow")
    for given in ("sub", "sub/t.rank0.arrow", "."):
        with pytest.raises(GpuAnalyzeError, match="a link out of the roots"):
            W.inside(given)
    write_trace(root / "sub" / "other.arrow", [make_row(i) for i in range(12)])
    assert W.inside("sub/other.arrow").name == "other.arrow"  # not a rank sibling of the link
    (root / "sub" / "t.rank1.arrow").unlink()
    (root / "sub" / "t.rank1.arrow").symlink_to(root / "run.arrow")  # a link within the root is fine
    assert W.inside("sub").name == "sub"


def test_a_directory_that_cannot_be_listed_is_passed_over_as_the_analysis_does(root, monkeypatch):
    (root / "sub" / "locked").mkdir()
    scandir = os.scandir

    def refusing(path):  # as for a user without read permission (this suite runs as root in CI)
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(W.os, "scandir", refusing)
    assert W.inside("sub").name == "sub"


def test_fifos_devices_and_sockets_are_refused_without_opening_them(root, tmp_path):
    os.mkfifo(root / "fifo.json")  # opening it would block
    (root / "zero.json").symlink_to("/dev/zero")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "s.arrow"))
        with pytest.raises(GpuAnalyzeError, match="not a regular file or directory"):
            W.inside("s.arrow")
    with pytest.raises(GpuAnalyzeError, match="not a regular file or directory"):
        W.inside("fifo.json")
    for given in ("zero.json", "/dev/zero"):
        with pytest.raises(GpuAnalyzeError, match="outside the roots"):
            W.inside(given)


@pytest.mark.parametrize("given", ["missing.arrow", "missing/../run.arrow", "a\x00b"])
def test_a_missing_or_malformed_path_is_one_clear_error(root, given):
    with pytest.raises(GpuAnalyzeError, match="no such file or directory"):
        W.inside(given)


def test_analyze_trace_is_the_cli_json(root):
    trace = str((root / "run.arrow").resolve())
    cli = runner.invoke(app, [trace, "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(W.bounded(W.analyze_trace("run.arrow"), 1 << 20)) == json.loads(cli.output)


@pytest.mark.skipif(
    importlib.util.find_spec("gpuanalyze.ingest.trace.redact") is None,
    reason="the one redaction of every command line read from a trace (gpuanalyze.ingest.trace.redact) is on main",
)
def test_a_secret_on_a_traces_command_line_never_reaches_the_agent(root):
    secret = "hf_" + "a1" * 15
    run = json.dumps({"argv": f"train.py --hf-token {secret} --lr 3e-4"}).encode()
    hostile._raw_arrow(root / "leak.arrow", hostile._table(hostile._rows()), {S.META_RUN: run}, b'{"status":"ok"}')
    text = W.bounded(W.analyze_trace("leak.arrow"), 1 << 20)
    assert secret not in text and "--hf-token ***" in text


def test_explain_finding_gives_the_verdicts_finding_with_its_thresholds_sources_and_range(monkeypatch):
    monkeypatch.setattr(W, "ROOTS", [str(SAMPLES)])
    report = to_builtins(W.analyze_trace("h200_small_batch.arrow"))
    out = to_builtins(W.explain_finding("h200_small_batch.arrow"))
    assert out["bottleneck"] == report["bottleneck"] == out["finding"]["bottleneck"]
    assert out["finding"] == report["findings"][0] and out["other_findings"] == [
        f["bottleneck"] for f in report["findings"]
    ]
    assert out["finding"]["evidence"] and all(
        e["source"] and e["threshold"] is not None for e in out["finding"]["evidence"]
    )
    low, mid, high = (out["finding"][f"projected_step_time_ms{s}"] for s in ("_low", "", "_high"))
    assert low <= mid <= high <= out["finding"]["current_step_time_ms"]
    with pytest.raises(GpuAnalyzeError, match=r"no finding 'sync'.*its findings"):
        W.explain_finding("h200_small_batch.arrow", "sync")


def test_list_traces_names_every_readable_run_with_a_path_the_other_tools_take(root):
    shutil.copy(SAMPLES / "cpu_healthy.arrow", root / "sub")
    write(root / "sub" / "kineto.json", two_step_trace())
    (root / "notes.txt").write_text("not a trace")
    listed = to_builtins(W.list_traces("."))
    assert sorted(r["run"] for r in listed["runs"]) == ["run.arrow", "sub/cpu_healthy.arrow", "sub/kineto.json"]
    assert all(W.inside(r["path"]) for r in listed["runs"])


def test_compare_runs_carries_the_gates_answer_and_refuses_run_option_files(root):
    write_trace(root / "slow.arrow", [make_row(i, wall=40.0, fwd=27.0) for i in range(12)])
    out = to_builtins(W.compare_runs("run.arrow", "slow.arrow", fail_if_slower_pct=5))
    assert out["gate"]["failed"] is True and out["gate"]["exit_code"] == 1
    assert W.compare_runs("run.arrow", "run.arrow").gate is None
    (root / "a.toml").write_text('name = "a"\nhours_per_run = 1\n')
    with pytest.raises(GpuAnalyzeError, match="not TOML"):
        W.compare_runs("a.toml", "run.arrow")


def test_a_result_over_the_bound_keeps_valid_json_with_its_lists_cut_and_says_so():
    data = {"runs": [{"name": f"run{i}", "tags": list(range(20))} for i in range(5000)], "root": "r"}
    text = W.bounded(data, 64 * 1024)
    out = json.loads(text)
    assert len(text.encode()) <= 64 * 1024 and out["root"] == "r"
    assert 1 <= len(out["runs"]) < 5000 and "every list cut to its first" in out["truncated"]
    small = {"a": 1}
    assert json.loads(W.bounded(small, 1024)) == small
    cut = W.bounded({"note": "x" * 10_000}, 1024)
    assert len(cut.encode()) <= 1024 and cut.endswith("[truncated at 1,024 bytes]")


def test_gpuanalyze_mcp_refuses_a_root_that_is_not_a_directory(tmp_path):
    result = runner.invoke(app, ["mcp", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "a root is a directory" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_gpuanalyze_mcp_without_the_sdk_says_which_extra_to_install(tmp_path, monkeypatch):
    import sys

    for name in ("mcp", "mcp.server.mcpserver"):  # as if `pip install 'gpuanalyze[mcp]'` had not been run
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "analyzer.agents.mcp_server", raising=False)
    result = runner.invoke(app, ["mcp", str(tmp_path)])
    assert result.exit_code == 2 and "pip install 'gpuanalyze[mcp]'" in result.output
