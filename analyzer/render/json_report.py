"""The stable JSON shape of a report (keys documented in docs/json.md)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

import msgspec

from analyzer.analysis.findings import Evidence, Finding
from analyzer.analysis.kernel_metrics import MAX_STEP_OWNERS, gpu_breakdown
from analyzer.analysis.memory_fit import Memory
from analyzer.analysis.owners import OWNER_WORDS, ownership
from analyzer.analysis.rerun import rerun_command
from analyzer.planning.outcome import Report
from analyzer.planning.settling_trial import trial_of, wide
from analyzer.render.words import run_state
from gpuanalyze.ingest import schema as S


def _num(x: float | None, digits: int = 4) -> float | None:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return round(float(x), digits)


def report_dict(report: Report) -> dict[str, Any]:
    m = report.metrics
    return {
        "trace": report.path,
        "bottleneck": report.bottleneck,
        "confidence": report.confidence.value,
        "confidence_level": report.confidence.level,
        "confidence_reason": report.confidence.reason,
        "stability": None if report.stability is None else report.stability.value,
        "stability_resamples": None if report.stability is None else report.stability.resamples,
        "stability_reason": None if report.stability is None else report.stability.reason,
        "steady_state": _steady(report),
        "steps": m.steps,
        "warmup_steps_skipped": m.warmup_steps,
        "step_accounting": asdict(m.accounting),
        "ranks": m.ranks,
        "complete": report.complete,
        "end_status": run_state(report)[0],
        "step_time_ms": {"median": _num(m.step_median_ms), "p90": _num(m.step_p90_ms)},
        "breakdown_ms": {part.removesuffix("_ms"): _num(v) for part, v in m.breakdown_ms.items()},
        "share": {part.removesuffix("_ms"): _num(v) for part, v in m.share.items()},
        "gpu_utilization": _num(m.gpu_util),
        "throughput_samples_per_s": _num(m.samples_per_s, 2),
        "peak_mem_bytes": m.peak_mem_bytes,
        "memory": _memory(m.memory),
        "gpu": _gpu(report),
        "stragglers": [
            {
                "rank": s.rank,
                "steps_slow": s.steps_slow,
                "steps": s.steps,
                "excess_ms": _num(s.excess_ms, 3),
                "phase": s.phase,
                "phase_excess_ms": _num(s.phase_excess_ms, 3),
                "phase_diffs": {name: _num(ms, 3) for name, ms in s.phase_diffs},
                "start_late_ms": _num(s.start_late_ms, 3),
            }
            for s in (m.distributed.stragglers if m.distributed else ())
        ],
        "per_rank": [
            {
                "rank": r.rank,
                "steps": r.steps,
                "step_median_ms": _num(r.step_median_ms, 3),
                "work_median_ms": _num(r.work_median_ms, 3),
                "sync_share": _num(r.sync_share),
                "data_share": _num(r.data_share),
                "sync_median_ms": _num(r.sync_median_ms, 3),
                "waits_ms": _num(r.waits_ms, 3),
            }
            for r in (m.distributed.per_rank if m.distributed else ())
        ],
        "victims": [
            {"rank": r.rank, "waits_ms": _num(r.waits_ms, 3), "sync_median_ms": _num(r.sync_median_ms, 3)}
            for r in (m.distributed.victims if m.distributed else ())
        ],
        "kernels": _kernels(report),
        "idle_owners": _idle_owners(report),
        "findings": [_finding(f, report.metrics.batch_samples, rerun_command(report.run)) for f in report.findings],
        "health": [_evidence(e) for e in report.health],
        "step_time_mean_ms": _num(m.step_mean_ms),
        "step_time_basis": "step_time_mean_ms",
        "cost": _cost(report),
        "mfu": None
        if report.mfu is None
        else {k: (_num(v, 4) if isinstance(v, float) else v) for k, v in asdict(report.mfu).items()},
        "notes": list(report.notes),
        "run": msgspec.to_builtins(report.run),
        "end": None if report.end is None else msgspec.to_builtins(report.end),
        "ceilings": report.ceilings,
        "system": _system(report),
    }


def _system(report: Report) -> dict[str, Any] | None:
    """The host the run had (docs/json.md, ``system``): cores, load, memory; GPU telemetry when sampled."""
    if report.host is None:
        return None
    facts = {name: _num(v, 4) if isinstance(v, float) else v for name, v in asdict(report.host).items()}
    out = {name: v for name, v in facts.items() if not name.startswith("gpu_")}
    out["cpu_quota_cores"] = report.run.cpu_quota_cores
    out["host_cpus"] = report.run.host_cpus
    gpu = {name: v for name, v in facts.items() if name.startswith("gpu_")}
    if any(v is not None for v in gpu.values()):
        out.update(gpu)
    return out


def _memory(mem: Memory | None) -> dict[str, Any] | None:
    """docs/json.md, ``memory``."""
    if mem is None:
        return None
    c, most = mem.creep, mem.largest()
    out: dict[str, Any] = {"peak_bytes": mem.peak, "persistent_bytes": mem.persistent, "step_bytes": mem.transient}
    out.update(reserved_bytes=mem.reserved, total_bytes=mem.total, resident=mem.host)
    out.update(reserve_ratio=_num(mem.reserve_ratio), largest_batch_multiplier=most)
    out["batch_x2_fits"] = None if most is None else most >= 2
    out["creep"] = None if c is None else {"rank": c.rank, "bytes_per_step": _num(c.per_step, 1), "steps": c.steps}
    if c is not None:
        out["creep"].update(full_at_step=c.full_at, evidence=[_evidence(e) for e in c.evidence])
    return out


def _evidence(e: Evidence) -> dict[str, Any]:
    return {**asdict(e), "value": _num(e.value), "passed": e.passed, "supports": e.supports}


def _finding(f: Finding, batch_samples: float | None, command: str) -> dict[str, Any]:
    p = f.projection
    return {
        "bottleneck": f.bottleneck,
        "cause": f.cause,
        "severity": f.severity,
        "share": _num(f.share),
        "consistency": _num(f.consistency),
        "confidence": f.confidence.value,
        "confidence_level": f.confidence.level,
        "confidence_reason": f.confidence.reason,
        "summary": f.summary,
        "evidence": [_evidence(e) for e in f.evidence],
        "recommendations": list(f.recommendations),
        "projected_step_time_ms": _num(p.step_ms, 3),
        "projected_step_time_ms_low": _num(p.low_ms, 3),
        "projected_step_time_ms_high": _num(p.high_ms, 3),
        "projection_range_width": _num(p.range_width, 4),
        "projection_range_wide": wide(f),
        "settling_trial": trial_of(f, batch_samples, command),
        "current_step_time_ms": _num(p.current_ms, 3),
        "saved_ms_per_step": _num(p.saved_ms, 3),
        "projection_rule": p.rule,
        "projection_bound": p.bound,
        "projection_params": dict(p.params) or None,
        "projection_per_batch_of": _num(p.per_batch_of, 1),
        "savings": None
        if f.savings is None
        else {
            "hours_per_run": _num(f.savings.hours_per_run, 3),
            "gpu_hours_per_run": _num(f.savings.gpu_hours_per_run, 3),
            "usd_per_run": _num(f.savings.usd_per_run, 2),
        },
    }


def _steady(report: Report) -> dict[str, Any] | None:
    st = report.steady
    if st is None:
        return None
    return {
        "median_ms": _num(st.median_ms, 3),
        "settling_steps": list(st.settling),
        "outlier_steps": list(st.outliers),
        "spike_period": st.period,
        "spike_excess_ms": _num(st.spike_ms, 3),
        "spike_share": _num(st.spike_share),
        "drift": _num(st.drift),
        "spread": _num(st.spread),
    }


def _gpu(report: Report) -> dict[str, float | None] | None:
    g = gpu_breakdown(report.run, report.metrics.kernels)
    return None if g is None else {k: _num(v, 2) for k, v in msgspec.structs.asdict(g).items()}


def _kernels(report: Report) -> dict[str, Any] | None:
    km = report.metrics.kernels
    if km is None:
        return None
    return {
        "steps_with_kernel_stats": km.steps,
        "kernel_count": km.kernel_count,
        "kernel_median_us": _num(km.kernel_median_us, 2),
        "time_ms": {k.removesuffix("_ms"): _num(v, 3) for k, v in km.totals_ms.items()},
        "top_kernels": [{"name": n, "total_ms": _num(t, 3), "count": c} for n, t, c in km.top_kernels],
        "blocking_ops": [
            {
                "op": b.op,
                "caller": b.caller,
                "call": b.call,
                "total_ms": _num(b.total_ms, 3),
                "count": b.count,
                "gpu_idle_ms": _num(b.idle_ms, 3),
            }
            for b in km.blocking_ops
        ],
    }


def _idle_owners(report: Report) -> dict[str, Any] | None:
    """Who owned the GPU's idle time over the analysed steps, in precedence order (docs/idle-owners.md)."""
    km = report.metrics.kernels
    owners = ownership(km)
    if owners is None or km is None:
        return None
    return {
        "steps": owners.steps,
        "idle_ms_per_step": _num(owners.idle_ms / owners.steps if owners.steps else 0.0, 4),
        "owners": [
            {
                "owner": o,
                "ms_per_step": _num(owners.per_step(o), 4),
                "share_of_step": _num(owners.share(o)),
                "share_of_idle": _num(owners.ms[o] / owners.idle_ms if owners.idle_ms > 0 else 0.0),
                "what": OWNER_WORDS[o],
                "frames": [{"frame": f, "ms_per_step": _num(t / km.steps, 4)} for w, f, t in km.owner_frames if w == o],
            }
            for o in S.IDLE_OWNERS
        ],
        "per_step": [
            {
                "step": s.step,
                "rank": s.rank,
                "wall_ms": _num(s.wall_ms, 4),
                "idle_ms": _num(s.idle_ms, 4),
                "owners_ms": {o: _num(ms, 4) for o, ms in zip(S.IDLE_OWNERS, s.ms, strict=True) if ms > 0},
            }
            for s in km.step_owners
        ],
        "per_step_limit": MAX_STEP_OWNERS,
    }


def _cost(report: Report) -> dict[str, Any] | None:
    c = report.cost
    if c is None:
        return None
    return {
        "per_run_usd": _num(c.per_run_usd, 2),
        "gpu_hours": _num(c.gpu_hours, 3),
        "hours_per_run": _num(c.hours_per_run, 3),
        "gpu_usd": _num(c.gpu_usd, 2),
        "other_usd": _num(c.other_usd, 2),
        "steps_per_run": _num(c.steps_per_run, 1),
        "gpus": c.gpus,
        "step_time_s": _num(c.step_time_s, 6),
        "inputs": asdict(c.inputs),
    }


def dumps(data: Any) -> str:
    """Strict JSON (non-finite numbers as null: JSON has no NaN or Infinity), indented."""
    return json.dumps(_finite(data), indent=2, default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def render_json(report: Report) -> str:
    return dumps(report_dict(report))
