"""`gpuanalyze mcp` driven by the MCP SDK's own client over a real stdio subprocess: the tools an agent sees,
each tool on bundled and synthetic traces, the root rule with hostile paths, hostile traces, the output and time
bounds, and nothing written (the tests that make many calls are in the slow tier). The tools in-process are
tests/test_tool_worker.py."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, SAMPLES, make_row, write_trace
from tests.hostile import corpus as hostile
from tests.kineto_fixtures import two_step_trace, write

#: The SDK is imported by the tests that use it (~0.8 s of CPU), not by every test process that collects this module.
pytestmark = pytest.mark.skipif(
    not (importlib.util.find_spec("mcp") and importlib.util.find_spec("anyio")), reason="needs the mcp extra"
)

#: Most seconds one call may take on a loaded machine (load 8+ on 2 cores) before the test calls it a hang.
CALL_S = 120


def serve(root: Path, body: Callable[[Any], Awaitable[None]], tmp: Path, **env: str) -> None:
    """Start `python -m analyzer mcp ROOT` with HOME and TMPDIR under ``tmp``, and run ``body(client)``."""
    import anyio
    import mcp

    for d in ("home", "tmp"):
        (tmp / d).mkdir(exist_ok=True)
    env = {"HOME": str(tmp / "home"), "TMPDIR": str(tmp / "tmp"), **env}
    params = mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "analyzer", "mcp", str(root)], env=env, cwd=str(ROOT)
    )

    async def run() -> None:
        async with mcp.Client(params, read_timeout_seconds=CALL_S) as client:
            await body(client)

    anyio.run(run)


async def call(client: Any, tool: str, **args: Any) -> tuple[bool, str]:
    import anyio

    with anyio.fail_after(CALL_S):
        result = await client.call_tool(tool, args)
    return result.is_error, result.content[0].text


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every entry beneath ``root`` with its size and modification time."""
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture
def samples(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(SAMPLES, root, ignore=shutil.ignore_patterns("*.py", "*.md"))
    return root


@pytest.mark.slow  # spawns processes (the marker's definition, pyproject.toml)
def test_an_agent_sees_five_read_only_tools_that_say_what_they_return_and_when(samples, tmp_path):
    async def body(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"list_traces", "analyze_trace", "compare_runs", "triage_fleet", "explain_finding"}
        for t in tools.values():
            assert "Use it" in t.description and len(t.description) > 150, t.name
            assert t.annotations.read_only_hint and not t.annotations.open_world_hint
        assert tools["analyze_trace"].input_schema["required"] == ["path"]
        assert tools["compare_runs"].input_schema["required"] == ["before", "after"]
        assert "fail_if_slower_pct" in tools["compare_runs"].input_schema["properties"]

    serve(samples, body, tmp_path)


@pytest.mark.slow
def test_each_tool_on_the_bundled_samples_answers_as_the_cli_does(samples, tmp_path):
    from typer.testing import CliRunner

    from analyzer.cli import app

    trace = samples / "h200_small_batch.arrow"
    cli = CliRunner().invoke(app, [str(trace), "--json"])
    before = listing(samples)

    async def body(client):
        error, text = await call(client, "list_traces")
        runs = {r["run"]: r["path"] for r in json.loads(text)["runs"]}
        assert not error and "h200_small_batch.arrow" in runs and runs["cpu_ddp_straggler.rank*.arrow"]
        error, text = await call(client, "analyze_trace", path=runs["h200_small_batch.arrow"])
        assert not error and json.loads(text) == json.loads(cli.output)
        error, text = await call(client, "explain_finding", path="h200_small_batch.arrow")
        finding = json.loads(text)["finding"]
        assert not error and finding["bottleneck"] == "batch_size" and finding["evidence"][0]["source"]
        error, text = await call(
            client, "compare_runs", before="cpu_healthy.arrow", after="cpu_healthy.arrow", fail_if_slower_pct=5
        )
        assert not error and json.loads(text)["gate"]["failed"] is False
        error, text = await call(client, "triage_fleet", directory=".")
        fleet = json.loads(text)
        assert not error and len(fleet["runs"]) == len(runs) and fleet["runs"][0]["rank"] == 1

    serve(samples, body, tmp_path)
    assert listing(samples) == before


@pytest.mark.slow
def test_paths_out_of_the_root_fifos_and_devices_are_refused_and_the_server_answers_on(samples, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    write_trace(outside / "private.arrow", [make_row(i) for i in range(12)])
    (samples / "out.arrow").symlink_to(outside / "private.arrow")
    (samples / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(samples / "fifo.json")
    refused = {
        "../outside/private.arrow": "outside the roots",
        str(outside / "private.arrow"): "outside the roots",
        "out.arrow": "outside the roots",
        "zero.json": "outside the roots",
        "/dev/zero": "outside the roots",
        "fifo.json": "not a regular file or directory",
    }

    async def body(client):
        for path, why in refused.items():
            error, text = await call(client, "analyze_trace", path=path)
            assert error and why in text and "refused" in text, (path, text)
        error, text = await call(client, "triage_fleet", directory=".")  # the link out is beneath it
        assert error and "a link out of the roots" in text
        error, text = await call(client, "analyze_trace", path="cpu_healthy.arrow")
        assert not error and json.loads(text)["bottleneck"]

    serve(samples, body, tmp_path)


@pytest.mark.slow
def test_a_hostile_trace_is_an_error_result_and_the_next_call_is_answered(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    hostile._zeros_gz(root / "zeros.json.gz", 200)
    (root / "garbage.arrow").write_bytes(b"not a trace")
    (root / "cut.json").write_text('{"traceEvents": [')
    end = ('{"status":' + hostile._deep(100_000) + "}").encode()
    hostile._raw_arrow(root / "end_deep.arrow", hostile._table(hostile._rows()), {}, end)
    write_trace(root / "good.arrow", [make_row(i) for i in range(12)])

    async def body(client):
        for name, why in (
            ("zeros.json.gz", "compression bomb"),
            ("garbage.arrow", "not an Arrow IPC stream"),
            ("cut.json", "not valid JSON"),
            ("end_deep.arrow", "corrupt end marker"),
        ):
            error, text = await call(client, "analyze_trace", path=name)
            assert error and why in text and "Traceback" not in text, (name, text)
            error, text = await call(client, "analyze_trace", path="good.arrow")
            assert not error and json.loads(text)["steps"] > 0

    serve(root, body, tmp_path)


@pytest.mark.slow  # a server of its own (~1.7 s of CPU); the bound's cut is tests/test_tool_worker.py's, in-process
def test_a_result_over_the_size_bound_is_cut_to_valid_json_that_says_so(samples, tmp_path):
    async def body(client):
        error, text = await call(client, "analyze_trace", path="h200_small_batch.arrow")
        assert not error and len(text.encode()) <= 8 * 1024  # the whole report is 10.4 KiB
        assert "every list cut to its first" in json.loads(text)["truncated"]

    serve(samples, body, tmp_path, GPUANALYZE_MCP_MAX_KB="8")


@pytest.mark.slow  # spawns processes (the marker's definition, pyproject.toml)
def test_a_call_past_its_deadline_is_stopped_and_the_server_answers_on(samples, tmp_path):
    async def body(client):
        error, text = await call(client, "analyze_trace", path="h200_small_batch.arrow")
        assert error and "ran past its 0.1 s" in text
        assert len((await client.list_tools()).tools) == 5

    serve(samples, body, tmp_path, GPUANALYZE_MCP_TIMEOUT_S="0.1")
    assert not any((tmp_path / "tmp").iterdir())  # the killed call's directory went with it


@pytest.mark.slow
def test_nothing_is_written_under_the_root_nor_in_the_user_cache(tmp_path):
    """A directory of Kineto ranks is imported to Arrow on the way (the CLI keeps that in the user cache)."""
    root = tmp_path / "root"
    (root / "ranks").mkdir(parents=True)
    for rank in range(2):
        write(root / "ranks" / f"trace.rank{rank}.json", two_step_trace(rank=rank, world=2))
    write(root / "one.json.gz", two_step_trace(), gz=True)
    before = listing(root)

    async def body(client):
        for path in ("ranks", "one.json.gz"):
            error, text = await call(client, "analyze_trace", path=path)
            assert not error and json.loads(text)["trace"].endswith(path), text
        error, text = await call(client, "triage_fleet", directory=".")
        assert not error and len(json.loads(text)["runs"]) == 2

    serve(root, body, tmp_path)
    assert listing(root) == before
    assert not any((tmp_path / "home").iterdir()) and not any((tmp_path / "tmp").iterdir())
