"""The settings `gpuanalyze run --try` tries after the baseline: the fixes the baseline's findings
projected, plus a standard set, all applicable without editing the user's code.

Standard set: ``num_workers`` in 1, 2, 4, 8 up to the cores this job may use (not the value the
baseline already ran with); ``persistent_workers`` and ``prefetch_factor=4`` with the most
promising worker count (the projected one, else the largest tried); and, only when the baseline
ran on an accelerator, ``pin_memory``, autocast bf16 and fp16, and TF32. On a CPU run those are
skipped, and the notes say so, except autocast bf16 on a CPU with native bf16 (RunInfo.cpu_bf16).
When the baseline's DataLoader has a batch size B, ``batch_size``
2B (BATCH_FACTOR) is tried too (a ``batch_multiplier`` projection gives its own multiple); it is
compared per sample, and the learning rate for it is the user's call. Script knobs
(``accumulate``, ``eval_every``, ``checkpoint_every``) are tried only when given with
``--candidates``: only the user knows whether the script reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from analyzer.analysis.fixes import BatchFix, Fix, MicroBatchFix, PeriodicFix, PrecisionFix, WorkerFix
from analyzer.run.trial_env import LOADER_MOST, TrialSetting

if TYPE_CHECKING:
    from analyzer.analysis.findings import Projection
    from analyzer.planning.outcome import Report

#: The batch size the standard set tries, as a multiple of the baseline's.
BATCH_FACTOR = 2
#: Worker counts of the standard set (bounded by the cores the job may use).
WORKER_COUNTS = (1, 2, 4, 8)
#: prefetch_factor of the standard set (PyTorch's default is 2).
PREFETCH = 4


@dataclass(frozen=True, slots=True)
class Candidate:
    """One setting to try, and the baseline's projection for it when a finding projected it."""

    setting: TrialSetting
    source: str
    """'projection' (a finding of the baseline assumed this fix), 'standard' or 'given' (--candidates)."""
    projection: Projection | None = None
    finding: str | None = None
    """``bottleneck/cause`` of the finding whose projection this is."""


def setting_of(fix: Fix | None, batch: int | None = None) -> TrialSetting | None:
    """The trial setting a projection's fix describes, or None when a trial cannot apply it without
    editing the code (no sized fix: a cheaper ``__getitem__``; a larger batch or micro-batches when
    the baseline's DataLoader batch size ``batch`` is unknown)."""
    if isinstance(fix, WorkerFix):
        loader: tuple[tuple[str, int | bool], ...] = (("num_workers", fix.workers),)
        return TrialSetting(dataloader=loader + ((("persistent_workers", True),) if fix.persistent else ()))
    if isinstance(fix, PrecisionFix) and fix.autocast is not None:
        return TrialSetting(autocast=fix.autocast)
    if isinstance(fix, BatchFix) and batch is not None:
        return TrialSetting(dataloader=(("batch_size", max(1, round(batch * fix.multiplier))),))
    if isinstance(fix, MicroBatchFix):
        return TrialSetting(dataloader=(("batch_size", fix.micro_batch),), script=(("accumulate", fix.accumulate),))
    if isinstance(fix, PeriodicFix):
        return TrialSetting(script=(("eval_every", fix.every), ("checkpoint_every", fix.every)))
    return None


def projected(report: Report | None, batch: int | None = None) -> dict[TrialSetting, tuple[Projection, str]]:
    """Each setting a finding of ``report`` projected, with that projection (the first finding's wins)."""
    found: dict[TrialSetting, tuple[Projection, str]] = {}
    for finding in () if report is None else report.findings:
        setting = setting_of(finding.projection.fix, batch)
        if setting is not None and setting not in found:
            found[setting] = (finding.projection, f"{finding.bottleneck}/{finding.cause}")
    return found


