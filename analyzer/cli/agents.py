"""`gpuanalyze mcp [ROOT ...]`: the analysis as read-only tools for coding agents (docs/agents.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.base import app, fail
from analyzer.errors import GpuAnalyzeError


@app.command("mcp")
def mcp_cmd(
    roots: Annotated[list[Path] | None, typer.Argument(help="Directories the tools may read (default: here).")] = None,
) -> None:
    """Serve coding agents a Model Context Protocol server on stdio: read-only tools that list, analyse,
    compare and triage the traces under ROOTs, and nothing else (docs/agents.md)."""
    try:
        from analyzer.agents.mcp_server import serve

        serve(roots or [Path.cwd()])
    except ModuleNotFoundError as exc:
        fail(f"gpuanalyze mcp needs the mcp extra: pip install 'gpuanalyze[mcp]' ({exc.name} is missing)")
    except GpuAnalyzeError as exc:
        fail(str(exc))
