"""The idle owners of the analysed steps (ingest/idle_owners.py), summed, and what the rules read from them.

A verdict on a trace with a GPU timeline follows from who owned the GPU's idle time: each bottleneck class has
an owner (or owners) as its defining test, and idle time no class owns (``queued``, start-up work,
``graph_capture``) is said as such, never handed to the nearest class (docs/idle-owners.md).

``queued`` has none: by the stream semantics (cudaStreamWaitEvent) a device idle with work launched waits on
something it is not running (another device, process or rank), which no timeline of its own names.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.analysis import thresholds as T
from analyzer.analysis.kernel_metrics import KernelMetrics
from gpuanalyze.ingest.trace import schema as S

#: The bottleneck (and cause) each owner is the defining test of; None: no class, the trace says what it is.
OWNER_CLASS: dict[str, tuple[str, str] | None] = {
    "graph_capture": None,
    "compilation": None,
    "module_loading": None,
    "device_setup": None,
    "allocator": ("sync", "allocator_churn"),
    "data_loader": ("data_loading", "input_pipeline"),
    "sync": ("sync", "host_sync"),
    "collective": ("sync", "collective_wait"),
    "launch": ("batch_size", "launch_overhead"),
    "cpu_ops": ("host", "cpu_work"),
    "host_idle": ("host", "untraced"),
    "queued": None,
}
#: What each owner is, in words (evidence, the terminal, the report).
OWNER_WORDS: dict[str, str] = {
    "graph_capture": "CUDA graph capture (launches recorded, nothing run)",
    "compilation": "compilation (torch.compile, JIT)",
    "module_loading": "module loading (first launches of kernels)",
    "device_setup": "device and context set-up",
    "allocator": "device memory allocation and frees (cudaMalloc/cudaFree)",
    "data_loader": "waiting on the DataLoader",
    "sync": "host blocked in a sync or blocking copy",
    "collective": "host waiting in a collective",
    "launch": "host dispatching and launching kernels",
    "cpu_ops": "CPU ops that launch no GPU work",
    "host_idle": "host work the trace does not show (no host call covers the gap)",
    "queued": "work queued but waiting on a dependency (events, other streams)",
}


@dataclass(frozen=True, slots=True)
class IdleOwnership:
    """Idle owners summed over the analysed steps with kernel statistics."""

    steps: int
    wall_ms: float
    idle_ms: float
    ms: dict[str, float]

    def share(self, owner: str) -> float:
        """The owner's idle time over the steps' wall time, in [0, 1]."""
        return min(1.0, max(0.0, self.ms[owner] / self.wall_ms)) if self.wall_ms > 0 else 0.0

    def shares(self, owners: tuple[str, ...]) -> float:
        return min(1.0, sum(self.share(o) for o in owners))

    def per_step(self, owner: str) -> float:
        return self.ms[owner] / self.steps if self.steps else 0.0

    def top(self, n: int = 4) -> tuple[tuple[str, float], ...]:
        """The owners with the most idle time, as (owner, ms per step), most first (none of 0 ms)."""
        ranked = sorted(((o, self.per_step(o)) for o in S.IDLE_OWNERS), key=lambda kv: kv[1], reverse=True)
        return tuple((o, ms) for o, ms in ranked[:n] if ms > 0)

    def words(self, n: int = 3) -> str:
        """The top owners as 'owner ms/step (share of idle)'."""
        parts = [f"{o} {ms:.3g} ms/step ({ms * self.steps / self.idle_ms:.0%} of idle)" for o, ms in self.top(n)]
        return ", ".join(parts) if self.idle_ms > 0 else "no idle time"


def leading_class(owners: IdleOwnership | None) -> str | None:
    """The class (``unknown``: owners of none) whose owners hold DOMINATES of a GPU idle DOMINATES of the step, both
    without the start-up work's idle: start-up work says warm-up (rules/warmup.py) or, where the steps are judged
    anyway (copies bound warm or cold), nothing of the steady state's class."""
    if owners is None:
        return None
    startup = sum(owners.ms[o] for o in S.STARTUP_OWNERS)
    wall, idle = owners.wall_ms - startup, owners.idle_ms - startup
    if wall <= 0 or idle < T.DOMINATES.value * wall:
        return None
    held = dict.fromkeys((c[0] if c else "unknown" for c in OWNER_CLASS.values()), 0.0)
    for o in S.IDLE_OWNERS:
        if o not in S.STARTUP_OWNERS:
            held[(OWNER_CLASS[o] or ("unknown",))[0]] += owners.ms[o]
    top = max(held, key=held.__getitem__)
    return top if held[top] >= T.DOMINATES.value * idle else None


def owned_consistency(km: KernelMetrics | None, owners: tuple[str, ...], threshold: float) -> float | None:
    """Fraction of the steps kept one by one (KernelMetrics.step_owners) in which ``owners`` own at least
    ``threshold`` of the step: how many steps show what the summed owners show. None without such steps."""
    if km is None:
        return None
    at = [S.IDLE_OWNERS.index(o) for o in owners]
    hits = [sum(s.ms[i] for i in at) >= threshold * s.wall_ms for s in km.step_owners if s.wall_ms > 0]
    return sum(hits) / len(hits) if hits else None


def ownership(km: KernelMetrics | None) -> IdleOwnership | None:
    """The owners of the steps with kernel statistics, when every one of them has them (None otherwise:
    older imports, our own traces' steps outside sampled windows)."""
    if km is None or km.owned_steps == 0 or km.owned_steps != km.steps:
        return None
    ms = {o: km.totals_ms[S.owner_field(o)] for o in S.IDLE_OWNERS}
    return IdleOwnership(km.steps, km.wall_ms, km.totals_ms["window_idle_ms"], ms)


@dataclass(frozen=True, slots=True)
class OwnerMove:
    """How one owner's idle time per step moved from one run to another (``compare``)."""

    owner: str
    before_ms: float
    after_ms: float

    @property
    def delta_ms(self) -> float:
        return self.after_ms - self.before_ms


def owner_moves(before: IdleOwnership, after: IdleOwnership) -> tuple[OwnerMove, ...]:
    """Every owner with idle time in either run, in ms per step, the largest move first."""
    moves = [
        OwnerMove(o, before.per_step(o), after.per_step(o))
        for o in S.IDLE_OWNERS
        if before.ms[o] > 0 or after.ms[o] > 0
    ]
    return tuple(sorted(moves, key=lambda m: abs(m.delta_ms), reverse=True))
