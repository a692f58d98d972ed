"""The concrete fix a projection assumes, as a typed value: one small frozen type per fix kind.

A rule's ``project`` puts the fix on its ``Projection`` (``Projection.fix``); ``advise``, ``compare``'s
projection checks (planning.projection_check), the settling trial (planning.settling_trial) and
``run --try``'s candidates (run.candidates) read the same object, never a string key. ``params``
gives it as (name, value) pairs for the JSON report (``projection_params``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkerFix:
    """Load in ``workers`` DataLoader worker processes."""

    workers: int
    persistent: bool = False
    """Keep the workers alive between epochs (persistent_workers=True) as part of the fix."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"a worker fix needs at least one worker, not {self.workers}")

    @property
    def params(self) -> tuple[tuple[str, int | float | str], ...]:
        return (("num_workers", self.workers),) + ((("persistent_workers", True),) if self.persistent else ())


@dataclass(frozen=True, slots=True)
class BatchFix:
    """A batch ``multiplier`` times larger (the projection is per current batch worth of samples)."""

    multiplier: float

    def __post_init__(self) -> None:
        if self.multiplier <= 1:
            raise ValueError(f"a batch fix makes the batch larger, not x{self.multiplier:g}")

    @property
    def params(self) -> tuple[tuple[str, int | float | str], ...]:
        k = self.multiplier
        return (("batch_multiplier", int(k) if float(k).is_integer() else k),)


@dataclass(frozen=True, slots=True)
class PrecisionFix:
    """Matmuls in ``dtype`` on tensor cores (autocast), parameters left as they are."""

    dtype: str
    """'bfloat16' or 'float16' (torch's dtype name without the 'torch.' prefix)."""

    @property
    def params(self) -> tuple[tuple[str, int | float | str], ...]:
        return (("precision", self.dtype),)

    @property
    def autocast(self) -> str | None:
        """The trial's autocast setting for this dtype ('bf16'/'fp16'), None when it has none."""
        return _AUTOCAST.get(self.dtype.lower())


@dataclass(frozen=True, slots=True)
class MicroBatchFix:
    """The same samples per optimizer step in ``accumulate`` micro-batches of ``micro_batch`` samples."""

    micro_batch: int
    accumulate: int

    def __post_init__(self) -> None:
        if self.micro_batch < 1 or self.accumulate < 1:
            raise ValueError(f"micro-batch {self.micro_batch} x {self.accumulate} is not a setting")

    @property
    def params(self) -> tuple[tuple[str, int | float | str], ...]:
        return (("micro_batch", self.micro_batch), ("accumulate", self.accumulate))


@dataclass(frozen=True, slots=True)
class PeriodicFix:
    """Periodic work (checkpoint, evaluation, logging on an interval) every ``every`` steps instead of every
    ``period``."""

    period: int
    every: int

    def __post_init__(self) -> None:
        if not 2 <= self.period < self.every:
            raise ValueError(f"periodic work every {self.period} steps made every {self.every} is not less often")

    @property
    def params(self) -> tuple[tuple[str, int | float | str], ...]:
        return (("period", self.period), ("every", self.every))


Fix = WorkerFix | BatchFix | PrecisionFix | MicroBatchFix | PeriodicFix
"""Every fix kind a projection can size."""

_AUTOCAST = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16"}
