"""The analysis pipeline: load -> metrics -> classify, returning a frozen Report."""

from __future__ import annotations

from pathlib import Path

from analyzer.ceilings import Ceilings
from analyzer.classify import classify
from analyzer.findings import Report
from analyzer.metrics import step_metrics
from ingest import schema as S
from ingest.reader import Trace
from ingest.sources import load_any


def analyze(trace: str | Path | Trace, *, ceilings: Ceilings | None = None) -> Report:
    """Analyse a trace (.arrow, Kineto .json[.gz], a directory of per-rank traces, or a loaded Trace).

    Raises GpuAnalyzeError on bad input.

    ``ceilings`` (from ``analyzer.ceilings.find_ceilings``) lets findings quote achieved numbers
    against what `gpuanalyze bench` measured on this machine.
    """
    loaded = trace if isinstance(trace, Trace) else load_any(trace)
    metrics = step_metrics(loaded)
    bottleneck, confidence, findings = classify(metrics, loaded.run, ceilings)
    notes = loaded.notes
    sampled = loaded.frame.get_column(S.KERNEL_STATS).is_not_null().sum()
    if sampled and metrics.kernels is None:
        notes = (*notes, f"{sampled} step(s) ran under sampled torch.profiler windows but recorded no GPU kernels "
                         "(a CPU run): kernel-level evidence is empty")
    return Report(
        path=str(loaded.path),
        bottleneck=bottleneck,
        confidence=confidence,
        findings=findings,
        metrics=metrics,
        complete=loaded.complete,
        notes=notes,
        run=loaded.run,
        end=loaded.end,
        ceilings=ceilings.path if ceilings else None,
    )
