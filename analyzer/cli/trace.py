"""Trace conversion: `gpuanalyze import` (PyTorch profiler JSON to a gpuanalyze trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.app import app, fail
from analyzer.errors import GpuAnalyzeError


@app.command("import")
def import_cmd(
    trace: Annotated[Path, typer.Argument(help="A PyTorch profiler (Kineto) trace: .json or .json.gz.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="The gpuanalyze trace to write (.arrow).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")] = False,
) -> None:
    """Convert a PyTorch profiler trace to a gpuanalyze trace (never writes over its input)."""
    from gpuanalyze.ingest.kineto_import import load_kineto, write_trace_file

    try:
        loaded = load_kineto(trace)
        write_trace_file(loaded, out, force=force)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror}")
    typer.echo(f"{out}: {loaded.frame.height} step(s) from {trace}")
