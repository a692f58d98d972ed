"""What `gpuanalyze run --try` prints: one row per trial (setting, the baseline's projection and
its range beside the measured steady-state step time, the change against the baselines, whether
the measurement fell inside the projected range), the loaders each trial changed, how each
measurement relates to the analysis' projection, the trials' Python warnings (each distinct one
once), the files a trial changed, and the recommendation (the measured best, only when it beats the
baselines beyond noise). The table fits the width it is given (--width, $COLUMNS, 80 in a log or
pipe); below WIDE columns a cell breaks between its values, never inside one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analyzer.run.candidates import Candidate, setting_of
from analyzer.run.trial_env import TrialSetting
from analyzer.run.trial_measure import MIN_GAIN, NOISE_SE, Measured, beats, comparable_ms, vs_baseline
from analyzer.run.trials import LOG_NAME, TrialRun, TryResult, batch_size_of

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
    out += [_row(result, None, t) for t in result.repeats]
    out += [_row(result, c, t) for c, t in result.trials]
    return out


def recommendation(result: TryResult) -> str:
    if result.baseline_failed:
        return f"gpuanalyze: no recommendation: {result.problem}"
    best = result.best
    if best is None:
        if not any(t.measured for _, t in result.trials):
            return "gpuanalyze: no candidate was measured; keep the current settings"
        noise = result.noise
        if noise is None or len(noise.runs) < 2:
            return "gpuanalyze: no recommendation: fewer than two baseline trials were measured (no noise to judge by)"
        return (
            "gpuanalyze: keep the current settings: no candidate beat the baselines beyond noise "
            f"(their spread {_pct(noise.spread_ms, noise.mean_ms)}, {NOISE_SE:g} standard errors, "
            f"at least {MIN_GAIN:.0%})"
        )
    candidate, trial = best
    noise = result.noise
    assert trial.measured is not None and noise is not None
    change = vs_baseline(noise, trial.measured)
    per = " per sample" if comparable_ms(noise.samples, trial.measured) != trial.measured.mean_ms else ""
    line = (
        f"gpuanalyze: recommended: {candidate.setting.label()} — measured {trial.measured.mean_ms:.2f} ms/step, "
        f"{change:+.1f}%{per} vs the baselines' {noise.mean_ms:.2f} ms (spread {_pct(noise.spread_ms, noise.mean_ms)})"
    )
    close = within_noise(result)
    return f"{line}; within noise of it: {'; '.join(close)}" if close else line


def within_noise(result: TryResult) -> list[str]:
    """The other measured candidates the recommended one does not beat beyond noise (as good, as far
    as these trials can tell)."""
    best = result.best
    noise = result.noise
    if best is None or best[1].measured is None or noise is None:
        return []
    return [
        c.setting.label()
        for c, t in result.trials
        if t is not best[1]
        and t.measured is not None
        and t.outcome in ("stopped", "ended")
        and not beats(t.measured, best[1].measured, noise.spread_ms)
    ]


def against_projection(result: TryResult) -> list[str]:
    """How each measurement relates to the analysis' projection: one line per projected candidate
    (inside its range, or faster/slower than it), then whether the trials settle the advice of
    the analysis' top finding."""
    noise = result.noise
    lines = []
    for candidate, trial in result.trials:
        p = candidate.projection
        if p is None:
            continue
        if trial.measured is None or noise is None:
            lines.append(f"{trial.name} ({candidate.setting.label()}): projected {p.step_ms:.2f} ms, not measured")
            continue
        measured = comparable_ms(noise.samples, trial.measured)
        where = (
            "no range projected"
            if p.low_ms is None or p.high_ms is None
            else "inside the projected range"
            if p.low_ms <= measured <= p.high_ms
            else "faster than the projected range"
            if measured < p.low_ms
            else "slower than the projected range"
        )
        interval = "" if p.low_ms is None or p.high_ms is None else f" [{p.low_ms:.2f}, {p.high_ms:.2f}]"
        lines.append(
            f"{trial.name} ({candidate.setting.label()}): the analysis ({candidate.finding}) projected "
            f"{p.step_ms:.2f} ms{interval}, measured {measured:.2f} ms: {where}"
        )
    lines += _top_finding(result)
    return lines


