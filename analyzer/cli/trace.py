"""Trace conversion: `gpuanalyze import` (PyTorch profiler JSON or Nsight Systems captures to gpuanalyze traces)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli import options
from analyzer.cli.base import app, fail
from analyzer.errors import GpuAnalyzeError
from analyzer.render.safe import clean


@app.command("import")
def import_cmd(
    trace: Annotated[
        str,
        typer.Argument(
            help="A PyTorch profiler (Kineto) trace (.json or .json.gz), an Nsight Systems capture (.sqlite export; "
            ".nsys-rep/.qdrep with nsys on PATH), or a directory of them (one rank a file; nsys captures ranked by "
            "name)."
        ),
    ],
    out: Annotated[
        str,
        typer.Option(
            "-o", "--out", help="The .arrow file to write; for a directory, an existing directory (one file per rank)."
        ),
    ],
    force: Annotated[bool, typer.Option("--force", help="Overwrite outputs that exist.")] = False,
    max_bytes: options.MaxBytes = None,
    engine: options.Engine = "local",
    workers: options.Workers = None,
    step_range: options.StepRange = None,
) -> None:
    """Convert PyTorch profiler traces or an Nsight Systems capture to gpuanalyze traces (never writes over its
    input or, without --force, over any file; a directory is imported in parallel and up-to-date outputs are
    reused)."""
    from analyzer.measure import storage

    try:
        limit = options.max_bytes(max_bytes)
        if storage.is_dir(trace):
            _import_dir(trace, out, force=force, max_bytes=limit, engine=engine, workers=workers)
            return
        from gpuanalyze.ingest.kineto.parse import load_kineto
        from gpuanalyze.ingest.nsys.load import is_nsys_path
        from gpuanalyze.ingest.sources import load_nsys
        from gpuanalyze.ingest.timeline.step_rows import write_trace_file
        from gpuanalyze.ingest.trace.byte_source import ReadLimits

        if storage.is_url(trace) or storage.is_url(out):
            raise GpuAnalyzeError("URLs are read and written for directories (gpuanalyze import DIR -o OUTDIR)")
        if is_nsys_path(Path(trace)):
            loaded = load_nsys(Path(trace), ReadLimits(max_bytes=limit), step_range)
        elif step_range is not None:
            raise GpuAnalyzeError("--step-range is for Nsight Systems captures (.sqlite, .nsys-rep)")
        else:
            loaded = load_kineto(Path(trace), ReadLimits(max_bytes=limit))
        write_trace_file(loaded, Path(out), force=force)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror}")
    typer.echo(clean(f"{out}: {loaded.frame.height} step(s) from {trace}"))


def _import_dir(source: str, out: str, *, force: bool, max_bytes: int | None, engine: str, workers: int | None) -> None:
    from analyzer.measure.inputs import import_dir
    from gpuanalyze.ingest.trace.byte_source import ReadLimits

    results, notes = import_dir(
        source, out, engine=engine, workers=workers, limits=ReadLimits(max_bytes=max_bytes), force=force
    )
    for res in results:
        how = "reused (up to date)" if res.reused else f"{res.steps} step(s)"
        typer.echo(clean(f"{res.arrow}: {how}, rank {','.join(map(str, res.ranks)) or '?'} from {res.source}"))
    for note in notes:
        typer.echo(clean(f"note: {note}"), err=True)
    typer.echo(clean(f"{len(results)} rank file(s) in {out}; analyse them with: gpuanalyze {out}"))
