"""Format comparisons, GPU what-ifs and memory estimates (tables and JSON-ready dicts)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from analyzer.planning.run_differences import different_jobs
from analyzer.render.layout import Column, FitTable, bullets
from analyzer.render.safe import text

if TYPE_CHECKING:
    from analyzer.planning.compare import Comparison
    from analyzer.planning.memory import MemoryEstimate
    from analyzer.planning.whatif import WhatIf


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"


def compare_dict(c: Comparison) -> dict[str, Any]:
    return {
        "options": [asdict(o) for o in c.options],
        "cheapest": c.cheapest,
        "saving_usd_per_run": c.saving_usd,
        "projection_checks": [{**asdict(k), "error": k.error} for k in c.checks],
        "differences": list(c.differences),
    }


def render_compare(c: Comparison) -> RenderableType:
    opts = c.options

    def col(header: str, values: list[str], *, drop: int | None, name: bool = False) -> Column:
        return Column(
            header=header,
            cells=[text(v) for v in values],
            drop=drop,
            wrap=name,
            fold=name,
            justify="left" if name else "right",
        )

    table = FitTable(
        "Cost per completed run",
        [
            col("run / server", [o.name for o in opts], drop=None, name=True),
            col(
                "USD/GPU-h",
                ["n/a" if o.price_per_gpu_hour is None else f"{o.price_per_gpu_hour:.2f}" for o in opts],
                drop=3,
            ),
            col("GPUs", [str(o.gpus) for o in opts], drop=2),
            col(
                "hours/run", ["n/a" if o.hours_per_run is None else f"{o.hours_per_run:,.2f}" for o in opts], drop=None
            ),
            col("USD/run", [_usd(o.per_run_usd) for o in opts], drop=None),
            col("step ms", ["" if o.step_time_ms is None else f"{o.step_time_ms:.2f}" for o in opts], drop=4),
            col("samples/s", ["" if o.samples_per_s is None else f"{o.samples_per_s:,.0f}" for o in opts], drop=1),
            col("verdict", [o.bottleneck or "" for o in opts], drop=5, name=True),
        ],
    )
    parts: list[RenderableType] = [table]
    if c.cheapest is not None:
        line = text(c.cheapest, style="bold")
        line.append(f" is cheapest per completed run, by {_usd(c.saving_usd)} per run.", style="bold")
        parts.append(line)
    else:
        parts.append(Text("Give prices and a run length to rank the options by cost per run."))
    for k in c.checks:
        applied = "the recommended fix" if k.recommended else "not the fix recommended; projection redone for it"
        line = text(
            f"Projection check ({k.bottleneck}: {k.fix}, {applied}): projected {k.projected_ms:.2f} ms, "
            f"measured {k.measured_ms:.2f} ms {k.per}; error {k.error:+.1%}",
            style="bold",
        )
        parts.append(line)
    if c.differences:
        two_jobs = different_jobs(list(c.differences))
        verdict = (
            "these are two different jobs, not one job's before and after; no projection is checked"
            if two_jobs
            else "compare them as before and after only if that is what changed"
        )
        parts.append(text(f"note: the runs differ ({'; '.join(c.differences)}): {verdict}", style="yellow"))
    traced = [(o.name, o.breakdown_ms) for o in opts if o.breakdown_ms]
    if len(traced) >= 2:
        base_name, base = traced[0]
        columns = [Column(header="part", cells=[Text(p.removesuffix("_ms")) for p in base], justify="left")]
        for i, (name, parts_ms) in enumerate(traced):
            cells = []
            for part, ref in base.items():
                v = parts_ms.get(part)
                if v is None:
                    cells.append(Text("n/a"))
                elif i == 0 or ref is None:
                    cells.append(Text(f"{v:.2f}"))
                else:
                    cells.append(Text(f"{v:.2f} ({v - ref:+.2f})"))
            columns.append(Column(header=text(name), cells=cells, drop=i, wrap=True))
        title = Text("Mean ms per step, difference against ") + text(base_name)
        parts.append(Text(""))
        parts.append(title)
        parts.append(FitTable(None, columns, split=True))
    return Group(*parts)


def whatif_dict(w: WhatIf) -> dict[str, Any]:
    return {
        "source_gpu": w.source_gpu,
        "precision": w.precision,
        "basis": w.basis,
        "estimate": True,
        "targets": [asdict(t) for t in w.targets],
    }


def render_whatif(w: WhatIf) -> RenderableType:
    t = w.targets
    table = FitTable(
        None,
        [
            Column(header="GPU", cells=[text(x.gpu) for x in t], justify="left", wrap=True, fold=True),
            Column(header="step ms", cells=[Text(f"{x.step_time_ms:.2f}") for x in t]),
            Column(header="speed-up", cells=[Text(f"{x.speedup:.2f}x") for x in t]),
            Column(
                header="fits in memory", cells=[Text({True: "yes", False: "NO", None: "unknown"}[x.fits]) for x in t]
            ),
            Column(header="cost per run", cells=[Text(_usd(x.cost_per_run_usd)) for x in t], drop=1),
        ],
    )
    title = Text("What if this run were on another GPU (estimates; measured on ") + text(w.source_gpu) + Text(")")
    return Group(title, table, text(f"Basis: {w.basis}.", style="dim"))


def memory_dict(e: MemoryEstimate) -> dict[str, Any]:
    d = asdict(e)
    d["assumptions"] = list(e.assumptions)
    return d


def render_memory(e: MemoryEstimate) -> RenderableType:
    table = Table(title="Training memory per GPU (decimal GB)", title_justify="left")
    table.add_column("part")
    table.add_column("GB", justify="right")
    for name, value in (
        ("weights", e.weights_gb),
        ("gradients", e.gradients_gb),
        ("optimizer state (incl. fp32 master weights)", e.optimizer_gb),
        ("activations", e.activations_gb),
        ("total", e.total_gb),
    ):
        table.add_row(name, "not estimated" if value is None else f"{value:,.1f}")
    fits = ", ".join(g for g, ok in e.fits.items() if ok) or "none of the table's GPUs"
    no = ", ".join(g for g, ok in e.fits.items() if not ok) or "-"
    return Group(
        table,
        text(f"fits: {fits}"),
        text(f"does not fit: {no}"),
        bullets(text(a, style="dim") for a in e.assumptions),
    )
