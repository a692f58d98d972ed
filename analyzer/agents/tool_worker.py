"""The MCP tools, each call run in a worker process the server kills at its deadline (`python -m
analyzer.agents.tool_worker`: a request on stdin, one JSON answer on stdout). Their signatures and
docstrings are what an agent reads; paths are checked against the roots here, inside the deadline."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from analyzer.errors import GpuAnalyzeError
from analyzer.render.output import built
from analyzer.render.output.commands import Comparison, Explained, Fleet, TraceFound, TraceList
from analyzer.render.output.trace_report import Report

#: Names the analysis reads in a directory (a link with one of them is followed there; a link to a directory never).
TRACE_SUFFIXES = (".arrow", ".json", ".json.gz", ".sqlite")
#: The directories the tools may read under (resolved), set by ``main`` from the request.
ROOTS: list[str] = []


def inside(given: str) -> Path:
    """``given`` (relative to the first root) with links and ``..`` resolved; refused unless it is a regular
    file or a directory under a root, and no trace-named link the analysis would follow (beneath a directory, an
    .arrow file's rank siblings) leaves the roots. A tree's search is bounded by the call's deadline."""
    try:
        real = (Path(ROOTS[0]) / given).resolve(strict=True)  # an absolute ``given`` replaces the root
        mode = real.stat().st_mode
    except (OSError, RuntimeError, ValueError) as exc:
        raise GpuAnalyzeError(f"{given}: no such file or directory ({getattr(exc, 'strerror', 0) or exc})") from None
    if not _under(real):
        raise GpuAnalyzeError(f"{given}: outside the roots this server reads ({', '.join(ROOTS)}); refused")
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise GpuAnalyzeError(f"{given}: not a regular file or directory (a FIFO, device or socket); refused")
    stack = [real] if stat.S_ISDIR(mode) else [real.parent] if real.suffix == ".arrow" else []
    stem = "" if stat.S_ISDIR(mode) else real.name.split(".rank")[0].removesuffix(".arrow")
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))  # scandir's iterator is exhausted, so closed
        except OSError:  # a directory no one may list: the analysis passes it over too
            continue
        for e in entries:
            named = e.name.startswith(stem) and e.name.lower().endswith(TRACE_SUFFIXES)
            if named and e.is_symlink() and not _under(e.path):
                raise GpuAnalyzeError(f"{e.path}: a link out of the roots this server reads; refused")
            if stat.S_ISDIR(mode) and e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
    return real


def _under(path: str | Path) -> bool:
    return any(Path(os.path.realpath(path)).is_relative_to(r) for r in ROOTS)


def list_traces(directory: str = ".") -> TraceList:
    """The runs gpuanalyze can read beneath ``directory`` (relative to the server's first root): Arrow traces,
    PyTorch profiler .json/.json.gz, Nsight Systems .sqlite exports, directories of per-rank files; each with
    the path to give the other tools. Use it first when you do not know where the traces are."""
    from analyzer.fleet.discover import find_runs

    runs, notes = find_runs(str(inside(directory)))
    return TraceList(runs=[built(TraceFound, r, path=r.target, run=r.name) for r in runs], notes=notes)


def analyze_trace(path: str) -> Report:
    """Why one run is slow: the JSON report of `gpuanalyze TRACE --json` for ``path`` (a trace file or run
    directory): bottleneck, confidence, step time and its breakdown, who held the GPU idle, findings with
    evidence, recommendations and projected step time. Use it for 'why is this run slow, what do I change?'."""
    from analyzer.api import ReadOptions, analyze
    from analyzer.render.json_report import report_struct

    return report_struct(analyze(inside(path), ReadOptions(machine_ceilings=True)))


