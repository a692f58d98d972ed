"""sync: the host or the GPU waits on something other than its own work.

Three causes, one rule: a straggler rank that the others wait for in every collective; blocking
host syncs (``.item()``, ``.cpu()``, ``synchronize``) and the exposed all-reduce wait measured by
the recorder (sync_ms; on GPU traces only while the GPU idles); and communication kernels that run
with nothing to overlap them (kernel statistics: share of the GPU timeline).

On a GPU a blocking sync costs more than the time the host spends blocked: the GPU queue drains
and the GPU idles until the host launches the next step. Without the sync the host runs ahead,
so the projection is the longer of the GPU's own work and the host's path without the wait.
"""

from __future__ import annotations

from typing import ClassVar

from analyzer.analysis import thresholds as T
from analyzer.analysis.aggregate import clamp
from analyzer.analysis.findings import Evidence, Projection
from analyzer.analysis.metrics import RAW
from analyzer.analysis.ranks import RankAnalysis
from analyzer.analysis.rules.blocking import blocking_site, blocking_site_advice
from analyzer.analysis.rules.rule import Context, Detection, FixRunsOn, Rule, bounded
from analyzer.machine.bandwidth import allreduce_bandwidths
from gpuanalyze.ingest.trace import schema as S

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}

_STRAGGLER_FIXES = {
    "start": "Rank {r} starts its steps late: the time is lost before the step, in the previous step's tail or "
    "host work between steps (logging, checkpointing or evaluation on some ranks only, a slower optimizer step, "
    "garbage collection): do that work on every rank alike or off the step.",
    "data": "Rank {r} waits longest for input: check its node's data path (disk, network storage, CPU cores for "
    "DataLoader workers) and give it more workers.",
    "forward": "Rank {r} is slow in forward, before the others can meet it in a collective: {device}; look for "
    "input imbalance (uneven sequence lengths per rank, uneven token routing to experts before an all-to-all) or "
    "extra work done only on that rank. DDP bucket settings do not change this wait.",
    "backward": "Rank {r} is slow in backward: {device}; look for uneven inputs: shapes that differ per rank change "
    "the work. Every gradient bucket's all-reduce waits for it: smaller buckets (bucket_cap_mb) let the others' "
    "all-reduces overlap the rest of backward.",
    "optimizer": "Rank {r} is slow in the optimizer step: look for rank-specific work (logging, checkpointing, EMA).",
}
#: What to check on the slow rank's device, by what the trace shows about it.
_DEVICE_CPU = (
    "this run used no accelerator, so check that rank's CPU (frequency scaling, other processes on its node, the "
    "cores and threads it gets: torch.get_num_threads())"
)
_DEVICE_UNSAMPLED = (
    "the trace has no clock, temperature or power samples of its GPU, so record them on every rank (nvidia-smi "
    "--query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv -l 1) to tell a throttled or different GPU from "
    "uneven work"
)
_STRAGGLER_OTHER = (
    "Rank {r}'s extra time is outside forward, backward, optimizer and data (host work no phase "
    "accounts for): look for rank-only work in the loop (logging, evaluation, checkpointing on "
    "rank 0) and for a slower host."
)


def exposed_comm_share(ctx: Context) -> float:
    """Share of the GPU timeline where only communication kernels run (0 without kernel statistics)."""
    km = ctx.m.kernels
    if km is None or km.totals_ms["gpu_span_ms"] <= 0:
        return 0.0
    return clamp(km.totals_ms["comm_exposed_ms"] / km.totals_ms["gpu_span_ms"])


#: Idle owners the sync rule answers for (analysis.owners.OWNER_CLASS), and the cause of each.
SYNC_OWNERS: dict[str, str] = {"sync": "host_sync", "collective": "collective_wait", "allocator": "allocator_churn"}


def blocked_share(ctx: Context) -> float:
    """Share of the step the host's blocking costs: on a measured GPU timeline the GPU idle that blocking calls,
    collectives and allocator calls own (a host waiting on a busy GPU costs nothing); else the host time in
    blocking calls."""
    owners = ctx.owners
    if owners is not None:
        return owners.shares(tuple(SYNC_OWNERS))
    return ctx.m.share[S.SYNC_MS] or 0.0


