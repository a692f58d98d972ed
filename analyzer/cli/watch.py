"""`gpuanalyze watch TRACE|DIR`: a live view of a run while it trains."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analyzer.cli.base import app, fail
from analyzer.errors import GpuAnalyzeError
from analyzer.render.safe import clean

if TYPE_CHECKING:
    from analyzer.run.live import Snapshot

_PART_NAMES = {
    "wall_ms": "step (wall)",
    "data_wait_ms": "data wait",
    "h2d_ms": "host->device copy",
    "forward_ms": "forward",
    "backward_ms": "backward",
    "optimizer_ms": "optimizer",
    "sync_ms": "sync",
    "other_ms": "other",
}


@app.command("watch")
def watch_cmd(
    trace: Annotated[
        Path,
        typer.Argument(help="A trace being written (.arrow), or the directory of a run (`gpuanalyze run --out`)."),
    ],
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 1.0,
) -> None:
    """Watch a run while it trains: steps so far, rolling step time by phase, the current verdict.

    Ends when the run ends (the full report is printed) or on Ctrl-C (the run goes on)."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from analyzer.run.live import snapshot

    if not 0.05 <= interval <= 3600:
        fail("--interval must be between 0.05 and 3600 seconds")
    console = Console(highlight=False)
    shot: Snapshot | None = None
    try:
        with Live(_waiting(trace), console=console, refresh_per_second=4, transient=False) as live:
            while True:
                try:
                    shot = snapshot(trace)
                except GpuAnalyzeError:
                    live.update(Text(""), refresh=True)  # the error is the only thing said: nothing on stdout
                    raise
                live.update(_view(shot))
                if shot.ended:
                    break
                time.sleep(interval)
    except KeyboardInterrupt:
        still = shot is not None and shot.live
        console.print(f"stopped watching{'; the run goes on' if still else ''}", markup=False)
        return
    except GpuAnalyzeError as exc:
        fail(str(exc))
    _finish(trace, console)


def _finish(trace: Path, console: Any) -> None:
    from analyzer.run.live import trace_files
    from analyzer.run.summary import analyze_quietly

    files = trace_files(trace)
    report, problem = analyze_quietly(files[0]) if files else (None, "no trace")
    if report is None:
        console.print(clean(f"the run ended; no analysis ({problem})"), markup=False)
        return
    from analyzer.render.terminal import render_terminal

    console.print()
    console.print(render_terminal(report))


def _waiting(path: Path) -> Any:
    from rich.text import Text

    return Text(clean(f"gpuanalyze watch: waiting for {path} to appear"), style="dim")


def _view(shot: Snapshot) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    if not shot.files:
        return _waiting(shot.path)
    state = (
        f"finished ({clean(shot.end_status)})"
        if shot.complete
        else "still being written"
        if shot.live
        else "ended without closing its trace"
    )
    head = Text()
    head.append(f"{shot.steps} steps", style="bold")
    head.append(f" on {shot.ranks} rank(s)")
    if shot.elapsed_s is not None:
        head.append(f" in {_duration(shot.elapsed_s)}")
    head.append(f"   [{state}]")
    if shot.bottleneck is not None:
        head.append("\nverdict: " if shot.complete else "\nverdict so far: ")
        head.append(clean(shot.bottleneck.upper()), style="bold")
        if shot.confidence is not None:
            head.append(clean(f" (confidence {shot.confidence})"))
    if shot.verdict:
        head.append("\n" + clean(shot.verdict))
    parts: list[Any] = [Panel(head, title=Text(clean(f"gpuanalyze watch: {shot.path}")), expand=False)]
    if shot.rolling_ms:
        from analyzer.run.live import ROLLING_STEPS

        table = Table(title=f"last {ROLLING_STEPS} steps", title_justify="left")
        table.add_column("part")
        table.add_column("median ms/step", justify="right")
        table.add_column("share", justify="right")
        wall = shot.rolling_ms[0][1]
        for name, value in shot.rolling_ms:
            share = "" if name == "wall_ms" or wall <= 0 else f"{min(1.0, value / wall):.0%}"
            table.add_row(Text(clean(_PART_NAMES.get(name, name))), f"{value:.2f}", share)
        parts.append(table)
    for note in shot.notes:
        parts.append(Text(clean(f"note: {note}"), style="dim"))
    return Group(*parts)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
