"""The report's JSON (`gpuanalyze TRACE --json`, `run --json`, the MCP analyze tool), declared field by field.

These structs are the public names; json_report.py fills them from the analysis, reading each internal value by
name, so an internal rename fails loudly instead of changing the output. ``run`` and ``end`` are the trace
format's own structs (docs/trace-format.md).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from analyzer.analysis.findings import Bottleneck, ConfidenceLevel, Severity
from gpuanalyze.ingest.trace.runinfo import EndInfo, GpuSummary, RunInfo


def doc(text: str) -> msgspec.Meta:
    """A field's description (the JSON Schema's, and docs/json.md's meaning column)."""
    return msgspec.Meta(description=text)


Share = Annotated[float, doc("a fraction in [0, 1]")]


class Out(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What every output struct shares: keyword fields, every one present (null where unknown), no other key."""


class StepAccounting(Out):
    """Where every recorded step row went: rows = warmup + profiler_windows + analysed."""

    rows: Annotated[int, doc("step rows in the trace (after the reader dropped unusable ones; notes say how many)")]
    warmup: Annotated[int, doc("rows skipped as warm-up (all ranks)")]
    profiler_windows: Annotated[int, doc("rows under a sampled torch.profiler window: kernel evidence only")]
    analysed: Annotated[int, doc("rows the timings come from (steps)")]


class SteadyState(Out):
    """The steps the rules leave out and why (docs/projections.md)."""

    median_ms: Annotated[float, doc("median step per rank")]
    settling_steps: Annotated[list[int], doc("settling steps far above the median")]
    outlier_steps: Annotated[list[int], doc("outlier steps far above the median")]
    spike_period: Annotated[int | None, doc("every Nth step spikes; null when not periodic")]
    spike_excess_ms: Annotated[float, doc("mean excess of an outlier step over the median")]
    spike_share: Annotated[float, doc("share of run time in that excess")]
    drift: Annotated[float, doc("median of the last third of the steady steps over the first third, minus 1")]
    spread: Annotated[float, doc("1.4826 x MAD / median of the steady steps: the least noise a range assumes")]


class Evidence(Out):
    """One measured value tested against one threshold: for the finding, or against it."""

    metric: Annotated[str, doc("what was measured")]
    value: Annotated[float, doc("the measured value")]
    threshold: Annotated[float, doc("what it is compared with")]
    comparison: Annotated[Literal[">=", "<"], doc("the test is `value comparison threshold`")]
    unit: Annotated[str, doc("the unit of both")]
    source: Annotated[str, doc("where the threshold comes from: a tool, a paper, a measured ceiling, our default")]
    passed: Annotated[bool, doc("the test holds")]
    supports: Annotated[bool, doc("the item counts for the finding; one that does not is contrary evidence")]


class Creep(Out):
    """Memory at step start that grows step after step (docs/memory.md)."""

    rank: int
    bytes_per_step: float
    steps: Annotated[int, doc("steps the growth was fitted on")]
    full_at_step: Annotated[int | None, doc("the step at which the device is full at this rate")]
    evidence: list[Evidence]


class Memory(Out):
    """Memory per step (docs/memory.md), in bytes; null where the trace does not have it."""

    peak_bytes: int | None
    persistent_bytes: Annotated[int | None, doc("at a step's start: what persists across steps")]
    step_bytes: Annotated[int | None, doc("what a step adds")]
    reserved_bytes: int | None
    total_bytes: Annotated[int | None, doc("the device's")]
    resident: Annotated[bool, doc("the figures are a CPU run's resident set")]
    reserve_ratio: float | None
    largest_batch_multiplier: Annotated[int | None, doc("the largest batch multiple that fits")]
    batch_x2_fits: bool | None
    creep: Creep | None


class Straggler(Out):
    """A rank that arrives at the collective among the last on most steps (docs/distributed.md)."""

    rank: int
    steps_slow: Annotated[int, doc("steps on which it arrived among the last, beyond the step's baseline")]
    steps: Annotated[int, doc("steps of this rank analysed")]
    excess_ms: Annotated[float, doc("median over its late steps of its arrival beyond the baseline")]
    phase: Annotated[str, doc("where it loses the time: start, data, forward, backward, optimizer, other")]
    phase_excess_ms: Annotated[float, doc("that phase's median excess over the other ranks")]
    phase_diffs: Annotated[dict[str, float], doc("each phase: its median minus the other ranks' medians")]
    start_late_ms: Annotated[float, doc("median over its late steps of its step start after the baseline start")]


class RankSummary(Out):
    """One rank of a multi-rank run."""

    rank: int
    steps: int
    step_median_ms: float
    work_median_ms: Annotated[float, doc("median of step time minus its waiting on other ranks")]
    sync_share: Annotated[float, doc("share of its time waiting on other ranks or the device")]
    data_share: Annotated[float, doc("share of its time waiting for data")]
    sync_median_ms: Annotated[float, doc("median of its own waiting per step")]
    waits_ms: Annotated[float, doc("mean per step of the last rank's arrival minus its own")]


class Victim(Out):
    """A rank, not a straggler, that waits more than 1 ms per step for the last arrival."""

    rank: int
    waits_ms: float
    sync_median_ms: float


class TopKernel(Out):
    name: str
    total_ms: float
    count: int


class BlockingOp(Out):
    """Where the host blocks (kernels.time_ms.sync_api), summed over the steps with kernel statistics."""

    op: Annotated[str, doc("the outermost CPU op around the blocking call ('' where the trace does not say)")]
    caller: Annotated[str, doc("the innermost record_function or nn.Module around it ('' where unknown)")]
    call: Annotated[str, doc("the runtime call: cudaMemcpyAsync, cudaStreamSynchronize, ...")]
    total_ms: float
    count: int
    gpu_idle_ms: Annotated[float, doc("the GPU idle these calls own (docs/idle-owners.md)")]


class Kernels(Out):
    """Kernel-level evidence (docs/kernel-evidence.md)."""

    steps_with_kernel_stats: int
    kernel_count: int
    kernel_median_us: float | None
    time_ms: Annotated[dict[str, float], doc("every summable kernel statistic, summed, without its _ms suffix")]
    top_kernels: list[TopKernel]
    blocking_ops: Annotated[list[BlockingOp], doc("the calls that left the GPU idle longest first")]


class Frame(Out):
    frame: Annotated[str, doc("the user's `file:line function` (or record_function range) that held the idle")]
    ms_per_step: float


class Owner(Out):
    """One owner of the GPU's idle time."""

    owner: str
    ms_per_step: float
    share_of_step: Share
    share_of_idle: Share
    what: Annotated[str, doc("the owner in words")]
    frames: list[Frame]


class StepIdle(Out):
    """One analysed step of one rank."""

    step: int
    rank: int
    wall_ms: float
    idle_ms: float
    owners_ms: Annotated[dict[str, float], doc("the owners with idle time in the step; they add up to idle_ms")]


class IdleOwners(Out):
    """Who owned the GPU's idle time over the analysed steps (docs/idle-owners.md)."""

    steps: int
    idle_ms_per_step: float
    owners: Annotated[list[Owner], doc("every owner, in precedence order")]
    per_step: Annotated[list[StepIdle], doc("the first per_step_limit analysed steps, in step order")]
    per_step_limit: int


class Savings(Out):
    """What a fix saves per completed run."""

    hours_per_run: float
    gpu_hours_per_run: float
    usd_per_run: Annotated[float | None, doc("null without a price")]


class Finding(Out):
    """One finding: a cause, its evidence, what to change and the step time it projects (docs/projections.md)."""

    bottleneck: Annotated[Bottleneck, doc("as the verdict (never none or unknown)")]
    cause: Annotated[str, doc("the sub-cause, e.g. input_pipeline, host_sync, straggler, fp32_math")]
    severity: Severity
    share: Annotated[float, doc("fraction of step time the cause takes, in [0, 1]")]
    consistency: Annotated[float, doc("fraction of the steps on which the finding's per-step test holds")]
    confidence: Annotated[float, doc("how much evidence stands behind it, in [0, 1]")]
    confidence_level: ConfidenceLevel
    confidence_reason: str
    summary: str
    evidence: Annotated[list[Evidence], doc("the tests behind it, for and against")]
    recommendations: Annotated[list[str], doc("what to change, most effective first")]
    projected_step_time_ms: Annotated[float, doc("mean step if fixed (per batch of projection_per_batch_of if set)")]
    projected_step_time_ms_low: Annotated[float | None, doc("low end of the range the step is expected in after it")]
    projected_step_time_ms_high: Annotated[float | None, doc("high end; reaching current_step_time_ms: may not help")]
    projection_range_width: Annotated[float | None, doc("(high - low) / current step")]
    projection_range_wide: Annotated[bool, doc("the width is above WIDE_RANGE: it says little until measured")]
    settling_trial: Annotated[str | None, doc("the `gpuanalyze run --try` command that measures the fix")]
    current_step_time_ms: Annotated[float, doc("mean step now (slowest rank)")]
    saved_ms_per_step: Annotated[float, doc("current_step_time_ms - projected_step_time_ms, at least 0")]
    projection_rule: Annotated[str, doc("the projection's arithmetic, with the measured numbers")]
    projection_bound: Annotated[str, doc("what limits the step once this is fixed")]
    projection_params: Annotated[dict[str, bool | int | float | str] | None, doc("the fix assumed: {num_workers: 4}")]
    projection_per_batch_of: Annotated[float | None, doc("set when the projection is per batch of that many samples")]
    savings: Annotated[Savings | None, doc("with a run length")]


class CostInputs(Out):
    """The cost inputs as given (docs/cost.md)."""

    price_per_gpu_hour: float | None
    steps_per_run: float | None
    samples_per_run: float | None
    gpus: int | None
    storage_usd: float
    network_usd: float
    software_usd: float
    recovery_usd: float
    operations_usd: float


class Cost(Out):
    """What a completed run costs (docs/cost.md)."""

    per_run_usd: Annotated[float | None, doc("GPU cost plus the other terms; null without a price")]
    gpu_hours: Annotated[float, doc("hours per run x GPUs")]
    hours_per_run: Annotated[float, doc("wall-clock hours of a completed run at the mean step time")]
    gpu_usd: Annotated[float | None, doc("GPU-hours x price")]
    other_usd: Annotated[float, doc("storage + network + software + recovery + operations")]
    steps_per_run: float
    gpus: int
    step_time_s: Annotated[float, doc("the mean step time used")]
    inputs: CostInputs


class Mfu(Out):
    """Model FLOPs utilisation (with --flops-per-step)."""

    flops_per_step: Annotated[float, doc("model FLOPs per step over all GPUs, as given")]
    achieved_tflops: Annotated[float, doc("per GPU")]
    precision: Annotated[str, doc("the precision whose peak it is compared with")]
    datasheet_tflops: Annotated[float | None, doc("the GPU's datasheet peak (null when not in the table)")]
    mfu_datasheet: float | None
    measured_tflops: Annotated[float | None, doc("the matmul ceiling `gpuanalyze bench` measured")]
    mfu_measured: float | None
    source: str


class System(Out, omit_defaults=True):
    """The host the run had, from the system sampler's readings (about one a second) when the trace has them."""

    cores_available: Annotated[float, doc("cores this process and its workers may use (affinity, cgroup quota)")]
    cores_free: Annotated[float, doc("of those, what other work on the host left free; at least 0.25")]
    niced_cores: Annotated[float | None, doc("cores' worth of low-priority busy time on the job's CPUs")]
    priority: Annotated[str | None, doc("what cores_free assumed about niced work, in words")]
    load_avg: float | None
    cpu_util_pct: float | None
    process_cpu_cores: Annotated[float | None, doc("cores' worth of CPU the training process used")]
    workers_cpu_cores: Annotated[float | None, doc("cores' worth its child processes (DataLoader workers) used")]
    oversubscribed: Annotated[bool, doc("a quarter of the readings had more runnable threads than CPUs")]
    oversubscribed_share: float | None
    sampled: Annotated[bool, doc("the facts come from sampler readings")]
    samples: int
    run_queue: Annotated[float | None, doc("runnable threads on the host")]
    rss_bytes: Annotated[int | None, doc("largest resident memory of the training process")]
    workers_rss_bytes: int | None
    cpu_quota_cores: Annotated[float | None, doc("the cgroup CPU quota (null: unlimited or unknown)")]
    host_cpus: int | None
    gpu_util_pct: Annotated[float | None, doc("present only when NVML sampled the run's GPU")] = None
    gpu_mem_used_bytes: int | None = None
    gpu_power_w: float | None = None
    gpu_temp_c: float | None = None
    gpu_sm_clock_mhz: float | None = None


class Report(Out):
    """`gpuanalyze TRACE --json`: the verdict, its evidence and what it costs."""

    trace: Annotated[str, doc("the path analysed")]
    bottleneck: Annotated[Bottleneck, doc("the verdict (docs/thresholds.md)")]
    confidence: Annotated[float, doc("how much evidence stands behind the verdict, in [0, 1]")]
    confidence_level: ConfidenceLevel
    confidence_reason: str
    stability: Annotated[float | None, doc("share of resamples of the steps giving this verdict; null: < 10 steps")]
    stability_resamples: int | None
    stability_reason: str | None
    steady_state: SteadyState | None
    steps: Annotated[int, doc("analysed steps (all ranks)")]
    warmup_steps_skipped: Annotated[int, doc("leading steps skipped per rank")]
    step_accounting: StepAccounting
    ranks: int
    complete: Annotated[bool, doc("false when the trace was never closed (crash, kill, still being written)")]
    end_status: Annotated[str, doc("ok, exception, interrupted, profiler_error, imported, incomplete, disk_full, live")]
    step_time_mean_ms: Annotated[float, doc("mean step of the slowest rank: projections' and cost's one basis")]
    step_time_median_ms: Annotated[float, doc("median of the analysed steps' wall time (all ranks)")]
    step_time_p90_ms: float
    breakdown_ms: Annotated[dict[str, float | None], doc("median per step of each part (null: not in the trace)")]
    share: Annotated[dict[str, float | None], doc("the same parts as fractions of step time")]
    gpu_utilization: Annotated[float | None, doc("GPU busy / wall time; null without GPU timings")]
    throughput_samples_per_s: float | None
    peak_mem_bytes: int | None
    memory: Memory | None
    gpu: Annotated[GpuSummary | None, doc("HTA's temporal breakdown, in percent")]
    stragglers: list[Straggler]
    per_rank: list[RankSummary]
    victims: list[Victim]
    kernels: Kernels | None
    idle_owners: IdleOwners | None
    findings: Annotated[list[Finding], doc("ranked by the step time their fix saves at the slow end of its range")]
    health: Annotated[list[Evidence], doc("the tests of a healthy run; all pass when the verdict is none")]
    cost: Annotated[Cost | None, doc("with a run length")]
    mfu: Mfu | None
    notes: Annotated[list[str], doc("what the reader skipped or repaired; why the trace is incomplete")]
    run: Annotated[RunInfo, doc("the trace's run information (docs/trace-format.md)")]
    end: Annotated[EndInfo | None, doc("the trace's end marker; null for a trace never closed")]
    ceilings: Annotated[str | None, doc("the measured-ceilings file the findings were compared with")]
    system: System | None