def _owner_cause(ctx: Context) -> str | None:
    """The sync cause whose owner holds the most idle time (measured GPU timelines only)."""
    owners = ctx.owners
    if owners is None:
        return None
    return SYNC_OWNERS[max(SYNC_OWNERS, key=lambda o: owners.ms[o])]


def _after(ctx: Context) -> float:
    """Mean step time without blocking syncs and exposed communication (see the module docstring)."""
    host = ctx.ms(blocked_share(ctx))
    if not ctx.gpu:
        return ctx.wall - host
    comm = ctx.ms(exposed_comm_share(ctx))
    return max(ctx.busy - comm, ctx.wall - host - comm)


def _waiting_summary(ctx: Context, host: float, comm: float, share: float, *, floor: float, host_first: bool) -> str:
    """'Waiting: the GPU idles 30% of the step while the host is blocked (...); without it ...'."""
    parts = []
    if host >= floor and _owner_cause(ctx) is not None:
        parts.append(
            f"the GPU idles {host:.0%} of the step while the host is blocked (in syncs, blocking copies, "
            "collectives or allocator calls, or just after one drained the GPU's queue)"
        )
    elif host >= floor:
        parts.append(f"the host is blocked in syncs or collectives {host:.0%} of the step")
    if comm >= floor:
        parts.append(f"communication runs with nothing to overlap it {comm:.0%} of the GPU timeline")
    tail = f"; without it the step would be {share:.0%} shorter" if ctx.gpu else ""
    site = blocking_site(ctx) if host_first else None
    if site:
        tail += f"; most of it: {site}"
    return "Waiting: " + "; ".join(parts) + tail + "."


