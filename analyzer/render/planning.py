"""Format comparisons: tables, and the declared structs of their JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from analyzer.planning.gate import MAX_STEPS, change_words
from analyzer.planning.run_differences import different_jobs
from analyzer.render.layout import Column, FitTable, bullets
from analyzer.render.output import built
from analyzer.render.output import commands as C
from analyzer.render.safe import text

if TYPE_CHECKING:
    from analyzer.planning.compare import Comparison, RunOption
    from analyzer.planning.gate import GateCheck, GateResult
    from analyzer.planning.projection_check import ProjectionCheck


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"


def compare_struct(c: Comparison) -> C.Comparison:
    gate = None
    if c.gate is not None:
        checks = [built(C.GateCheck, k, verdict=gate_verdict(k), notes=gate_notes(k)) for k in c.gate.checks]
        gate = C.Gate(failed=c.gate.failed, exit_code=1 if c.gate.failed else 0, checks=checks)
    moved = [
        built(C.OwnerMove, m, before_ms_per_step=m.before_ms, after_ms_per_step=m.after_ms) for m in c.owners_moved
    ]
    return C.Comparison(
        options=[built(C.RunOption, o) for o in c.options],
        cheapest=c.cheapest,
        saving_usd_per_run=c.saving_usd,
        projection_checks=[built(C.ProjectionCheck, k) for k in c.checks],
        gate=gate,
        differences=list(c.differences),
        idle_owners_moved=moved,
    )


def _col(header: str, values: list[str], *, drop: int | None, name: bool = False) -> Column:
    return Column(
        header=header,
        cells=[text(v) for v in values],
        drop=drop,
        wrap=name,
        fold=name,
        justify="left" if name else "right",
    )


def _num(x: float | None, fmt: str, none: str = "n/a") -> str:
    return none if x is None else format(x, fmt)


def _cost_table(opts: tuple[RunOption, ...]) -> FitTable:
    return FitTable(
        "Cost per completed run",
        [
            _col("run / server", [o.name for o in opts], drop=None, name=True),
            _col("USD/GPU-h", [_num(o.price_per_gpu_hour, ".2f") for o in opts], drop=3),
            _col("GPUs", [str(o.gpus) for o in opts], drop=2),
            _col("hours/run", [_num(o.hours_per_run, ",.2f") for o in opts], drop=None),
            _col("USD/run", [_usd(o.per_run_usd) for o in opts], drop=None),
            _col("step ms", [_num(o.step_time_mean_ms, ".2f", "") for o in opts], drop=4),
            _col("samples/s", [_num(o.samples_per_s, ",.0f", "") for o in opts], drop=1),
            _col("verdict", [o.bottleneck or "" for o in opts], drop=5, name=True),
        ],
    )


def _cheapest(c: Comparison) -> Text:
    if c.cheapest is None:
        return Text("Give prices and a run length to rank the options by cost per run.")
    return text(f"{c.cheapest} is cheapest per completed run, by {_usd(c.saving_usd)} per run.", style="bold")


def check_line(k: ProjectionCheck) -> Text:
    """One projection check: projected (with its range), measured, error, and whether the range held."""
    applied = "the recommended fix" if k.recommended else "projection redone for the change applied"
    low, high = k.projected_low_ms, k.projected_high_ms
    span = "range n/a" if low is None or high is None else f"range {low:.2f}-{high:.2f} ms"
    held = {True: "inside the range", False: "OUTSIDE the range", None: "no range to hold"}[k.inside]
    return text(
        f"Projection check [{k.kind}] ({k.bottleneck}: {k.fix}, {applied}): projected {k.projected_ms:.2f} ms "
        f"({span}), measured {k.measured_ms:.2f} ms {k.per}: {held}; error {k.error:+.1%}",
        style="bold",
    )


def gate_verdict(k: GateCheck) -> str:
    """Why the gate passed or failed this tolerance, in words."""
    what, low, high = (change_words(pct, k.metric) for pct in (k.change_pct, k.low_pct, k.high_pct))
    interval = f"{k.confidence:.0%} interval: {low} to {high}"
    if k.failed:
        return f"FAIL: {what} ({interval}), beyond the {k.tolerance_pct:g}% tolerance and the noise"
    if k.change_pct > k.tolerance_pct:
        return f"pass: {what}, but within noise ({interval} reaches below the {k.tolerance_pct:g}% tolerance)"
    return f"pass: {what} ({interval})" + (f", within the {k.tolerance_pct:g}% tolerance" if k.change_pct > 0 else "")


def _gate_lines(g: GateResult, *, notes: bool = True) -> list[RenderableType]:
    """Each check's pass/fail line (first and last in the output, for a CI log), with its notes when asked."""
    unit = {"step_time": "ms/step", "throughput": "samples/s"}
    out: list[RenderableType] = []
    for k in g.checks:
        line = text(
            f"Gate [{k.metric}]: before {k.before:,.2f} {unit[k.metric]}, after {k.after:,.2f} {unit[k.metric]} "
            f"({k.steps[0]} and {k.steps[1]} steps, medians). {gate_verdict(k)}",
            style="bold red" if k.failed else "bold",
        )
        out.append(line)
        out += [text(n, style="dim") for n in gate_notes(k)] if notes else []
    return out


