"""`gpuanalyze watch TRACE|DIR`: a live view of a run while it trains."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analyzer.cli import options
from analyzer.cli.base import app, fail
from analyzer.errors import GpuAnalyzeError
from analyzer.render.safe import clean

if TYPE_CHECKING:
    from analyzer.run.live import Snapshot


@app.command("watch")
def watch_cmd(
    trace: Annotated[
        Path,
        typer.Argument(help="A trace being written (.arrow), or the directory of a run (`gpuanalyze run --out`)."),
    ],
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 1.0,
    width: options.Width = None,
) -> None:
    """Watch a run while it trains: steps so far, rolling step time by phase, the current verdict.

    Ends when the run ends (the full report is printed) or on Ctrl-C (the run goes on)."""
    from analyzer.render.console import report_console
    from analyzer.run.live import Watch

    if not 0.05 <= interval <= 3600:
        fail("--interval must be between 0.05 and 3600 seconds")
    console = report_console(width)
    watch = Watch(trace)
    try:
        _follow(watch, console, interval)
        _finish(watch, console)
    finally:
        watch.close()


def _follow(watch: Any, console: Any, interval: float) -> None:
    """Refresh until the run ends: a live panel in a terminal, a line per change when piped (flushed
    as it is written, so a log or a pipe sees the run as it goes)."""
    from rich.live import Live
    from rich.text import Text

    shot: Snapshot | None = None
    try:
        if not console.is_terminal:
            _lines(watch, interval, console.width)
            return
        with Live(_waiting(watch.path), console=console, refresh_per_second=4, transient=False) as live:
            while True:
                try:
                    shot = watch.snapshot()
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
        raise typer.Exit(0) from None
    except GpuAnalyzeError as exc:
        fail(str(exc))


def _lines(watch: Any, interval: float, width: int) -> None:
    said: set[str] = set()
    last = None
    while True:
        shot = watch.snapshot()
        line = _line(shot)
        if line != last:
            _say(line, width)
            last = line
        for note in shot.notes:
            if note not in said:
                said.add(note)
                _say(f"note: {note}", width)
        if shot.ended:
            return
        time.sleep(interval)


def _say(text: str, width: int) -> None:
    import textwrap

    lines = textwrap.wrap(clean(text), width=width, subsequent_indent="  ", break_long_words=False)
    print("\n".join(lines), flush=True)


def _line(shot: Snapshot) -> str:
    if not shot.files:
        return f"gpuanalyze watch: waiting for {shot.path} to appear"
    state = f"finished ({shot.end_status})" if shot.complete else "still being written" if shot.live else "ended"
    text = f"{shot.steps} steps on {shot.ranks} rank(s)"
    if shot.elapsed_s is not None:
        text += f" in {_duration(shot.elapsed_s)}"
    text += f" [{state}]"
    if shot.bottleneck is not None:
        text += f"; verdict{'' if shot.complete else ' so far'}: {shot.bottleneck.upper()}"
        if shot.confidence is not None:
            text += f" (confidence {shot.confidence})"
    return text


def _finish(watch: Any, console: Any) -> None:
    from analyzer.api import analyze

    source = watch.final()
    report, problem = None, "no trace"
    if source is not None:
        try:
            report = analyze(source)
        except GpuAnalyzeError as exc:
            problem = str(exc)
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

    from analyzer.render.words import PART_LABELS

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
            table.add_row(Text(clean({"wall_ms": "step (wall)", **PART_LABELS}.get(name, name))), f"{value:.2f}", share)
        parts.append(table)
    for note in shot.notes:
        parts.append(Text(clean(f"note: {note}"), style="dim"))
    return Group(*parts)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
