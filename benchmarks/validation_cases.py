"""The before/after pairs of benchmarks/projection_validation.py and how a finding's fix is applied.

A case is a real CPU loop (tests/scenarios/fixes.py, or the DDP loop of tests/scenarios/ddp.py).
``fixes_of`` reads the fixes a finding recommends, in its order: the projection's setting first
(``num_workers``, ``batch_multiplier``; with ``persistent_workers=True`` when the finding also
recommends it), the cause's fix (a straggler: balance the shards; host syncs: read every N steps),
then the ones its recommendations name (a prefetching thread, whole batches by index, a cheaper
``__getitem__``/batch function, logging every N steps). A case applies the first of them it can
(or the first of ``prefer`` the finding recommends), changing one knob of the same loop.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared loops in tests/scenarios
from analyzer.analysis.fixes import BatchFix, MicroBatchFix, PrecisionFix, WorkerFix
from tests.scenarios.fixes import FixLoop, record

SETTINGS = ("num_workers", "batch", "precision", "micro_batch")
"""Fixes that are a projection's setting (Projection.fix): the projection is for exactly them."""
QUICK = 6
"""--quick runs this fraction of each case's steps."""
EVERY_N = 50
"""N for 'do it every N steps' (logging, reading a metric)."""


@dataclass(frozen=True, slots=True)
class Fix:
    key: str
    """num_workers, batch, precision, micro_batch, balance, sync_every, prefetch_thread, cheaper_batches,
    cheaper_loading, log_every, none."""
    value: int | float | bool | str | None = None
    persistent: bool = False
    """num_workers only: with persistent_workers=True (when the finding also recommends it)."""
    accumulate: int = 1
    """micro_batch only: micro-batches per optimizer step (``value`` is the micro-batch's samples)."""

    def label(self) -> str:
        if self.key == "num_workers":
            return f"workers={self.value}" + (" persistent" if self.persistent else "")
        if self.key == "batch":
            return f"batch x{self.value:g}" if isinstance(self.value, int | float) else "batch"
        if self.key in ("log_every", "sync_every"):
            return f"{self.key}={self.value}"
        if self.key == "micro_batch":
            return f"micro {self.value} x {self.accumulate}"
        return self.key


def _names(rec: str) -> list[str]:
    """The fixes one recommendation (lower case) names; advice against a fix ('not a thread') names none."""
    keys = []
    against_thread = "not a thread" in rec or "thread would not" in rec
    if "prefetching thread" in rec and not against_thread:
        keys.append("prefetch_thread")
    if "whole batches by index" in rec or "cheaper to build" in rec:
        keys.append("cheaper_batches")
    if "cheaper" in rec and ("__getitem__" in rec or "batch function" in rec):
        keys.append("cheaper_loading")
    if "every n steps" in rec:
        keys.append("log_every")
    return keys


