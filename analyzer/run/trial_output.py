"""What `gpuanalyze run --try` prints: one row per trial (setting, the baseline's projection and
its range, the measured steady-state step time, the change against the baseline, whether the
measurement fell inside the projected range), the loaders each trial changed, and the
recommendation (the measured best, only when it beats the baseline beyond noise)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analyzer.run.candidates import Candidate
from analyzer.run.trial_measure import MIN_GAIN, NOISE_SE, Measured, beats, vs_baseline
from analyzer.run.trials import TrialRun, TryResult

if TYPE_CHECKING:
    from analyzer.analysis.findings import Projection

_OUTCOME = {
    "stopped": "after its steps",
    "ended": "ended on its own",
    "failed": "failed",
    "time_limit": "killed at the time limit",
    "interrupted": "interrupted",
    "not_run": "not run",
}


def rows(result: TryResult) -> list[dict[str, Any]]:
    """One dict per trial, baseline first: what both the table and ``--json`` show."""
    out = [_row(result, None, result.baseline)]
    out += [_row(result, c, t) for c, t in result.trials]
    return out


def recommendation(result: TryResult) -> str:
    if result.baseline_failed:
        return f"gpuanalyze: no recommendation: {result.problem}"
    best = result.best
    if best is None:
        if not any(t.measured for _, t in result.trials):
            return "gpuanalyze: no candidate was measured; keep the current settings"
        return (
            "gpuanalyze: keep the current settings: no candidate beat the baseline beyond noise "
            f"(more than {NOISE_SE:g} standard errors and {MIN_GAIN:.0%})"
        )
    candidate, trial = best
    assert trial.measured is not None and result.baseline.measured is not None
    change = vs_baseline(result.baseline.measured, trial.measured)
    line = (
        f"gpuanalyze: recommended: {candidate.setting.label()} — measured {trial.measured.mean_ms:.2f} ms/step, "
        f"{change:+.1f}% vs the baseline's {result.baseline.measured.mean_ms:.2f} ms"
    )
    close = within_noise(result)
    return f"{line}; within noise of it: {'; '.join(close)}" if close else line


def within_noise(result: TryResult) -> list[str]:
    """The other measured candidates the recommended one does not beat beyond noise (as good, as far
    as these trials can tell)."""
    best = result.best
    if best is None or best[1].measured is None:
        return []
    return [
        c.setting.label()
        for c, t in result.trials
        if t is not best[1]
        and t.measured is not None
        and t.outcome in ("stopped", "ended")
        and not beats(t.measured, best[1].measured)
    ]


def as_dict(result: TryResult) -> dict[str, Any]:
    best = result.best
    return {
        "out_dir": str(result.out_dir),
        "baseline_verdict": None if result.report is None else result.report.bottleneck,
        "baseline_problem": result.problem if result.report is None or result.baseline_failed else None,
        "trials": rows(result),
        "recommended": None if best is None else _setting_dict(best[0]),
        "within_noise_of_recommended": within_noise(result),
        "recommendation": recommendation(result).removeprefix("gpuanalyze: "),
        "notes": list(result.notes),
    }


def print_table(result: TryResult) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from analyzer.render.safe import clean

    table = Table(title=Text(f"gpuanalyze run --try: traces in {clean(str(result.out_dir))}"), title_justify="left")
    for name, justify in (
        ("trial", "left"),
        ("setting", "left"),
        ("projected ms [low, high]", "right"),
        ("measured ms (± sd, n)", "right"),
        ("vs baseline", "right"),
        ("in interval", "center"),
        ("workers", "right"),
        ("ended", "left"),
    ):
        table.add_column(Text(name), justify=justify)  # type: ignore[arg-type]
    for row in rows(result):
        cells = (
            row["trial"],
            clean(row["setting"]),
            _projected_text(row),
            _measured_text(row),
            "—" if row["vs_baseline_pct"] is None else f"{row['vs_baseline_pct']:+.1f}%",
            row["inside_interval"],
            "—" if row["loader_workers"] is None else str(row["loader_workers"]),
            _OUTCOME.get(row["outcome"], row["outcome"]) + _status_suffix(row),
        )
        table.add_row(*(Text(cell) for cell in cells))  # Text: "[low, high]" is not markup
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = max(console.width, 150)  # a log or pipe: one line per trial
    console.print(table)
    for row in rows(result):
        for line in row["loaders_changed"]:
            console.print(f"  {row['trial']}: {clean(line)}", markup=False)
    for note in result.notes:
        console.print(f"  note: {clean(note)}", markup=False)
    console.print(recommendation(result), markup=False)


def _row(result: TryResult, candidate: Candidate | None, trial: TrialRun) -> dict[str, Any]:
    projection = None if candidate is None else candidate.projection
    base = result.baseline.measured
    m = trial.measured
    return {
        "trial": trial.name,
        "setting": trial.setting.label(),
        "dataloader": dict(trial.setting.dataloader),
        "autocast": trial.setting.autocast,
        "tf32": trial.setting.tf32,
        "source": "baseline" if candidate is None else candidate.source,
        **_projected(projection),
        "projected_by": None if candidate is None else candidate.finding,
        **_measured(m),
        "vs_baseline_pct": None if m is None or base is None or candidate is None else vs_baseline(base, m),
        "inside_interval": _inside(projection, m),
        "outcome": trial.outcome,
        "returncode": trial.returncode,
        "seconds": round(trial.seconds, 2),
        "directory": None if trial.directory is None else str(trial.directory),
        "loaders_changed": list(trial.loaders),
    }


def _projected(projection: Projection | None) -> dict[str, float | None]:
    if projection is None:
        return {"projected_ms": None, "projected_low_ms": None, "projected_high_ms": None}
    return {
        "projected_ms": projection.step_ms,
        "projected_low_ms": projection.low_ms,
        "projected_high_ms": projection.high_ms,
    }


def _measured(m: Measured | None) -> dict[str, Any]:
    keys = ("measured_ms", "measured_stdev_ms", "measured_steps", "loader_workers", "end_status")
    if m is None:
        return dict.fromkeys(keys)
    return dict(zip(keys, (m.mean_ms, m.stdev_ms, m.steps, m.loader_workers, m.end_status), strict=True))


def _inside(projection: Projection | None, m: Measured | None) -> str:
    """'yes'/'no': the trial's measured mean within the projection's range; 'n/a' without one."""
    if projection is None or m is None or projection.low_ms is None or projection.high_ms is None:
        return "n/a"
    return "yes" if projection.low_ms <= m.mean_ms <= projection.high_ms else "no"


def _setting_dict(candidate: Candidate) -> dict[str, Any]:
    s = candidate.setting
    return {"setting": s.label(), "dataloader": dict(s.dataloader), "autocast": s.autocast, "tf32": s.tf32}


def _projected_text(row: dict[str, Any]) -> str:
    if row["projected_ms"] is None:
        return "—" if row["source"] == "baseline" else "n/a"
    low, high = row["projected_low_ms"], row["projected_high_ms"]
    interval = "[n/a]" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"
    return f"{row['projected_ms']:.2f} {interval}"


def _measured_text(row: dict[str, Any]) -> str:
    if row["measured_ms"] is None:
        return "—"
    return f"{row['measured_ms']:.2f} (± {row['measured_stdev_ms']:.2f}, {row['measured_steps']})"


def _status_suffix(row: dict[str, Any]) -> str:
    code = row["returncode"]
    if row["outcome"] != "failed" or code is None:
        return ""
    return f" (signal {-code})" if code < 0 else f" (exit {code})"
