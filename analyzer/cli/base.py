"""The Typer app, its one-line error exit and the output helper every command shares.

Commands live in the sibling modules and import what they need inside their bodies, so
``gpuanalyze --version`` and the planning commands start without polars, pyarrow or numpy.
"""

from __future__ import annotations

import inspect
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from analyzer.version import __version__

_GROUP_OPTIONS = {"--help", "-h", "--version", "--install-completion", "--show-completion"}


def plain_help(text: str | None) -> str | None:
    """Help as plain prose for Rich: a docstring's line breaks inside a paragraph removed (Rich then
    wraps each paragraph to the terminal, never mid-sentence at the source's line ends) and brackets
    escaped (``pip install 'gpuanalyze[ray]'`` is not Rich markup)."""
    if not text:
        return text
    from rich.markup import escape

    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(escape(" ".join(p.split())) for p in paragraphs)


class _DefaultToAnalyze(TyperGroup):
    """`gpuanalyze TRACE ...` means `gpuanalyze analyze TRACE ...`; a bare word that is neither a
    command nor an existing path is a mistyped command. Every command's help is plain prose."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            command.help = plain_help(command.help)
            for param in command.params:
                if getattr(param, "help", None):  # options and arguments (typer's own click classes)
                    param.help = plain_help(param.help)  # type: ignore[attr-defined]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.help = verdicts_help()
        super().format_help(ctx, formatter)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in _GROUP_OPTIONS:
            if _unknown_command(args[0]):
                fail(unknown_command_message(args[0]))
            args = ["analyze", *args]
        return super().parse_args(ctx, args)


def _unknown_command(word: str) -> bool:
    """A bare word (no path separator, no suffix: not ``run.arrow``, ``s3://...``) that names no file."""
    from pathlib import Path

    path = Path(word)
    return not word.startswith("-") and path.name == word and not path.suffix and not path.exists()


#: Words people type for a command that spelling alone does not lead to.
_MEANT = {"cost": "compare", "price": "compare", "diff": "compare", "gate": "compare"}


def unknown_command_message(word: str) -> str:
    """'no such command or file', the closest command (by spelling, or _MEANT), and every command (one line)."""
    import difflib

    from analyzer.cli import COMMANDS

    names = sorted(COMMANDS)
    close = [_MEANT[word.lower()]] if word.lower() in _MEANT else difflib.get_close_matches(word, names, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else "."
    return f"no such command or file '{word}'{hint} Commands: {', '.join(names)}."


def verdicts_help() -> str:
    """The group's help: every verdict (analysis.findings.BOTTLENECKS, read only when the help is shown, so that
    every command starts without it)."""
    from analyzer.analysis.findings import BOTTLENECKS

    *rules, last = (b for b in BOTTLENECKS if b not in ("none", "unknown"))
    return (
        f"Find why a GPU training run is slow. One verdict per run: {', '.join(rules)} or {last} (what limits it), "
        "none (healthy) or unknown (the trace does not show where the time goes)."
    )


app = typer.Typer(
    cls=_DefaultToAnalyze,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def fail(message: str) -> NoReturn:
    """One line on stderr, exit code 2: how every user error ends."""
    from rich.console import Console

    from analyzer.render.safe import clean

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"gpuanalyze: error: {clean(message)}", markup=False)
    raise typer.Exit(2)


#: Columns a note is wrapped to (a terminal's narrowest usual width).
NOTE_COLUMNS = 80


def note(text: str, *, err: bool = False) -> None:
    """``note: TEXT``, wrapped between words to 80 columns, or fewer when the width rule
    (render/console.py: $COLUMNS, the terminal) says so (continuation lines indented), display-safe."""
    import textwrap

    from analyzer.render.console import layout_width
    from analyzer.render.safe import clean

    lines = textwrap.wrap(
        clean(f"note: {text}"),
        width=min(NOTE_COLUMNS, layout_width(stderr=err)),
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    typer.echo("\n".join(lines), err=err)


def emit(renderable: Any, data: Any, json_out: bool, width: int | None = None) -> None:
    """Print ``data`` (a declared output struct, render.output) as strict JSON, or the rich ``renderable`` laid out
    for ``width`` columns."""
    if json_out:
        from analyzer.render.output import dumps

        typer.echo(dumps(data))
    else:
        from analyzer.render.console import report_console

        report_console(width).print(renderable)


def console() -> Any:
    from analyzer.render.console import report_console

    return report_console()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuanalyze {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """The group's options; its help is verdicts_help()."""