def _top_finding(result: TryResult) -> list[str]:
    """Whether the trials settle the advice of the top finding: the trial of the setting its fix
    describes (whatever made it a candidate)."""
    report = result.report
    if report is None or not report.findings:
        return []
    top = report.findings[0]
    name = f"{top.bottleneck}/{top.cause}"
    setting = setting_of(top.projection.fix, batch_size_of(result.baseline))
    if setting is None:
        return [f"the analysis' top finding ({name}) names no setting a trial can apply: its fix is a code change"]
    tried = [(c, t) for c, t in result.trials if c.setting == setting]
    if not tried:
        given = setting.label().replace(", ", ",")
        return [f"the analysis' advice ({name}: {setting.label()}) was not tried (--candidates {given} tries it)"]
    candidate, trial = tried[0]
    best = result.best
    if trial.measured is None:
        verdict = "not measured, so these trials do not settle it"
    elif best is not None and best[1] is trial:
        verdict = "confirmed: the measured best, beyond noise"
    elif candidate.setting.label() in within_noise(result):
        verdict = "as good as the measured best (within noise of it)"
    elif best is None:
        verdict = "not confirmed: within the baselines' noise"
    else:
        verdict = f"not confirmed: {best[0].setting.label()} measured faster beyond noise"
    return [f"the analysis' advice ({name}: {candidate.setting.label()}): {verdict}"]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "n/a"


def as_dict(result: TryResult) -> dict[str, Any]:
    best = result.best
    return {
        "out_dir": str(result.out_dir),
        "baseline_verdict": None if result.report is None else result.report.bottleneck,
        "baseline_problem": result.problem if result.report is None or result.baseline_failed else None,
        "trials": rows(result),
        "recommended": None if best is None else _setting_dict(best[0].setting),
        "within_noise_of_recommended": within_noise(result),
        "recommendation": recommendation(result).removeprefix("gpuanalyze: "),
        "against_projection": against_projection(result),
        "baseline_spread_pct": None
        if result.noise is None or len(result.noise.runs) < 2
        else 100 * result.noise.spread_ms / result.noise.mean_ms,
        "notes": list(result.notes),
        "warnings": [text for text, _ in warnings(result)],
        "files_changed": result.files_changed,
    }


def print_table(result: TryResult, width: int | None = None) -> None:
    """The table, laid out for ``width`` columns (default: the terminal's, $COLUMNS, or 80)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from analyzer.render.console import report_console
    from analyzer.render.safe import clean

    console = report_console(width)
    table = Table(
        title=Text(f"gpuanalyze run --try: traces in {clean(str(result.out_dir))}"),
        title_justify="left",
        box=box.SIMPLE_HEAD,  # no vertical rules, one space of padding: the width goes to the values
        show_edge=False,
        padding=(0, 0, 0, 1),
        pad_edge=False,
    )
    cells = [_cells(row) for row in rows(result)]
    wide = _width([COLUMNS + WIDE_COLUMNS, *cells]) <= console.width
    for name in COLUMNS + WIDE_COLUMNS if wide else COLUMNS:
        justify = "left" if name in ("trial", "setting", "ended") else "center" if name == "in range" else "right"
        table.add_column(Text(name), justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row, shown in zip(rows(result), cells, strict=True):
        if not wide and row["outcome"] != "stopped":  # the outcome in the measured cell
            shown[3] = shown[7] if shown[3] == "—" else f"{shown[3]}\n{shown[7]}"
        table.add_row(
            *(Text(cell) for cell in shown[: None if wide else len(COLUMNS)])
        )  # Text: "[low, high]" is not markup
    console.print(table)
    lines = [f"{row['trial']}: {line}" for row in rows(result) for line in row["loaders_changed"]]
    lines += against_projection(result)
    lines += [f"note: {note}" for note in result.notes]
    lines += [f"warning (from {n} of the trials; all in their {LOG_NAME}): {text}" for text, n in warnings(result)]
    for line in lines:
        console.print(Text("  " + clean(line)))
    if result.files_changed:
        console.print(Text(f"gpuanalyze: stopped: {clean(result.files_changed)}"))
    console.print(Text(recommendation(result)))


#: The table's columns (their names on two lines, as their values are), and those left out where they do not fit.
COLUMNS = ["trial", "setting", "projected ms\n[range]", "measured ms\n± sd (n)", "vs base"]
WIDE_COLUMNS = ["in range", "workers", "ended"]


def _cells(row: dict[str, Any]) -> list[str]:
    """A row's cells, each value on a line of its own (the settings, the range, the step count): a
    cell then breaks between values, never inside one."""
    from analyzer.render.safe import clean

    return [
        row["trial"],
        clean(row["setting"]).replace(", ", "\n"),
        _projected_text(row).replace(" [", "\n["),
        _measured_text(row).replace(" (", "\n("),
        "—" if row["vs_baseline_pct"] is None else f"{row['vs_baseline_pct']:+.1f}%",
        row["inside_interval"],
        "—" if row["loader_workers"] is None else str(row["loader_workers"]),
        _OUTCOME.get(row["outcome"], row["outcome"]) + _status_suffix(row),
    ]


def _width(rows: list[list[str]]) -> int:
    """The table's natural width: each column's longest line, one space of padding and one rule between."""
    widths = [max(len(line) for row in rows for line in row[k].splitlines()) for k in range(len(rows[0]))]
    return sum(widths) + 2 * (len(widths) - 1)


def warnings(result: TryResult) -> list[tuple[str, int]]:
    """Each distinct Python warning of the trials' processes, with the number of trials it came from."""
    seen: dict[str, set[str]] = {}
    for trial in [result.baseline, *result.repeats, *(t for _, t in result.trials)]:
        for entry in trial.entries("warning"):
            seen.setdefault(str(entry.get("text")), set()).add(trial.name)
    return [(text, len(names)) for text, names in seen.items()]


