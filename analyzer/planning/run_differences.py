"""How two analysed runs differ in what defines a job: model, its parameters, the script, world size
and ranks measured, batch size, device, GPU and run id.

`gpuanalyze compare` reads two traces as one job's before and after; two unrelated jobs must not be
ranked that way. ``run_differences`` lists what differs (for a note under the comparison);
``different_jobs`` says when the differences mean another job (another model or world size), in
which case no projection is checked against the other run and the regression gate refuses the pair
(``gate_refusal``: a verdict across two jobs, or across a lost rank, would be a wrong answer).
"""

from __future__ import annotations

from analyzer.planning.outcome import Report

#: What, differing, makes two traces two jobs rather than one job's before and after.
JOB_DEFINING = ("model", "parameters", "script", "world size", "ranks")


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
