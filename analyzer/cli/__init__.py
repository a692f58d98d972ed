"""The `gpuanalyze` command: thin wrappers that call the library and render its results."""

from analyzer.cli import analyze, export, machine, plan, report, run, trace, watch  # noqa: F401 - each module registers its commands
from analyzer.cli.app import app, main

__all__ = ["app", "main"]
