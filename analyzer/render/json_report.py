"""The report's JSON: the declared structs of output/trace_report.py filled from the analysis (docs/json.md)."""

from __future__ import annotations

from typing import Any

import msgspec

from analyzer.analysis.findings import Evidence, Finding
from analyzer.analysis.kernel_metrics import MAX_STEP_OWNERS, gpu_breakdown
from analyzer.analysis.memory_fit import Memory
from analyzer.analysis.owners import OWNER_WORDS, ownership
from analyzer.analysis.rerun import rerun_command
from analyzer.planning.outcome import Report
from analyzer.planning.settling_trial import trial_of, wide
from analyzer.render.output import built, dumps
from analyzer.render.output import trace_report as J
from analyzer.render.words import run_state
from gpuanalyze.ingest.trace import schema as S


def report_struct(report: Report) -> J.Report:
    m, c, st, dist = report.metrics, report.confidence, report.stability, report.metrics.distributed
    return J.Report(
        trace=report.path,
        bottleneck=report.bottleneck,
        confidence=c.value,
        confidence_level=c.level,
        confidence_reason=c.reason,
        stability=None if st is None else st.value,
        stability_resamples=None if st is None else st.resamples,
        stability_reason=None if st is None else st.reason,
        steady_state=_steady(report),
        steps=m.steps,
        warmup_steps_skipped=m.warmup_steps,
        step_accounting=built(J.StepAccounting, m.accounting),
        ranks=m.ranks,
        complete=report.complete,
        end_status=run_state(report)[0],
        step_time_mean_ms=m.step_mean_ms,
        step_time_median_ms=m.step_median_ms,
        step_time_p90_ms=m.step_p90_ms,
        breakdown_ms={part.removesuffix("_ms"): v for part, v in m.breakdown_ms.items()},
        share={part.removesuffix("_ms"): v for part, v in m.share.items()},
        gpu_utilization=m.gpu_util,
        throughput_samples_per_s=m.samples_per_s,
        peak_mem_bytes=m.peak_mem_bytes,
        memory=None if m.memory is None else _memory(m.memory),
        gpu=gpu_breakdown(report.run, m.kernels),
        stragglers=[built(J.Straggler, s, phase_diffs=dict(s.phase_diffs)) for s in dist.stragglers] if dist else [],
        per_rank=[built(J.RankSummary, r) for r in dist.per_rank] if dist else [],
        victims=[built(J.Victim, r) for r in dist.victims] if dist else [],
        kernels=_kernels(report),
        idle_owners=_idle_owners(report),
        findings=[_finding(f, m.batch_samples, rerun_command(report.run)) for f in report.findings],
        health=[built(J.Evidence, e) for e in report.health],
        cost=None if report.cost is None else built(J.Cost, report.cost),
        mfu=None if report.mfu is None else built(J.Mfu, report.mfu),
        notes=list(report.notes),
        run=report.run,
        end=report.end,
        ceilings=report.ceilings,
        system=_system(report),
    )


def report_dict(report: Report) -> dict[str, Any]:
    """The report's JSON as Python values (what the MCP tools and tests read)."""
    out: dict[str, Any] = msgspec.to_builtins(report_struct(report))
    return out


def render_json(report: Report) -> str:
    return dumps(report_struct(report))


def _system(report: Report) -> J.System | None:
    """The host the run had: cores, load, memory; GPU telemetry only when sampled (omitted otherwise)."""
    if report.host is None:
        return None
    return built(J.System, report.host, cpu_quota_cores=report.run.cpu_quota_cores, host_cpus=report.run.host_cpus)


def _memory(mem: Memory) -> J.Memory:
    c, most = mem.creep, mem.largest()
    creep = None
    if c is not None:
        creep = built(J.Creep, c, bytes_per_step=c.per_step, full_at_step=c.full_at)
    return built(
        J.Memory,
        mem,
        peak_bytes=mem.peak,
        persistent_bytes=mem.persistent,
        step_bytes=mem.transient,
        reserved_bytes=mem.reserved,
        total_bytes=mem.total,
        resident=mem.host,
        largest_batch_multiplier=most,
        batch_x2_fits=None if most is None else most >= 2,
        creep=creep,
    )


def _finding(f: Finding, batch_samples: float | None, command: str) -> J.Finding:
    p = f.projection
    return built(
        J.Finding,
        f,
        confidence=f.confidence.value,
        confidence_level=f.confidence.level,
        confidence_reason=f.confidence.reason,
        evidence=[built(J.Evidence, e) for e in f.evidence],
        projected_step_time_ms=p.step_ms,
        projected_step_time_ms_low=p.low_ms,
        projected_step_time_ms_high=p.high_ms,
        projection_range_width=p.range_width,
        projection_range_wide=wide(f),
        settling_trial=trial_of(f, batch_samples, command),
        current_step_time_ms=p.current_ms,
        saved_ms_per_step=p.saved_ms,
        projection_rule=p.rule,
        projection_bound=p.bound,
        projection_params=dict(p.params) or None,
        projection_per_batch_of=p.per_batch_of,
    )


def _steady(report: Report) -> J.SteadyState | None:
    st = report.steady
    if st is None:
        return None
    return built(
        J.SteadyState,
        st,
        settling_steps=st.settling,
        outlier_steps=st.outliers,
        spike_period=st.period,
        spike_excess_ms=st.spike_ms,
    )


def _kernels(report: Report) -> J.Kernels | None:
    km = report.metrics.kernels
    if km is None:
        return None
    return built(
        J.Kernels,
        km,
        steps_with_kernel_stats=km.steps,
        time_ms={k.removesuffix("_ms"): v for k, v in km.totals_ms.items()},
        top_kernels=[J.TopKernel(name=n, total_ms=t, count=c) for n, t, c in km.top_kernels],
        blocking_ops=[built(J.BlockingOp, b, gpu_idle_ms=b.idle_ms) for b in km.blocking_ops],
    )


def _idle_owners(report: Report) -> J.IdleOwners | None:
    """Who owned the GPU's idle time over the analysed steps, in precedence order (docs/idle-owners.md)."""
    km = report.metrics.kernels
    owners = ownership(km)
    if owners is None or km is None:
        return None
    return J.IdleOwners(
        steps=owners.steps,
        idle_ms_per_step=owners.idle_ms / owners.steps if owners.steps else 0.0,
        owners=[
            J.Owner(
                owner=o,
                ms_per_step=owners.per_step(o),
                share_of_step=owners.share(o),
                share_of_idle=owners.ms[o] / owners.idle_ms if owners.idle_ms > 0 else 0.0,
                what=OWNER_WORDS[o],
                frames=[J.Frame(frame=f, ms_per_step=t / km.steps) for w, f, t in km.owner_frames if w == o],
            )
            for o in S.IDLE_OWNERS
        ],
        per_step=[
            built(J.StepIdle, s, owners_ms={o: ms for o, ms in zip(S.IDLE_OWNERS, s.ms, strict=True) if ms > 0})
            for s in km.step_owners
        ],
        per_step_limit=MAX_STEP_OWNERS,
    )


__all__ = ["Evidence", "dumps", "render_json", "report_dict", "report_struct"]
