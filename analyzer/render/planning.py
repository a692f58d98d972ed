"""Format comparisons, GPU what-ifs and memory estimates (tables and JSON-ready dicts)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

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
    }


def render_compare(c: Comparison) -> RenderableType:
    table = Table(title="Cost per completed run", title_justify="left")
    for col in (
        "run / server",
        "price $/GPU-h",
        "GPUs",
        "hours per run",
        "cost per run",
        "step ms",
        "samples/s",
        "verdict",
    ):
        table.add_column(col, justify="left" if col in ("run / server", "verdict") else "right")
    for o in c.options:
        table.add_row(
            o.name,
            "n/a" if o.price_per_gpu_hour is None else f"{o.price_per_gpu_hour:.2f}",
            str(o.gpus),
            "n/a" if o.hours_per_run is None else f"{o.hours_per_run:,.2f}",
            _usd(o.per_run_usd),
            "" if o.step_time_ms is None else f"{o.step_time_ms:.2f}",
            "" if o.samples_per_s is None else f"{o.samples_per_s:,.0f}",
            o.bottleneck or "",
        )
    parts: list[RenderableType] = [table]
    if c.cheapest is not None:
        parts.append(
            Text(f"{c.cheapest} is cheapest per completed run, by {_usd(c.saving_usd)} per run.", style="bold")
        )
    else:
        parts.append(Text("Give prices and a run length to rank the options by cost per run."))
    for k in c.checks:
        applied = (
            "the recommended fix" if k.recommended else "a fix (not the one recommended; projection redone for it)"
        )
        parts.append(
            Text(
                f"Projection check ({k.bottleneck}: {k.fix}, {applied}): projected {k.projected_ms:.2f} ms, "
                f"measured {k.measured_ms:.2f} ms {k.per}; error {k.error:+.1%}",
                style="bold",
            )
        )
    traced = [(o.name, o.breakdown_ms) for o in c.options if o.breakdown_ms]
    if len(traced) >= 2:
        base_name, base = traced[0]
        diff = Table(title=f"Mean ms per step, difference against {base_name}", title_justify="left")
        diff.add_column("part")
        for name, _ in traced:
            diff.add_column(name, justify="right")
        for part, ref in base.items():
            cells = []
            for i, (_, parts_ms) in enumerate(traced):
                v = parts_ms.get(part)
                if v is None:
                    cells.append("n/a")
                elif i == 0 or ref is None:
                    cells.append(f"{v:.2f}")
                else:
                    cells.append(f"{v:.2f} ({v - ref:+.2f})")
            diff.add_row(part.removesuffix("_ms"), *cells)
        parts.append(diff)
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
    table = Table(
        title=f"What if this run were on another GPU (estimates; measured on {w.source_gpu})", title_justify="left"
    )
    for col in ("GPU", "step ms", "speed-up", "fits in memory", "cost per run"):
        table.add_column(col, justify="left" if col == "GPU" else "right")
    for t in w.targets:
        table.add_row(
            t.gpu,
            f"{t.step_time_ms:.2f}",
            f"{t.speedup:.2f}x",
            {True: "yes", False: "NO", None: "unknown"}[t.fits],
            _usd(t.cost_per_run_usd),
        )
    return Group(table, Text(f"Basis: {w.basis}.", style="dim"))


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
        table, Text(f"fits: {fits}"), Text(f"does not fit: {no}"), *[Text(f"- {a}", style="dim") for a in e.assumptions]
    )
