"""The JSON of the other commands (`compare`, `fleet`, `run --try`, `bench`) and of the MCP tools,
declared field by field; the same quantity has the report's name (``step_time_mean_ms``)."""

from __future__ import annotations

from typing import Annotated, Literal

from analyzer.machine.ceilings_store import Fingerprint
from analyzer.render.output.trace_report import Finding, Out, doc


class RunOption(Out):
    """A run or server compared by what a completed run costs."""

    name: str
    hours_per_run: Annotated[float | None, doc("null for a trace compared without a run length")]
    gpus: int
    price_per_gpu_hour: float | None
    per_run_usd: float | None
    step_time_mean_ms: Annotated[float | None, doc("the trace's mean step (null for a TOML option)")]
    samples_per_s: float | None
    breakdown_ms: Annotated[dict[str, float | None] | None, doc("mean per step of each part")]
    bottleneck: Annotated[str | None, doc("the trace's verdict (null for a TOML option)")]
    peak_mem_bytes: int | None
    persistent_mem_bytes: Annotated[int | None, doc("memory at a step's start")]


class ProjectionCheck(Out):
    """A fix BEFORE's analysis projected, applied in AFTER: the projection against the measurement."""

    kind: str
    fix: str
    bottleneck: str
    recommended: Annotated[bool, doc("the fix BEFORE recommended (else the projection redone for the change)")]
    projected_ms: float
    measured_ms: float
    per: Annotated[str, doc("per step, or per batch of N samples")]
    rule: str
    projected_low_ms: float | None
    projected_high_ms: float | None
    error: Annotated[float, doc("measured / projected - 1")]
    inside: Annotated[bool | None, doc("the measurement is inside the range (null: no range)")]


class Spikes(Out):
    steps: int
    mean_ms: float
    share: float


class GateCheck(Out):
    """One tolerance of the regression gate (docs/cost.md)."""

    metric: Literal["step_time", "throughput"]
    tolerance_pct: float
    before: float
    after: float
    change_pct: float
    low_pct: Annotated[float, doc("low end of the change's bootstrap interval")]
    high_pct: float
    confidence: Annotated[float, doc("the interval's confidence (0.95)")]
    steps: Annotated[tuple[int, int], doc("steps of BEFORE and AFTER")]
    resampled: tuple[int, int]
    spikes: Annotated[tuple[Spikes, Spikes] | None, doc("spike steps left out of the medians, each run")]
    drift_pct: tuple[float, float]
    drift_allowance_pct: Annotated[float, doc("points the interval is widened by on each side for drift")]
    failed: bool
    verdict: Annotated[str, doc("why it passed or failed, in words")]
    notes: list[str]


class Gate(Out):
    failed: bool
    exit_code: int
    checks: list[GateCheck]


class OwnerMove(Out):
    owner: str
    before_ms_per_step: float
    after_ms_per_step: float
    delta_ms: float


class Comparison(Out):
    """`gpuanalyze compare --json`."""

    options: list[RunOption]
    cheapest: Annotated[str | None, doc("the cheapest option per completed run (null without prices and lengths)")]
    saving_usd_per_run: float | None
    projection_checks: list[ProjectionCheck]
    gate: Annotated[Gate | None, doc("with --fail-if-slower or --fail-if-throughput-drops")]
    differences: Annotated[list[str], doc("what differs between the runs, one item a line")]
    idle_owners_moved: Annotated[list[OwnerMove], doc("the GPU's idle owners that moved, largest first")]


class FleetRow(Out):
    """One analysed run of a fleet: a row of its table, CSV and Parquet file (every value a scalar)."""

    run: str
    ranks: int
    gpu: str | None
    bottleneck: str
    confidence: float
    confidence_level: str
    step_time_mean_ms: float
    steps: int
    top_fix: Annotated[str | None, doc("the top finding's cause")]
    fix_summary: str | None
    projected_step_time_ms: float | None
    saved_ms_per_step: float
    saved_gpu_ms_per_step: Annotated[float, doc("saved ms per step x the run's GPUs")]
    gpu_hours_per_run: float | None
    saved_gpu_hours_per_run: float | None
    saved_usd_per_run: float | None
    idle_gpu_hours_per_run: float | None
    complete: bool
    state: Annotated[str, doc("how the run ended, as the report's end_status")]


class FleetRun(FleetRow):
    """One run of the fleet's ranking."""

    rank: Annotated[int, doc("its place in the ranking")]


class Skipped(Out):
    run: str
    reason: str


class Fleet(Out):
    """`gpuanalyze fleet --json`."""

    root: str
    ranked_by: Literal["saved_usd_per_run", "saved_gpu_hours_per_run", "saved_gpu_ms_per_step"]
    ranking: Annotated[str, doc("the ranking in words")]
    runs: list[FleetRun]
    skipped: list[Skipped]
    notes: list[str]


class Setting(Out):
    setting: Annotated[str, doc("the setting in words")]
    dataloader: dict[str, int | bool]
    autocast: str | None
    tf32: bool
    script: dict[str, int]


class Trial(Setting):
    """One trial of `run --try`, baseline first."""

    trial: str
    source: Annotated[str, doc("baseline, or what proposed the candidate")]
    projected_ms: float | None
    projected_low_ms: float | None
    projected_high_ms: float | None
    projected_by: Annotated[str | None, doc("the finding whose projection it is")]
    measured_ms: Annotated[float | None, doc("mean step of the measured steps")]
    measured_stdev_ms: float | None
    measured_steps: int | None
    loader_workers: int | None
    end_status: str | None
    vs_baseline_pct: float | None
    measured_samples: float | None
    inside_interval: Literal["yes", "no", "n/a"]
    outcome: str
    returncode: int | None
    seconds: float
    directory: str | None
    loaders_changed: list[str]


class Trials(Out):
    """`gpuanalyze run --try --json`."""

    out_dir: str
    baseline_verdict: str | None
    baseline_problem: str | None
    trials: list[Trial]
    recommended: Setting | None
    within_noise_of_recommended: list[str]
    recommendation: str
    against_projection: list[str]
    baseline_spread_pct: float | None
    notes: list[str]
    warnings: list[str]
    files_changed: Annotated[str | None, doc("a file of the user's a trial changed: the trials stopped")]


class BenchResult(Out, forbid_unknown_fields=False):
    """One measured number; each benchmark adds its own parameters as further keys."""

    benchmark: str
    backend: str
    device: str
    variant: str
    value: Annotated[float, doc("the median rate (or time, for launch overhead) over the timed repeats")]
    unit: str
    repeats: int
    min: float
    median: float
    max: float
    dtype: str | None
    size_bytes: int | None
    world_size: int | None
    suite: str


class Bench(Out):
    """`gpuanalyze bench --json` (also what bench saves for `gpuanalyze TRACE`)."""

    backend: str
    device: str
    fingerprint: Fingerprint
    datasheet: str | None
    quick: bool
    results: list[BenchResult]
    skipped: list[str]
    failed: list[str]
    notes: list[str]
    backends: dict[str, str | None]
    seconds: float
    created_unix_s: int


class TraceFound(Out):
    path: Annotated[str, doc("what to give the other tools")]
    run: str
    files: int


class TraceList(Out):
    """The MCP tool list_traces."""

    runs: list[TraceFound]
    notes: list[str]


class Explained(Out):
    """The MCP tool explain_finding: one finding of a report in full."""

    trace: str
    bottleneck: str
    confidence: float
    confidence_reason: str
    step_time_mean_ms: float
    share: dict[str, float | None]
    notes: list[str]
    finding: Finding
    other_findings: list[str]
