"""The `gpuanalyze` command: thin wrappers that call the library and render its results.

Each command lives in a sibling module that registers it on the Typer app. The console script
imports only the module its command line needs (typer has no lazy sub-commands), so
`gpuanalyze compare` does not pay for `report`'s or `watch`'s imports; `analyzer.cli.base`, as
imported by library users and tests, has every command.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

#: The module that registers each command.
COMMANDS = {
    "analyze": "analyze",
    "bench": "machine",
    "compare": "plan",
    "env": "machine",
    "export": "export",
    "fleet": "fleet",
    "import": "trace",
    "mcp": "agents",
    "report": "report",
    "run": "run",
    "watch": "watch",
}
_EVERY = tuple(sorted(set(COMMANDS.values())))

__all__ = ["COMMANDS", "app", "main"]


def _register(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(f"analyzer.cli.{name}")


def _modules_for(args: list[str]) -> tuple[str, ...]:
    """The command modules a command line needs: its command's, none for --version, every one
    for the group's help, `analyze` for `gpuanalyze TRACE`."""
    if not args or args[0] in ("--help", "-h") or args[0].endswith("-completion"):
        return _EVERY
    if args[0] == "--version":
        return ()
    return (COMMANDS.get(args[0], "analyze"),)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point."""
    args = argv if argv is not None else sys.argv[1:]
    _register(_modules_for(args))
    from analyzer.cli.base import app

    return app(args=args, prog_name="gpuanalyze")


def __getattr__(name: str) -> Any:
    if name == "app":
        _register(_EVERY)
        from analyzer.cli.base import app

        globals()["app"] = app
        return app
    raise AttributeError(f"module 'analyzer.cli' has no attribute {name!r}")