def fixes_of(finding: Any) -> list[Fix]:
    """The fixes a finding recommends, in order (see the module docstring); [] when it names none."""
    fix = finding.projection.fix
    recs = [r.lower() for r in finding.recommendations]
    fixes: list[Fix] = []
    if isinstance(fix, WorkerFix):
        persistent = fix.persistent or any("persistent_workers=true" in r for r in recs)
        fixes.append(Fix("num_workers", fix.workers, persistent))
    if isinstance(fix, BatchFix):
        fixes.append(Fix("batch", fix.multiplier))
    if isinstance(fix, PrecisionFix) and fix.autocast == "bf16":
        fixes.append(Fix("precision", "bf16"))
    if isinstance(fix, MicroBatchFix):
        fixes.append(Fix("micro_batch", fix.micro_batch, accumulate=fix.accumulate))
    if finding.cause == "straggler":
        fixes.append(Fix("balance"))
    if finding.cause == "host_sync":
        fixes.append(Fix("sync_every", EVERY_N))
    for rec in recs:
        for key in _names(rec):
            if all(f.key != key for f in fixes):
                fixes.append(Fix(key, EVERY_N if key == "log_every" else None))
    return fixes


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    kind: str
    """The kind of fix the case exists for (what it covers)."""
    family: str
    """The fix family (leave-one-family-out validation holds out every case of one family at a time)."""
    loop: FixLoop | None = None
    ddp_batches: tuple[int, int] | None = None
    """A DDP case (tests/scenarios/ddp.py, gloo, 2 ranks): each rank's batch size."""
    prefer: tuple[str, ...] = ()
    """Fix keys to apply first when the finding recommends them."""
    none_check: dict[str, Any] | None = None
    """For a loop the analyzer should call healthy: the loop fields the would-be fix changes (AFTER
    runs it); without it AFTER reruns the loop unchanged."""
    min_steps: int = 20

    def steps(self, quick: bool) -> Case:
        """The case at quick size (a sixth of the steps, at least min_steps)."""
        if not quick or self.loop is None:  # DDP: record() sizes it
            return self
        return replace(self, loop=replace(self.loop, steps=max(self.min_steps, self.loop.steps // QUICK)))

    def choose(self, fixes: list[Fix]) -> Fix | None:
        """The fix to apply: the projection's setting when the finding has one (the projection is for
        exactly that), else the first of ``prefer`` the finding recommends, else the first this case
        can apply."""
        setting = [f for f in fixes if f.key in SETTINGS]
        if setting:
            return setting[0] if self.apply(setting[0]) is not None else None
        for key in self.prefer:
            for f in fixes:
                if f.key == key and self.apply(f) is not None:
                    return f
        return next((f for f in fixes if self.apply(f) is not None), None)

    def apply(self, fix: Fix) -> FixLoop | tuple[int, int] | None:
        """The loop with the fix applied (one knob changed); None when the fix does not apply to it."""
        if self.ddp_batches is not None:
            if fix.key == "balance":
                half = sum(self.ddp_batches) // 2
                return (half, sum(self.ddp_batches) - half)
            return self.ddp_batches if fix.key == "none" else None
        c = self.loop
        assert c is not None
        k = fix.key
        if k == "none":
            return replace(c, **(self.none_check or {}))
        if k == "num_workers" and not c.function_loader and isinstance(fix.value, int):
            return replace(c, num_workers=fix.value, persistent_workers=fix.persistent or c.persistent_workers)
        if k == "batch" and isinstance(fix.value, int | float) and fix.value == int(fix.value) > 1:
            m = int(fix.value)
            return replace(c, batch=c.batch * m, steps=max(self.min_steps, c.steps // m))
        if k == "precision" and not c.autocast_bf16:
            return replace(c, autocast_bf16=True)
        if k == "micro_batch" and isinstance(fix.value, int) and c.accumulate > fix.accumulate:
            return replace(c, batch=fix.value, accumulate=fix.accumulate)
        if k == "prefetch_thread" and c.function_loader:
            return replace(c, prefetch_thread=True)
        if k == "log_every" and c.log_every:
            return replace(c, log_every=int(fix.value or EVERY_N))
        if k == "sync_every" and c.item_every:
            return replace(c, item_every=int(fix.value or EVERY_N))
        if k in ("cheaper_loading", "cheaper_batches"):
            if c.function_loader:
                return replace(c, fn_cheap=True)
            if c.sample_sleep_s or c.sample_numpy_reps:  # decoded samples cached: the per-sample cost gone
                return replace(c, sample_sleep_s=0.0, sample_numpy_reps=0)
            return replace(c, batched_fetch=True)  # in memory: whole batches by index
        return None

    def record(
        self, variant: FixLoop | tuple[int, int], tmp: Path, tag: str, quick: bool, *, windows: bool = True
    ) -> Path:
        """Record the loop (or the DDP run) with ``variant`` under analyzer.profile in ``tmp``: the trace,
        or the directory of per-rank traces. ``windows``: a CPU loop samples profiler windows (CPU op
        statistics: the matmul and per-call shares its projections then measure)."""
        if isinstance(variant, FixLoop):
            out = tmp / f"{tag}.arrow"
            record(variant, out, windows=windows)
            return out
        from tests.scenarios.ddp import run_ddp

        folder = Path(tempfile.mkdtemp(prefix=tag, dir=tmp))
        run_ddp(folder / "trace.arrow", batches=variant, width=(1024, 2048), steps=30 if quick else 120)
        return folder


_SLEEP = FixLoop(sample_sleep_s=0.0015, steps=120)
_PY_BATCH = FixLoop(function_loader=True, fn_python_reps=2, batch=64, features=512, hidden=1024, steps=120)
_HEALTHY = FixLoop(batch=256, features=1024, hidden=2048, steps=48)

CASES: tuple[Case, ...] = (
    Case("sleep 1.5 ms/sample (I/O-like)", "num_workers", "workers", _SLEEP),
    Case("sleep 0.3 ms/sample (I/O-like)", "num_workers", "workers", FixLoop(sample_sleep_s=0.0003, steps=180)),
    Case(
        "numpy __getitem__, 20 passes", "num_workers (CPU-bound)", "workers", FixLoop(sample_numpy_reps=20, steps=180)
    ),
    Case("numpy __getitem__, 5 passes", "num_workers (CPU-bound)", "workers", FixLoop(sample_numpy_reps=5, steps=300)),
    Case(
        "6 short epochs, workers restart",
        "persistent_workers",
        "persistent_workers",
        FixLoop(sample_sleep_s=0.0005, epochs=6, steps=24),
        min_steps=6,
    ),
    Case(
        "in memory, batch 128, per sample",
        "cheaper batch construction",
        "cheaper_loading",
        FixLoop(batch=128, features=16, hidden=16, layers=1, steps=900),
        prefer=("cheaper_batches", "cheaper_loading"),
    ),
    Case(
        "batch 1, tiny MLP",
        "batch size (overhead-bound)",
        "batch",
        FixLoop(batch=1, features=16, hidden=32, steps=1200),
    ),
    Case(
        "batch 2, 64-wide MLP",
        "batch size (overhead-bound)",
        "batch",
        FixLoop(batch=2, features=64, hidden=128, steps=900),
    ),
    Case(
        "batch 8, 512-wide MLP",
        "batch size (compute-bound)",
        "batch",
        FixLoop(batch=8, features=512, hidden=1024, steps=240),
    ),
    Case(
        "get_batch sleeps 8 ms (prof.data)",
        "custom loader: prefetch thread",
        "prefetch_thread",
        FixLoop(function_loader=True, fn_sleep_s=0.008, batch=64, features=512, hidden=1024, steps=120),
        prefer=("prefetch_thread",),
    ),
    Case(
        "pure-Python get_batch, thread?",
        "custom loader: prefetch thread",
        "prefetch_thread",
        _PY_BATCH,
        prefer=("prefetch_thread",),
    ),
    Case(
        "pure-Python get_batch, cheaper",
        "custom loader made cheaper",
        "cheaper_loading",
        _PY_BATCH,
        prefer=("cheaper_loading",),
    ),
    Case("grad stats .tolist() every step", "logging frequency", "logging", FixLoop(log_every=1, steps=240)),
    Case(
        "loss.item() every step (CPU)",
        "host syncs per step",
        "host_syncs",
        replace(_HEALTHY, item_every=1),
        none_check={"item_every": EVERY_N},
        min_steps=10,
    ),
    Case("healthy, 1024-wide MLP b256", "none (change nothing)", "none", _HEALTHY, min_steps=10),
    Case(
        "micro-batch 2 x 8, 64-wide MLP",
        "fewer, larger micro-batches",
        "micro_batch",
        FixLoop(batch=2, accumulate=8, features=64, hidden=128, steps=150),
    ),
    Case(
        "fp32 1024-wide MLP b128, bf16 CPU",
        "bf16 autocast (CPU)",
        "precision",
        FixLoop(batch=128, features=1024, hidden=2048, steps=48),
        min_steps=10,
    ),
    # shards large enough that rank 1's extra work, not the all-reduce itself, is what the ranks wait for
    Case("DDP 2 ranks, rank 1 shard +30%", "straggler balance", "straggler", ddp_batches=(1024, 1344)),
)
