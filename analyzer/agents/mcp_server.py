"""`gpuanalyze mcp [ROOT ...]`: the analysis as read-only Model Context Protocol tools on stdio.

Each call runs in a worker process (``tool_worker``) whose process group is killed at the deadline: a hostile
trace is an error result, never the server's end. Nothing is written: what a call imports (a directory of Kineto
ranks) or keeps for a while lives in a directory removed after it. Knobs are environment variables.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from analyzer.agents.tool_worker import TOOLS
from analyzer.errors import GpuAnalyzeError
from analyzer.version import __version__

INSTRUCTIONS = (
    "gpuanalyze explains why a GPU training run is slow, from a recorded trace: a deterministic verdict with its "
    "evidence, what to change and what it saves. Start with list_traces, then analyze_trace."
)


def _knob(name: str, default: float) -> float:
    try:
        return max(float(os.environ.get(name) or default), 0.01)
    except ValueError:
        raise GpuAnalyzeError(f"{name} must be a number, not {os.environ[name]!r}") from None


def call(tool: str, roots: list[str], deadline: float, limit: int, **args: Any) -> str:
    """``tool`` run in a worker process within ``deadline`` seconds, its answer at most ``limit`` bytes; raises
    ToolError (an error result) on failure."""
    with tempfile.TemporaryDirectory(prefix="gpuanalyze-mcp-") as cache:
        worker = subprocess.Popen(
            [sys.executable, "-m", "analyzer.agents.tool_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "GPUANALYZE_CACHE": cache, "TMPDIR": cache},
            start_new_session=True,  # a group: its pool's processes are killed with it
            text=True,
        )
        try:
            out, _ = worker.communicate(json.dumps([tool, roots, args, limit]), timeout=deadline)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
            raise ToolError(f"{tool} ran past its {deadline:g} s (GPUANALYZE_MCP_TIMEOUT_S): stopped") from None
    try:
        reply = json.loads(out)
    except ValueError:
        raise ToolError(f"{tool}: the analysis process ended without an answer (exit {worker.returncode})") from None
    if "error" in reply:
        raise ToolError(reply["error"])
    return str(reply["text"])


def serve(roots: Sequence[Path]) -> None:
    """Serve the tools on stdio, reading only under ``roots`` (resolved now); raises GpuAnalyzeError."""
    tops = [str(r.resolve()) for r in roots]
    if bad := [r for r in tops if not Path(r).is_dir()]:
        raise GpuAnalyzeError(f"a root is a directory the tools may read under, not {', '.join(bad)}")
    deadline = _knob("GPUANALYZE_MCP_TIMEOUT_S", 300)
    limit = int(_knob("GPUANALYZE_MCP_MAX_KB", 256) * 1024)
    server = MCPServer("gpuanalyze", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
    for fn in TOOLS:  # the worker's functions: their signatures and docstrings are what the agent reads
        remote = functools.wraps(fn)(functools.partial(call, fn.__name__, tops, deadline, limit))
        server.add_tool(remote, annotations=read_only, structured_output=False)
    server.run("stdio")