def derive(
    report: Report | None,
    *,
    cores: int,
    accelerator: bool,
    current_workers: int | None,
    current_batch: int | None = None,
) -> tuple[list[Candidate], list[str]]:
    """(candidates in the order they run, notes on what was left out and why)."""
    notes: list[str] = []
    by_projection = projected(report, current_batch)
    out: list[Candidate] = []

    def add(setting: TrialSetting, source: str) -> None:
        if any(c.setting == setting for c in out):
            return
        if setting.needs_accelerator and not accelerator:
            return
        hit = by_projection.get(setting)
        out.append(Candidate(setting, "projection" if hit else source, *(hit or (None, None))))

    for setting in by_projection:
        if setting.script:  # only the user knows whether the script reads the knob
            notes.append(f"projected {setting.label()}: {_SCRIPT_NOTE}")
        else:
            add(setting, "projection")
    current = current_workers or 0
    counts = [k for k in WORKER_COUNTS if k <= max(1, cores) and k != current]
    for k in counts:
        add(TrialSetting(dataloader=(("num_workers", k),)), "standard")
    best = _best_workers(by_projection, counts, current)
    if best > 0:
        for extra in (("persistent_workers", True), ("prefetch_factor", PREFETCH)):
            add(TrialSetting(dataloader=(("num_workers", best), extra)), "standard")
    if current_batch is not None and current_batch * BATCH_FACTOR <= LOADER_MOST["batch_size"]:
        add(TrialSetting(dataloader=(("batch_size", current_batch * BATCH_FACTOR),)), "standard")
    native = report is not None and bool(report.run.cpu_bf16)
    for setting in _device_settings(best, accelerator=accelerator, cpu_bf16=native):
        add(setting, "standard")
    notes += _device_notes(by_projection, accelerator=accelerator, cpu_bf16=native)
    return out, notes


#: Why a projected script knob is not tried on its own.
_SCRIPT_NOTE = "not tried unless given with --candidates (the script must read its GPUANALYZE_TRIAL_* variable)"


def _best_workers(by_projection: dict[TrialSetting, tuple[Projection, str]], counts: list[int], current: int) -> int:
    """The most promising worker count: the projected one, else the largest tried, else the current."""
    projected_workers = [dict(s.dataloader).get("num_workers") for s in by_projection]
    return next((int(k) for k in projected_workers if k), None) or (max(counts) if counts else current)


def _device_notes(
    by_projection: dict[TrialSetting, tuple[Projection, str]], *, accelerator: bool, cpu_bf16: bool
) -> list[str]:
    """What the device settings left out on a CPU run, and why."""
    if accelerator:
        return []
    notes = [
        "pin_memory, autocast fp16 and TF32 not tried: the baseline ran on the CPU (no accelerator)"
        + ("" if cpu_bf16 else "; autocast bf16 neither: the CPU has no native bf16 (or the trace does not say)")
    ]
    skipped = [s.label() for s in by_projection if s.needs_accelerator]
    if skipped:
        notes.append(f"projected but not tried without an accelerator: {'; '.join(skipped)}")
    return notes


def _device_settings(best: int, *, accelerator: bool, cpu_bf16: bool) -> list[TrialSetting]:
    """The standard set's device settings: pin_memory (with ``best`` workers), autocast and TF32 on an
    accelerator; on a CPU only bf16 autocast, and only where the CPU has native bf16."""
    if not accelerator:
        return [TrialSetting(autocast="bf16")] if cpu_bf16 else []
    return [
        TrialSetting(dataloader=(("num_workers", best), ("pin_memory", True))),
        TrialSetting(autocast="bf16"),
        TrialSetting(autocast="fp16"),
        TrialSetting(tf32=True),
    ]


def given(
    settings: Sequence[TrialSetting], report: Report | None, *, accelerator: bool, current_batch: int | None = None
) -> tuple[list[Candidate], list[str]]:
    """The --candidates settings, each with the baseline's projection for it when there is one."""
    by_projection = projected(report, current_batch)
    out, notes = [], []
    for setting in dict.fromkeys(settings):
        if setting.needs_accelerator and not accelerator:
            notes.append(f"{setting.label()}: not tried, it needs an accelerator and the baseline ran on the CPU")
            continue
        hit = by_projection.get(setting)
        out.append(Candidate(setting, "given", *(hit or (None, None))))
    return out, notes


def on_accelerator(report: Report | None) -> bool:
    """Whether the baseline ran its model on an accelerator (what the trace recorded)."""
    if report is None:
        return False
    device = report.run.device
    return device is not None and device != "cpu"