class Sync(Rule):
    bottleneck = "sync"
    headline = "SYNC: the host waits on the device or on other ranks"
    cpu_headline = "SYNC: the process waits in blocking calls or on other ranks"
    fix_runs_on = FixRunsOn.HOST_ON_CPU_RUNS
    high = T.SYNC_HIGH
    defining: ClassVar[dict[str, tuple[str, ...]]] = {
        "host_sync": ("sync_share", "gpu_idle_share"),
        "allocator_churn": ("sync_share",),
        "collective_wait": ("collective_wait_share",),
        "exposed_communication": ("exposed_communication_share",),
        "straggler": ("straggler_slow_step_fraction", "straggler_excess_ms"),
    }

    def detect(self, ctx: Context, *, relaxed: bool) -> Detection | None:
        straggler = _straggler(ctx)
        if straggler is not None:
            return straggler
        m = ctx.m
        floor = T.RELAXED if relaxed else T.SYNC_MODERATE.value
        host = blocked_share(ctx)
        comm = exposed_comm_share(ctx) if ctx.gpu else 0.0
        share = (ctx.wall - _after(ctx)) / ctx.wall if ctx.wall else 0.0
        if max(host, comm) < floor or share < floor:
            return None
        host_first = host >= comm
        if collective_wait(ctx) and host_first:
            return Detection(
                cause="collective_wait",
                share=clamp(share),
                consistency=m.consistency(S.SYNC_MS + RAW, T.SYNC_MODERATE.value),
                evidence_steps=m.steps,
                summary=f"Waiting: the ranks wait for the {'' if ctx.forward_only else 'gradient '}all-reduce "
                f"{host:.0%} of the step (no rank is "
                "a straggler: the collective itself takes the time).",
            )
        cause = (_owner_cause(ctx) or "host_sync") if host_first else "exposed_communication"
        if cause == "collective_wait":
            cause = "host_sync"  # a GPU trace's collective wait is named by the op; its advice is the sync one's
        km = m.kernels
        return Detection(
            cause=cause,
            share=clamp(share),
            consistency=(
                ctx.consistency(tuple(SYNC_OWNERS), T.SYNC_MODERATE.value, S.SYNC_MS + RAW) if host_first else 1.0
            ),
            evidence_steps=m.steps if host_first or km is None else km.steps,
            summary=_waiting_summary(ctx, host, comm, share, floor=floor, host_first=host_first),
        )

    def evidence(self, ctx: Context, d: Detection) -> tuple[Evidence, ...]:
        m = ctx.m
        if d.cause == "straggler":
            return _straggler_evidence(ctx)
        host = blocked_share(ctx)
        comm = exposed_comm_share(ctx)
        ev = []
        if d.cause == "collective_wait":
            threshold = T.SYNC_HIGH if host >= T.SYNC_HIGH.value else T.SYNC_MODERATE
            return (
                Evidence(
                    "collective_wait_share",
                    host,
                    threshold.value,
                    ">=",
                    "fraction of step time",
                    f"{threshold.source}; on a CPU run the recorder times only the wait from a rank's last "
                    "gradient until backward returns (no .item()/.cpu() hooks without CUDA): the all-reduce",
                ),
            )
        if d.cause in ("host_sync", "allocator_churn") or host >= T.SYNC_MODERATE.value:
            threshold = T.SYNC_HIGH if host >= T.SYNC_HIGH.value else T.SYNC_MODERATE
            unit = "fraction of step time" + (" (GPU idle owned by blocking calls)" if ctx.owners else "")
            ev.append(Evidence("sync_share", host, threshold.value, ">=", unit, threshold.source))
            if ctx.gpu:
                ev.append(
                    Evidence(
                        "gpu_idle_share",
                        1.0 - (m.gpu_util or 0.0),
                        T.SYNC_MODERATE.value,
                        ">=",
                        "fraction of step time",
                        "a sync costs step time only when the GPU then waits "
                        "for the host (a GPU busy the whole step hides it)",
                    )
                )
        if m.kernels is not None and (d.cause == "exposed_communication" or comm >= T.SYNC_MODERATE.value):
            ev.append(
                Evidence(
                    "exposed_communication_share",
                    comm,
                    T.SYNC_MODERATE.value,
                    ">=",
                    "fraction of the GPU timeline",
                    "GPU time when only communication kernels run (nothing to overlap them with)",
                )
            )
            ev += self._bandwidth(ctx)
        return tuple(ev)

    def _bandwidth(self, ctx: Context) -> list[Evidence]:
        """Achieved gradient all-reduce bus bandwidth against the one `gpuanalyze bench` measured here."""
        km = ctx.m.kernels
        run = ctx.run
        params, itemsize = run.model_params, _DTYPE_BYTES.get(str(run.param_dtype))
        if km is None or run.world < 2 or not params or not itemsize:
            return []
        comm_ms = km.totals_ms["communication_ms"] / max(km.steps, 1)
        if comm_ms <= 0:
            return []
        _, busbw = allreduce_bandwidths(params * itemsize, comm_ms / 1e3, run.world)
        c = ctx.ceilings
        if c is None or not c.busbw_gbps:
            return []
        return [
            Evidence(
                "allreduce_busbw_gbps",
                busbw,
                c.busbw_gbps,
                "<",
                "GB/s",
                f"achieved {busbw / c.busbw_gbps:.0%} of the bus bandwidth measured by {c.source('allreduce')}; "
                "gradient bytes x 2(n-1)/n over communication kernel "
                "time (nccl-tests busbw)",
            )
        ]

    def project(self, ctx: Context, d: Detection) -> Projection | None:
        m = ctx.m
        wall = ctx.wall
        if d.cause == "straggler":
            assert m.distributed is not None
            late = m.distributed.stragglers
            excess = max(x.excess_ms for x in late)
            wait = _victims_wait(m.distributed) or excess
            saved = min(wait, excess)
            return bounded(
                ctx,
                wall - saved,
                "the other ranks' pace",
                {},
                (
                    f"step {wall:.2f} ms minus the waiting ranks' wait {wait:.2f} ms, at most the late ranks' "
                    f"excess {excess:.2f} ms (every rank then waits only for the others' normal pace)"
                ),
            )
        host = ctx.ms(blocked_share(ctx))
        comm = ctx.ms(exposed_comm_share(ctx)) if ctx.gpu else 0.0
        rule = f"the host's path without waiting: step {wall:.2f} ms minus blocked {host:.2f} ms"
        if comm > 0:
            rule += f" minus exposed communication {comm:.2f} ms (if fully overlapped with backward)"
        limits = {}
        if ctx.gpu:
            limits["the GPU's own work (busy minus overlapped communication)"] = ctx.busy - comm
            rule += "; the host then runs ahead of the GPU, so the step is the longer of the two"
        return bounded(ctx, wall - host - comm, "the host's path", limits, rule)

    def advise(self, ctx: Context, d: Detection, p: Projection) -> tuple[str, ...]:
        if d.cause == "straggler":
            d_ = ctx.m.distributed
            assert d_ is not None
            s = d_.stragglers[0]
            device = _device_check(ctx)
            return (
                _STRAGGLER_FIXES.get(s.phase, _STRAGGLER_OTHER).format(r=s.rank, device=device),
                "Balance work across ranks (bucket samples by length, equal shards) and move rank-0-only work "
                "out of the step.",
            )
        if d.cause == "collective_wait":
            return (
                "Fewer all-reduces per sample: a larger batch per rank, or gradient accumulation with "
                "model.no_sync() on all but the last micro-batch.",
                "Tune DDP's buckets (bucket_cap_mb, gradient_as_bucket_view=True) and compress gradients "
                "(register_comm_hook with fp16_compress_hook) to cut the bytes each all-reduce moves.",
                "Ranks sharing one host's cores compete with their own collectives: fewer processes with more "
                "threads each (torch.set_num_threads) can be faster than one rank per core.",
            )
        recs = []
        if d.cause == "allocator_churn":
            recs.append(
                "cudaMalloc/cudaFree run during the steps (cudaFree synchronises the device): keep the caching "
                "allocator's memory (no torch.cuda.empty_cache() in the loop), keep shapes steady (pad or bucket "
                "variable lengths), and try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
            )
        if exposed_comm_share(ctx) >= T.SYNC_MODERATE.value:
            recs.append(
                "Communication is exposed: let DDP/FSDP overlap it with backward (smaller buckets, "
                "gradient_as_bucket_view=True, FSDP backward_prefetch), and use no_sync() during gradient "
                "accumulation."
            )
        if blocked_share(ctx) >= T.RELAXED and d.cause != "allocator_churn":
            recs += blocking_site_advice(ctx)
            recs += [
                "Remove per-step .item(), .cpu(), .tolist() and print(loss): accumulate metrics on the device and "
                "read them every N steps.",
                "Drop explicit torch.cuda.synchronize() calls from the loop (time with CUDA events instead).",
            ]
            if ctx.run.world > 1:
                recs.append(
                    "In DDP the all-reduce wait shows up here too: check for uneven work across ranks and "
                    "tune bucket_cap_mb."
                )
        return tuple(recs)