def gate_notes(k: GateCheck) -> list[str]:
    """The spike steps left out of the medians, a bootstrap of fewer steps than all, the runs' drift, each run."""
    notes = []
    if k.spikes is not None and (k.spikes[0].steps or k.spikes[1].steps):
        b, a = k.spikes
        notes.append(
            f"  spikes (not in the medians): BEFORE {b.steps} step(s), mean {b.mean_ms:,.0f} ms, {b.share:.0%} of its "
            f"time; AFTER {a.steps} step(s), mean {a.mean_ms:,.0f} ms, {a.share:.0%} of its time"
        )
    if any(n == MAX_STEPS < steps for n, steps in zip(k.resampled, k.steps, strict=True)):
        notes.append(f"  the noise from at most {MAX_STEPS:,} evenly spaced steps of each run (the bootstrap's bound)")
    if k.drift_allowance_pct > 0:
        notes.append(
            f"  drift (first to last third): BEFORE {k.drift_pct[0]:+.1f}%, AFTER {k.drift_pct[1]:+.1f}%; "
            f"the interval is widened by {k.drift_allowance_pct:.1f} points each side"
        )
    return notes


def _breakdown(opts: tuple[RunOption, ...]) -> list[RenderableType]:
    traced = [(o.name, o.breakdown_ms) for o in opts if o.breakdown_ms]
    if len(traced) < 2:
        return []
    base_name, base = traced[0]
    columns = [Column(header="part", cells=[Text(p.removesuffix("_ms")) for p in base], justify="left")]
    for i, (name, parts_ms) in enumerate(traced):
        cells = [_part_cell(parts_ms.get(part), None if i == 0 else ref) for part, ref in base.items()]
        columns.append(Column(header=text(name), cells=cells, drop=i, wrap=True))
    title = Text("Mean ms per step, difference against ") + text(base_name)
    return [Text(""), title, FitTable(None, columns, split=True)]


def _part_cell(v: float | None, ref: float | None) -> Text:
    if v is None:
        return Text("n/a")
    return Text(f"{v:.2f}" if ref is None else f"{v:.2f} ({v - ref:+.2f})")


def render_compare(c: Comparison) -> RenderableType:
    gate = [] if c.gate is None else _gate_lines(c.gate)
    parts: list[RenderableType] = [*gate, _cost_table(c.options), _cheapest(c)]
    parts += [check_line(k) for k in c.checks]
    if c.differences:
        parts.append(_differences_note(c.differences))
    parts += _breakdown(c.options)
    parts += _memory_moved(c.options)
    parts += _owners_moved(c)
    return Group(*parts, *([] if c.gate is None else [Text(""), *_gate_lines(c.gate, notes=False)]))


def _memory_moved(opts: tuple[RunOption, ...]) -> list[RenderableType]:
    """Peak and persistent memory of each traced option, with the change against the first."""
    known = [o for o in opts if o.peak_mem_bytes is not None or o.persistent_mem_bytes is not None]
    if len(known) < 2:
        return []

    def gb(o: RunOption, key: str) -> str:
        v, ref = getattr(o, key), getattr(known[0], key)
        move = "" if o is known[0] or v is None or ref is None else f" ({(v - ref) / 1e9:+,.2f})"
        return "n/a" if v is None else f"{v / 1e9:,.2f}{move}"

    lines = [f"{o.name}: peak {gb(o, 'peak_mem_bytes')}, at step start {gb(o, 'persistent_mem_bytes')}" for o in known]
    return [Text(""), Text("Memory, GB"), bullets(text(x) for x in lines)]


#: Owner moves listed by ``compare`` (the largest first).
SHOWN_MOVES = 5


def _owners_moved(c: Comparison) -> list[RenderableType]:
    if not c.owners_moved:
        return []
    moves = c.owners_moved[:SHOWN_MOVES]
    after = [Text(f"{m.after_ms:.3f} ({m.delta_ms:+.3f})") for m in moves]
    columns = [
        Column(header="idle owner", cells=[Text(m.owner) for m in moves], justify="left"),
        Column(header=text(c.options[0].name), cells=[Text(f"{m.before_ms:.3f}") for m in moves], wrap=True),
        Column(header=text(c.options[1].name), cells=after, wrap=True),
    ]
    return [Text(""), Text("How the GPU's idle owners moved, ms per step"), FitTable(None, columns, split=True)]


def _differences_note(differences: tuple[str, ...]) -> RenderableType:
    """What differs and what changed between the runs, one item a line."""
    verdict = (
        "these are two different jobs, not one job's before and after; no projection is checked"
        if different_jobs(list(differences))
        else "compare them as before and after only if that is what changed"
    )
    return Group(text(f"What differs ({verdict}):", style="yellow"), bullets(text(d) for d in differences))
