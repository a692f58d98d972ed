"""How two analysed runs differ in what defines a job: model, its parameters, the script, world size
and ranks measured, batch size, device, GPU and run id.

`gpuanalyze compare` reads two traces as one job's before and after; two unrelated jobs must not be
ranked that way. ``run_differences`` lists what differs (for a note under the comparison);
``different_jobs`` says when the differences mean another job (another model or world size), in
which case no projection is checked against the other run and the regression gate refuses the pair
(``gate_refusal``: a verdict across two jobs, or across a lost rank, would be a wrong answer).
``changes`` says what AFTER changed that the facts alone do not: matmuls moved to 16-bit (autocast leaves
the parameters float32: the kernels say it) and host work removed.
"""

from __future__ import annotations

from analyzer.analysis import thresholds as T
from analyzer.analysis.owners import OWNER_WORDS, ownership
from analyzer.planning.mfu import tensor_core_share
from analyzer.planning.outcome import Report
from gpuanalyze.ingest.trace import schema as S

#: What, differing, makes two traces two jobs rather than one job's before and after.
JOB_DEFINING = ("model", "parameters", "script", "world size", "ranks")
#: A per-step cost counts as removed when AFTER has at most this fraction of BEFORE's.
FELL = 0.5


def _models(report: Report) -> str | None:
    models = report.run.models
    return ", ".join(models) if models else None


def _batch(report: Report) -> str | None:
    batch = report.metrics.batch_samples
    return None if batch is None else f"{batch:,.0f} samples"


def _script(argv: str | None) -> str | None:
    """The program the run executed: the first ``*.py`` of its command line, or the module after ``-m``."""
    words = (argv or "").split()
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words):
            return words[i + 1]
        if word.endswith(".py"):
            return word.rsplit("/", 1)[-1]
    return None


def facts(report: Report) -> dict[str, str | None]:
    """The job-defining facts of one run (None where the trace does not say)."""
    run = report.run
    return {
        "model": _models(report),
        "parameters": None if run.model_params is None else f"{run.model_params:,}",
        "script": _script(run.argv),
        "batch": _batch(report),
        "world size": None if run.world_size is None else str(run.world_size),
        "ranks": str(report.metrics.ranks) if report.metrics.ranks else None,
        "device": run.device,
        "GPU": run.gpu_name,
        "run id": run.run_id,
    }


def run_differences(a: Report, b: Report) -> list[str]:
    """'model: resnet50 vs gpt2', ... for every fact both runs record and record differently."""
    fa, fb = facts(a), facts(b)
    return [
        f"{key}: {fa[key]} vs {fb[key]}"
        for key in fa
        if fa[key] is not None and fb[key] is not None and fa[key] != fb[key]
    ]


def different_jobs(differences: list[str]) -> bool:
    """The differences mean two jobs, not one job before and after a fix."""
    return any(d.startswith(f"{key}:") for d in differences for key in JOB_DEFINING)


def gate_refusal(differences: list[str]) -> str | None:
    """Why the regression gate must not judge the pair (one line), or None when it may."""
    defining = [d for d in differences if any(d.startswith(f"{key}:") for key in JOB_DEFINING)]
    if not defining:
        return None
    return (
        f"the gate compares one job before and after a change, and these runs differ ({'; '.join(defining)}): "
        "no verdict (record both runs of the same job, on the same number of ranks)"
    )


def fell(before: float | None, after: float | None, floor: float) -> bool:
    """A per-step cost of at least ``floor`` that AFTER cut by half or more."""
    return before is not None and after is not None and before >= floor and after <= FELL * before


def precision_change(a: Report, b: Report) -> str | None:
    """'precision: ...' when AFTER's matmuls moved to 16-bit: most GEMM/convolution kernel time on tensor cores
    (as machine.datasheet.compute_precision reads it; autocast keeps float32 parameters), the autocast the recorder
    saw its forwards run under (EndInfo.autocast: a CPU trace records no dtypes), or 16-bit parameters."""
    c0, c1 = (r.end.autocast if r.end is not None else None for r in (a, b))
    if c1 is not None and c1 != c0:
        return f"precision: autocast {c0 or 'off'} -> {c1}"
    tc0, tc1 = tensor_core_share(a.metrics.kernels), tensor_core_share(b.metrics.kernels)
    d0, d1 = a.run.param_dtype, b.run.param_dtype
    if tc0 is not None and tc1 is not None and tc0 < 0.5 <= tc1:
        kept = "; parameters still float32: autocast" if d1 == "float32" else ""
        return f"precision: GEMM/convolution time on tensor cores {tc0:.0%} -> {tc1:.0%}{kept}"
    if d0 in ("float32", "float64") and d1 in ("bfloat16", "float16"):
        return f"precision: parameters {d0} -> {d1}"
    return None


def changes(a: Report, b: Report) -> list[str]:
    """What AFTER changed that the facts alone do not say: 16-bit matmuls, and host work removed (the unattributed
    host phase of traces with phases, or GPU idle owned by host work, cut by half or more)."""
    out = [p] if (p := precision_change(a, b)) is not None else []
    o0, o1 = (r.metrics.mean_ms.get(S.OTHER_MS) for r in (a, b))
    phased = all(1.0 - (r.metrics.share.get(S.OTHER_MS) or 0.0) >= T.HOST_RECOGNISED for r in (a, b))
    if phased and fell(o0, o1, max(T.HOST_MIN_MS, T.MIN_SAVING * a.metrics.step_mean_ms)):
        out.append(f"host work removed: unattributed host time {o0:.2f} -> {o1:.2f} ms per step")
    owners = ownership(a.metrics.kernels), ownership(b.metrics.kernels)
    for owner in ("cpu_ops", "host_idle"):  # GPU idle owned by host work (CPU ops, host time with nothing recorded)
        i0, i1 = (None if o is None else o.per_step(owner) for o in owners)
        if fell(i0, i1, T.MIN_SAVING * a.metrics.step_mean_ms):
            out.append(f"host work removed: GPU idle owned by {OWNER_WORDS[owner]} {i0:.2f} -> {i1:.2f} ms per step")
    return out