def _diffs(diffs: tuple[tuple[str, float], ...]) -> str:
    """Per-phase differences from the other ranks, in words: ' (forward +12.0, backward +0.4 ms per step ...)'."""
    if not diffs:
        return ""
    shown = ", ".join(f"{name} {ms:+.1f}" for name, ms in diffs)
    return f" ({shown} ms per step against the other ranks' medians)"


def _device_check(ctx: Context) -> str:
    """What to check on the slow rank's device: its CPU on a CPU run; its GPU only with the system sampler's
    clock, temperature or power readings as evidence; otherwise what to record."""
    if not ctx.gpu:
        return _DEVICE_CPU
    h = ctx.host
    read = [
        f"{label} {value:.0f} {unit}"
        for label, value, unit in (
            ("SM clock", h.gpu_sm_clock_mhz, "MHz"),
            ("temperature up to", h.gpu_temp_c, "C"),
            ("power", h.gpu_power_w, "W"),
        )
        if value is not None
    ]
    if not read:
        return _DEVICE_UNSAMPLED
    return (
        "check that node's GPU against the others (the system sampler read " + ", ".join(read) + "; a low clock "
        "under load or a high temperature is throttling, a different clock a different GPU model)"
    )


def collective_wait(ctx: Context) -> bool:
    """A multi-rank run with no GPU timings: the recorder's sync time is then only the gradient
    all-reduce wait (the .item()/.cpu()/synchronize hooks are installed with CUDA only), so a long
    sync is the collective, not the host blocking on the device."""
    return not ctx.gpu and ctx.run.world > 1 and ctx.run.source is None