def _row(result: TryResult, candidate: Candidate | None, trial: TrialRun) -> dict[str, Any]:
    projection = None if candidate is None else candidate.projection
    m = trial.measured
    return {
        "trial": trial.name,
        **_setting_dict(trial.setting),
        "source": "baseline" if candidate is None else candidate.source,
        **_projected(projection),
        "projected_by": None if candidate is None else candidate.finding,
        **_measured(m),
        "vs_baseline_pct": _change(result, candidate, trial),
        "measured_samples": None if m is None else m.samples,
        "inside_interval": _inside(projection, m, None if result.noise is None else result.noise.samples),
        "outcome": trial.outcome,
        "returncode": trial.returncode,
        "seconds": round(trial.seconds, 2),
        "directory": None if trial.directory is None else str(trial.directory),
        "loaders_changed": list(trial.loaders),
    }


def _change(result: TryResult, candidate: Candidate | None, trial: TrialRun) -> float | None:
    """A candidate against the baselines' mean (per sample); a repeated baseline against the first."""
    m, noise, first = trial.measured, result.noise, result.baseline.measured
    if m is None or noise is None or first is None or trial is result.baseline:
        return None
    return vs_baseline(noise if candidate is not None else first, m)


def _projected(p: Projection | None) -> dict[str, float | None]:
    values = (None, None, None) if p is None else (p.step_ms, p.low_ms, p.high_ms)
    return dict(zip(("projected_ms", "projected_low_ms", "projected_high_ms"), values, strict=True))


def _measured(m: Measured | None) -> dict[str, Any]:
    keys = ("measured_ms", "measured_stdev_ms", "measured_steps", "loader_workers", "end_status")
    if m is None:
        return dict.fromkeys(keys)
    return dict(zip(keys, (m.mean_ms, m.stdev_ms, m.steps, m.loader_workers, m.end_status), strict=True))


def _inside(projection: Projection | None, m: Measured | None, samples: float | None) -> str:
    """'yes'/'no': the trial's measured mean (per the baseline's samples) within the projection's
    range; 'n/a' without one."""
    if projection is None or m is None or projection.low_ms is None or projection.high_ms is None:
        return "n/a"
    return "yes" if projection.low_ms <= comparable_ms(samples, m) <= projection.high_ms else "no"


def _setting_dict(s: TrialSetting) -> dict[str, Any]:
    return {"setting": s.label(), "dataloader": dict(s.dataloader), "autocast": s.autocast, "tf32": s.tf32,
            "script": dict(s.script)}  # fmt: skip


def _projected_text(row: dict[str, Any]) -> str:
    if row["projected_ms"] is None:
        return "—" if row["source"] == "baseline" else "n/a"
    low, high = row["projected_low_ms"], row["projected_high_ms"]
    interval = "[n/a]" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"
    return f"{row['projected_ms']:.2f} {interval}"


def _measured_text(row: dict[str, Any]) -> str:
    if row["measured_ms"] is None:
        return "—"
    return f"{row['measured_ms']:.2f} ± {row['measured_stdev_ms']:.2f} ({row['measured_steps']})"


def _status_suffix(row: dict[str, Any]) -> str:
    code = row["returncode"]
    if row["outcome"] != "failed" or code is None:
        return ""
    return f" (signal {-code})" if code < 0 else f" (exit {code})"
