"""Kernel-level evidence aggregated over the analysed steps that carry kernel statistics.

Computed per rank (``kernel_partial``) and combined (``combine_kernels``), so a run of many ranks
never holds every rank's statistics at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from analyzer.analysis.quantiles import Sketch, sketch
from analyzer.analysis.thresholds import FEW_STEPS, WARMUP_STARTUP
from gpuanalyze.ingest.timeline.kernel_stats import TOP_BLOCKING, hta_percentages, top_kernels
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import GpuSummary, RunInfo

#: Distinct kernel names a rank reports for the top-kernel ranking (the rest are dropped, smallest first).
MAX_NAMES_PER_RANK = 65536
#: User frames kept (KernelStats.owner_frames summed over the steps), most idle first.
MAX_FRAMES = 64
#: Steps (per rank) whose idle owners are kept one by one for the report (JSON, the HTML bar): the first by step.
MAX_STEP_OWNERS = 256
#: Rows decoded at a time: a rank's statistics are folded chunk by chunk, never all held as structs (~2 KB each).
CHUNK_ROWS = 4096
_ONE = msgspec.json.Decoder(S.KernelStats)


@dataclass(frozen=True, slots=True)
class BlockingGroup:
    op: str
    """The CPU op around the call ('' when the trace does not say)."""
    caller: str
    """The record_function / nn.Module around it ('' when the trace does not say)."""
    call: str
    total_ms: float
    count: int
    idle_ms: float = 0.0
    """GPU idle that ``sync`` owns through these calls (schema.BlockingOp.idle_ms)."""


@dataclass(frozen=True, slots=True)
class StartupStep:
    """A step whose start-up work takes WARMUP_STARTUP or more of it (KernelStats.startup_ms): warm-up, whatever
    its number; what the warm-up verdict quotes."""

    step: int
    rank: int
    wall_ms: float
    startup_ms: float
    ops: tuple[tuple[str, float, int], ...]
    """(name, ms, count) of its start-up work, most first (KernelStats.startup_ops)."""


@dataclass(frozen=True, slots=True)
class StepOwners:
    """One analysed step's idle owners (KernelStats.idle_owner_*_ms), for reports that show them step by step."""

    step: int
    rank: int
    wall_ms: float
    idle_ms: float
    ms: tuple[float, ...]
    """Per owner, in schema.IDLE_OWNERS order; they add up to ``idle_ms``."""


@dataclass(frozen=True, slots=True)
class KernelSums:
    """What one rank's partial and the run's metrics both hold: sums over steps with kernel statistics."""

    steps: int
    """Analysed steps with kernel statistics (sampled windows or an imported trace)."""
    totals_ms: dict[str, float]
    """Sums over those steps of every KERNEL_STATS time field."""
    wall_ms: float
    """Wall time of those steps."""
    kernel_count: int


@dataclass(frozen=True, slots=True)
class KernelMetrics(KernelSums):
    """The run's kernel statistics: its ranks' partials combined (``combine_kernels``)."""

    kernel_median_us: float | None
    top_kernels: tuple[tuple[str, float, int], ...]
    """(name, total ms, count), most time first."""
    blocking_ops: tuple[BlockingGroup, ...] = ()
    """Blocked host time by (op, caller, call) over those steps, most first (KernelStats.blocking_ops)."""
    startup_steps: int = 0
    """Those steps made mostly of start-up work (StartupStep)."""
    startup_detail: tuple[StartupStep, ...] = ()
    """The first FEW_STEPS of them by step number, then rank."""
    owned_steps: int = 0
    """Those steps whose idle owners were measured (KernelStats.owners)."""
    step_owners: tuple[StepOwners, ...] = ()
    """The first MAX_STEP_OWNERS of them by step number, then rank."""
    owner_frames: tuple[tuple[str, str, float], ...] = ()
    """(owner, user frame ``file:line function``, idle ms over those steps), most first (KernelStats.owner_frames)."""

    def share_of_kernel_time(self, category: str) -> float:
        total = sum(self.totals_ms[f"{c}_ms"] for c in S.KERNEL_CATEGORIES)
        return self.totals_ms[f"{category}_ms"] / total if total else 0.0

    @property
    def idle_ms(self) -> float:
        return self.totals_ms["idle_host_wait_ms"] + self.totals_ms["idle_launch_ms"] + self.totals_ms["idle_other_ms"]