def compare_runs(
    before: str, after: str, fail_if_slower_pct: float | None = None, fail_if_throughput_drops_pct: float | None = None
) -> Comparison:
    """Two runs, ``before`` then ``after`` (as `gpuanalyze compare --json`): step time and cost side by side,
    what differs, whether BEFORE's projections held and, given a tolerance in percent (e.g. 5), the regression
    gate's answer (gate.failed: AFTER worse beyond the runs' noise). Use it for 'did my change help or hurt?'."""
    from analyzer.api import load_compared
    from analyzer.planning.compare import compare
    from analyzer.planning.cost import CostInputs
    from analyzer.planning.gate import GateOptions
    from analyzer.render.planning import compare_struct

    runs = [inside(p) for p in (before, after)]
    if any(p.suffix == ".toml" for p in runs):
        raise GpuAnalyzeError("compare_runs takes two traces or run directories, not TOML run options")
    gate = GateOptions(fail_if_slower_pct=fail_if_slower_pct, fail_if_throughput_drops_pct=fail_if_throughput_drops_pct)
    return compare_struct(compare([load_compared(p, CostInputs(), None) for p in runs], gate))


def triage_fleet(directory: str) -> Fleet:
    """Every run beneath ``directory`` analysed and ranked by what its top fix saves (as `gpuanalyze fleet
    --json`); runs that cannot be read are listed as skipped. Use it to find which of many runs to fix first."""
    from analyzer.fleet.fleet_options import FleetOptions
    from analyzer.fleet.fleet_output import fleet_struct
    from analyzer.fleet.triage import triage

    return fleet_struct(triage(str(inside(directory)), FleetOptions()))


def explain_finding(path: str, finding: str = "") -> Explained:
    """One finding of the report of ``path`` in full (``finding``: its bottleneck name as the report gives it;
    default the verdict's): evidence (each measured value against its threshold and the threshold's source),
    recommendations, projected step time with its range and arithmetic. Use it to justify or act on a finding."""
    report = analyze_trace(path)
    names, finding = [f.bottleneck for f in report.findings], finding or report.bottleneck
    if finding not in names:
        raise GpuAnalyzeError(f"no finding {finding!r} in {path}; its findings: {names}")
    return built(Explained, report, finding=report.findings[names.index(finding)], other_findings=names)


TOOLS = (list_traces, analyze_trace, compare_runs, triage_fleet, explain_finding)


def capped(value: Any, cap: int | None) -> Any:
    """``value`` with every list in it cut to its first ``cap`` items."""
    if isinstance(value, dict):
        return {k: capped(v, cap) for k, v in value.items()}
    return [capped(v, cap) for v in value[:cap]] if isinstance(value, list | tuple) else value


def bounded(result: Any, limit: int) -> str:
    """``result`` (a declared output struct) as JSON of at most ``limit`` bytes: its lists cut shorter (and said so)
    until it fits."""
    import msgspec

    from analyzer.render.output import dumps

    data = msgspec.to_builtins(result)
    for cap in (None, 1000, 100, 10, 1):
        note = {} if cap is None else {"truncated": f"over {limit:,} bytes: every list cut to its first {cap}"}
        if len((text := dumps({**capped(data, cap), **note})).encode()) <= limit:
            return text
    tail = f"\n[truncated at {limit:,} bytes]"
    return text.encode()[: limit - len(tail)].decode(errors="ignore") + tail


def main() -> None:
    """Answer one request ``[tool, roots, args, limit]`` with ``{"text"}`` or ``{"error"}`` on stdout."""
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else the analysis prints goes to stderr, never into the answer
    try:
        tool, ROOTS[:], args, limit = json.load(sys.stdin)
        reply = {"text": bounded({f.__name__: f for f in TOOLS}[tool](**args), limit)}
    except GpuAnalyzeError as exc:
        reply = {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a hostile input is answered with an error, never a crash
        reply = {"error": f"could not analyse this input ({type(exc).__name__}: {str(exc)[:300]})"}
    json.dump(reply, answer)
    answer.close()


if __name__ == "__main__":
    main()