def _victims_wait(d: RankAnalysis) -> float:
    """Median over the waiting ranks of what each waits per step for the last arrival (0 without any)."""
    waits = sorted(r.waits_ms for r in d.victims)
    if not waits:
        return 0.0
    k = len(waits)
    return waits[k // 2] if k % 2 else 0.5 * (waits[k // 2 - 1] + waits[k // 2])


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _where(phase: str) -> str:
    return (
        "before the step (a late start: the previous step's tail or host work between steps)"
        if phase == "start"
        else f"in {phase}"
    )


def _straggler_evidence(ctx: Context) -> tuple[Evidence, ...]:
    """The straggler's slow steps, its excess and its phase, and the others' wait for it."""
    m = ctx.m
    assert m.distributed is not None
    s = m.distributed.stragglers[0]
    waiting = [r.sync_share for r in m.distributed.per_rank if r.rank != s.rank]
    victims = m.distributed.victims
    wait = _victims_wait(m.distributed)
    return (
        Evidence(
            "straggler_slow_step_fraction",
            s.steps_slow / s.steps,
            T.STRAGGLER_FRACTION,
            ">=",
            "fraction of steps",
            f"rank {s.rank} has the most work and exceeds the step's baseline by > "
            f"{T.SLOW_STEP_MIN_MS} ms and > {T.SLOW_STEP_FRACTION:.0%} of the median step",
        ),
        Evidence(
            "straggler_excess_ms",
            s.excess_ms,
            T.SLOW_STEP_MIN_MS,
            ">=",
            "ms per slow step",
            "median over its slow steps",
        ),
        Evidence(
            f"straggler_{s.phase}_excess_ms",
            s.phase_excess_ms,
            T.STRAGGLER_PHASE_SHARE * s.excess_ms,
            ">=",
            "ms per step",
            "the phase that holds most of its excess (at least half of it)",
        ),
        Evidence(
            "other_ranks_sync_share",
            max(waiting) if waiting else 0.0,
            T.SYNC_MODERATE.value,
            ">=",
            "fraction of step time",
            "time the other ranks wait in collectives for it",
        ),
        Evidence(
            "victims_wait_ms",
            wait,
            T.SLOW_STEP_MIN_MS,
            ">=",
            "ms per step",
            f"median over the {len(victims)} waiting ranks of the last arrival at the collective minus "
            "their own (mean per step)",
        ),
    )


def _straggler(ctx: Context) -> Detection | None:
    """The ranks that arrive last at the collective, named whatever their own sync share (they are
    what the others wait for; their own wait is the collective alone)."""
    d = ctx.m.distributed
    if d is None or not d.stragglers:
        return None
    s = d.stragglers[0]
    late = [x.rank for x in d.stragglers]
    victims = d.victims
    who = f"Rank {s.rank} is" if len(late) == 1 else f"Ranks {_ranks(late)} are"
    others = (
        f"ranks {_ranks([v.rank for v in victims])} wait for {'it' if len(late) == 1 else 'them'} "
        f"{_victims_wait(d):.1f} ms per step (their own sync: a median {victims[0].sync_median_ms:.1f} ms)"
        if victims
        else "the other ranks wait for it"
    )
    return Detection(
        cause="straggler",
        share=clamp(s.excess_ms / d.step_median_ms) if d.step_median_ms else 0.0,
        consistency=s.steps_slow / s.steps if s.steps else 0.0,
        evidence_steps=s.steps,
        summary=f"{who} late at the collective: rank {s.rank} arrives last on {s.steps_slow} of {s.steps} steps by "
        f"a median {s.excess_ms:.1f} ms, losing it {_where(s.phase)}{_diffs(s.phase_diffs)}; {others} in "
        + ("gradient all-reduce." if ctx.gpu else "collectives."),
    )