@dataclass(frozen=True, slots=True)
class KernelPartial(KernelSums):
    """One rank's kernel statistics, summed."""

    medians: Sketch
    top: dict[str, tuple[float, int]]
    """Per kernel name over the rank's steps: (total ms, count) from the per-step top lists."""
    blocking: dict[tuple[str, str, str], tuple[float, int, float]] = field(default_factory=dict)
    """Per (op, caller, call) over the rank's steps: (total ms, count, GPU idle ms owned) from the per-step
    blocking_ops."""
    startup_steps: int = 0
    startup_detail: tuple[StartupStep, ...] = ()
    """The rank's first FEW_STEPS steps made mostly of start-up work."""
    owned_steps: int = 0
    step_owners: tuple[StepOwners, ...] = ()
    """The rank's first MAX_STEP_OWNERS steps with idle owners, by step number."""
    frames: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Idle ms per (owner, user frame) over the rank's steps (KernelStats.owner_frames)."""


def _stats(texts: list[str]) -> list[S.KernelStats]:
    return [_ONE.decode(t) for t in texts]  # not one joined copy of every text (a long run's are ~100 MB)


def step_kernel_medians(texts: list[str]) -> np.ndarray:
    """Each sampled step's median kernel duration (us), where known (``texts``: the steps' KERNEL_STATS)."""
    out = [
        st.kernel_median_us
        for i in range(0, len(texts), CHUNK_ROWS)
        for st in _stats(texts[i : i + CHUNK_ROWS])
        if st.kernel_median_us is not None
    ]
    return np.array(out, dtype=np.float64)


def startup_owned_ms(st: S.KernelStats) -> float:
    """The step's start-up time: GPU idle owned by start-up work where the owners were measured (a host busy
    compiling while the GPU runs is not warm-up; allocation that repeats is churn, owner ``allocator``, not
    start-up: ingest/idle_owners.py), else the host time in start-up work (older imports)."""
    if st.owners:
        return sum(getattr(st, S.owner_field(o)) for o in S.STARTUP_OWNERS)
    return st.startup_ms


def _startup_steps(steps: list[int], rank: int, walls: list[float], stats: list[S.KernelStats]) -> list[StartupStep]:
    """The rows whose start-up work takes WARMUP_STARTUP or more of their wall time."""
    out = []
    for step, wall, st in zip(steps, walls, stats, strict=True):
        startup = startup_owned_ms(st)
        if wall > 0 and startup > 0 and startup >= WARMUP_STARTUP * wall:
            ops = tuple((o.name, o.total_ms, o.count) for o in st.startup_ops)
            out.append(StartupStep(int(step), rank, float(wall), startup, ops))
    return out


def _step_owners(steps: list[int], rank: int, walls: list[float], stats: list[S.KernelStats]) -> list[StepOwners]:
    """The rows with idle owners, one by one."""
    return [
        StepOwners(
            int(step), rank, float(wall), st.window_idle_ms, tuple(getattr(st, S.owner_field(o)) for o in S.IDLE_OWNERS)
        )
        for step, wall, st in zip(steps, walls, stats, strict=True)
        if st.owners
    ]


