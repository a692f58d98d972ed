"""`gpuanalyze export TRACE --chrome-trace OUT`: the trace as Chrome/Perfetto trace events."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from analyzer.cli.base import app, fail, note
from analyzer.errors import GpuAnalyzeError


def rank_path(out: Path, rank: int) -> Path:
    """``trace.json.gz`` -> ``trace.rank3.json.gz`` (Kineto's one file per rank, for HTA and `import`)."""
    name = out.name
    for suffix in (".json.gz", ".json", ".gz"):
        if name.lower().endswith(suffix):
            return out.with_name(f"{name[: -len(suffix)]}.rank{rank}{name[-len(suffix) :]}")
    return out.with_name(f"{name}.rank{rank}")


@app.command("export")
def export_cmd(
    trace: Annotated[
        Path, typer.Argument(help="A trace: .arrow, a PyTorch profiler .json[.gz], or a directory of per-rank traces.")
    ],
    chrome_trace: Annotated[
        Path,
        typer.Option(
            "--chrome-trace",
            help="Write Chrome trace events here (.json, or .json.gz compressed): open in ui.perfetto.dev, "
            "chrome://tracing or HTA.",
        ),
    ],
    split_ranks: Annotated[
        bool,
        typer.Option(
            "--split-ranks",
            help="One file per rank (OUT with .rank<N> before .json), as the PyTorch profiler writes them: what HTA "
            "and `gpuanalyze import` read. Default: every rank in one file, one process per rank (for Perfetto).",
        ),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing output files.")] = False,
) -> None:
    """Export a trace as Chrome trace events (Kineto layout: opens in Perfetto, loads in HTA)."""
    from typing import BinaryIO

    from analyzer.files import check_target, write_file
    from analyzer.render.chrome_trace import write_chrome_trace
    from analyzer.render.safe import clean
    from gpuanalyze.ingest.sources import load_any
    from gpuanalyze.ingest.trace import schema as S

    compress = chrome_trace.name.lower().endswith(".gz")
    try:
        loaded = load_any(trace)
        if loaded.frame.height == 0:
            skipped = "; ".join(n for n in loaded.notes if n.startswith("skipped"))
            raise GpuAnalyzeError(f"{trace}: no usable step rows to export{f' ({skipped})' if skipped else ''}")
        ranks = sorted(loaded.frame.get_column(S.RANK).unique().to_list())
        targets = [(rank_path(chrome_trace, r), [r]) for r in ranks] if split_ranks else [(chrome_trace, ranks)]
        for path, _ in targets:  # refuse before writing anything
            check_target(path, force=force, inputs=[trace])
        for path, chosen in targets:

            def write(fh: BinaryIO, chosen: list[int] = chosen) -> None:
                write_chrome_trace(loaded, fh, ranks=chosen, compress=compress)

            write_file(path, write, force=force)
    except GpuAnalyzeError as exc:
        fail(str(exc))
    for path, chosen in targets:
        typer.echo(clean(f"{path}: {len(chosen)} rank(s), {loaded.frame.height:,} step row(s) in the trace"))
    if len(ranks) > 1 and not split_ranks:
        note(
            "every rank is one process in one file (for Perfetto); HTA and `gpuanalyze import` read "
            "one file per rank: add --split-ranks"
        )