class _Fold:
    """One rank's kernel statistics summed as its rows are decoded, CHUNK_ROWS at a time."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(S.KERNEL_STAT_FIELDS, 0.0)
        self.medians: list[float] = []
        self.top: dict[str, list[float]] = {}
        self.blocking: dict[tuple[str, str, str], list[float]] = {}
        self.startup: list[StartupStep] = []
        self.startup_steps = self.kernel_count = self.owned_steps = 0
        self.step_owners: list[StepOwners] = []
        self.frames: Counter[tuple[str, str]] = Counter()

    def add(self, stats: list[S.KernelStats], steps: list[int], walls: list[float], rank: int) -> None:
        for f in S.KERNEL_STAT_FIELDS:
            self.totals[f] += float(sum(getattr(st, f) for st in stats))
        self.medians += [st.kernel_median_us for st in stats if st.kernel_median_us is not None]
        for st in stats:
            self.kernel_count += st.kernel_count
            self.owned_steps += st.owners
            for k in st.top_kernels:
                t = self.top.setdefault(k.name, [0.0, 0])
                t[0] += k.total_ms
                t[1] += k.count
            for b in st.blocking_ops:
                g = self.blocking.setdefault((b.op, b.caller, b.call), [0.0, 0, 0.0])
                g[0] += b.total_ms
                g[1] += b.count
                g[2] += b.idle_ms
            self.frames.update({(f.owner, f.frame): f.ms for f in st.owner_frames})  # a step names each once
        if len(self.top) > MAX_NAMES_PER_RANK:
            self.top = dict(sorted(self.top.items(), key=lambda kv: kv[1][0], reverse=True)[:MAX_NAMES_PER_RANK])
        if len(self.blocking) > MAX_NAMES_PER_RANK:
            self.blocking = dict(sorted(self.blocking.items(), key=_blocking_rank)[:MAX_NAMES_PER_RANK])
        startup = _startup_steps(steps, rank, walls, stats)
        self.startup_steps += len(startup)
        self.startup = (self.startup + startup)[:FEW_STEPS]
        owned = self.step_owners + _step_owners(steps, rank, walls, stats)
        self.step_owners = sorted(owned, key=lambda o: o.step)[:MAX_STEP_OWNERS]  # the first by step number


def kernel_partial(texts: list[str], walls: np.ndarray, steps: np.ndarray, rank: int) -> KernelPartial | None:
    """The kernel statistics of one rank's sampled post-warm-up rows (``texts``: their KERNEL_STATS,
    ``walls``: their wall times, NaN where unknown, ``steps``: their step numbers); None when none has any."""
    if not texts:
        return None
    fold = _Fold()
    wall_list, step_list = walls.tolist(), steps.tolist()
    for i in range(0, len(texts), CHUNK_ROWS):
        j = i + CHUNK_ROWS
        fold.add(_stats(texts[i:j]), step_list[i:j], wall_list[i:j], rank)
    return KernelPartial(
        steps=len(texts),
        totals_ms=fold.totals,
        wall_ms=float(np.nansum(walls)),
        kernel_count=fold.kernel_count,
        medians=sketch(np.array(fold.medians, dtype=np.float64)),
        top={name: (ms, int(count)) for name, (ms, count) in fold.top.items()},
        blocking={key: (ms, int(count), idle) for key, (ms, count, idle) in fold.blocking.items()},
        startup_steps=fold.startup_steps,
        startup_detail=tuple(fold.startup),
        owned_steps=fold.owned_steps,
        step_owners=tuple(fold.step_owners),
        frames=fold.frames,
    )


def _frames(parts: Sequence[KernelPartial]) -> tuple[tuple[str, str, float], ...]:
    """The MAX_FRAMES (owner, frame, ms) with the most idle, the ranks together."""
    summed: Counter[tuple[str, str]] = sum((Counter(p.frames) for p in parts), Counter())
    return tuple((o, f, ms) for (o, f), ms in summed.most_common(MAX_FRAMES) if ms > 0)


def _blocking_rank(kv: tuple[tuple[str, str, str], list[float]]) -> tuple[float, float]:
    """Blocking groups in report order: the GPU idle they own first, then the host time blocked."""
    return -kv[1][2], -kv[1][0]


def _blocking(parts: Sequence[KernelPartial]) -> tuple[BlockingGroup, ...]:
    """The TOP_BLOCKING blocking-call groups of the ranks together: the GPU idle they own, then host time."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for p in parts:
        for key, (ms, count, idle) in p.blocking.items():
            t = groups.setdefault(key, [0.0, 0, 0.0])
            t[0] += ms
            t[1] += count
            t[2] += idle
    top = sorted(groups.items(), key=_blocking_rank)[:TOP_BLOCKING]
    return tuple(BlockingGroup(op, caller, call, ms, int(n), idle) for (op, caller, call), (ms, n, idle) in top)


def combine_kernels(parts: Sequence[KernelPartial], median_us: float | None) -> KernelMetrics | None:
    """KernelMetrics of the ranks' partials (in rank order); ``median_us`` is the median of the
    per-step medians, computed by the caller (it may need a second pass over the ranks)."""
    cpu_ops = sum(p.totals_ms["cpu_op_ms"] for p in parts)  # a CPU run's sampled windows (ingest/cpu_ops.py)
    if not parts or (not sum(p.kernel_count for p in parts) and cpu_ops <= 0):
        return None
    totals = {f: sum(p.totals_ms[f] for p in parts) for f in S.KERNEL_STAT_FIELDS}
    ranked = top_kernels((name, ms, count) for p in parts for name, (ms, count) in p.top.items())
    startup = sorted((s for p in parts for s in p.startup_detail), key=lambda s: (s.step, s.rank))[:FEW_STEPS]
    return KernelMetrics(
        steps=sum(p.steps for p in parts),
        totals_ms=totals,
        wall_ms=sum(p.wall_ms for p in parts),
        kernel_count=sum(p.kernel_count for p in parts),
        kernel_median_us=median_us,
        top_kernels=tuple(ranked),
        blocking_ops=_blocking(parts),
        startup_steps=sum(p.startup_steps for p in parts),
        startup_detail=tuple(startup),
        owned_steps=sum(p.owned_steps for p in parts),
        step_owners=tuple(
            sorted((s for p in parts for s in p.step_owners), key=lambda s: (s.step, s.rank))[:MAX_STEP_OWNERS]
        ),
        owner_frames=_frames(parts),
    )


def gpu_breakdown(run: RunInfo, km: KernelMetrics | None) -> GpuSummary | None:
    """HTA-style percentages: the importer's whole-trace numbers, else the sampled windows' sums."""
    if run.gpu_summary is not None:
        return run.gpu_summary
    if km is None:
        return None
    return hta_percentages(km.totals_ms["gpu_span_ms"], km.totals_ms["gpu_busy_ms"], km.totals_ms["compute_ms"])
