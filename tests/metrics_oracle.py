"""The step and cross-rank metrics written as plain polars queries over all rows at once: the
definitions the out-of-core path (partials, combine, blocks of steps) must reproduce. This is how
gpuanalyze computed them before it scaled, with the two definitions that changed with it: per_step
sums each step's shares over ranks, and a straggler's phase includes the un-instrumented rest."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import polars as pl

from analyzer.analysis.thresholds import (
    SLOW_STEP_FRACTION,
    SLOW_STEP_MIN_MS,
    START_SPREAD_MAX_STEPS,
    STRAGGLER_FRACTION,
)
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import Trace

PHASES = (S.DATA_WAIT_MS, S.FORWARD_MS, S.BACKWARD_MS, S.OPTIMIZER_MS)
WAITS = (S.DATA_WAIT_MS, S.SYNC_MS, S.OTHER_MS)


@dataclass
class Oracle:
    values: dict
    per_step: pl.DataFrame
    stragglers: list[tuple]
    per_rank: list[tuple]
    skew: float | None
    kernels: dict | None


def _clamp(x):
    return min(1.0, max(0.0, x))


def oracle(trace: Trace) -> Oracle:
    frame = trace.frame
    rows = frame.height
    n_min = frame.group_by(S.RANK).len().get_column("len").min()
    skip = min(3, int(n_min * 0.1))
    frame = frame.filter(pl.col(S.STEP).rank("ordinal").over(S.RANK) > skip)
    kernels = _kernels(frame)
    sampled = frame.get_column(S.KERNEL_STATS).is_not_null()
    windows = 0
    if sampled.any() and not sampled.all():
        windows = int(sampled.sum())
        frame = frame.filter(~sampled)
    known = {c: frame.get_column(c).null_count() < frame.height for c in (S.GPU_BUSY_MS, *S.PARTS)}
    has_gpu = known[S.GPU_BUSY_MS]
    wall = pl.col(S.WALL_MS)
    idle = (wall - pl.col(S.GPU_BUSY_MS).fill_null(0.0)).clip(lower_bound=0.0)
    eff = {
        p: (pl.min_horizontal(pl.col(p).fill_null(0.0), idle) if has_gpu else pl.col(p).fill_null(0.0)) for p in WAITS
    }
    frame = frame.with_columns(*[e.alias(f"{p}__eff") for p, e in eff.items()], idle.alias("idle"))
    frame = frame.with_columns(
        (pl.col("idle") - pl.col(f"{S.DATA_WAIT_MS}__eff") - pl.col(f"{S.SYNC_MS}__eff"))
        .clip(lower_bound=0.0)
        .alias("unexplained")
    )
    wt = frame.get_column(S.WALL_MS).sum()
    total = {c: frame.get_column(c).sum() for c in (*S.PARTS, "idle", "unexplained", S.GPU_BUSY_MS)}
    total.update({f"{p}__eff": frame.get_column(f"{p}__eff").sum() for p in WAITS})
    per_rank = frame.group_by(S.RANK).agg(wall.mean().alias("mean"), wall.sum().alias("sum"))
    samples = frame.get_column(S.BATCH_SAMPLES)
    mem = frame.get_column(S.PEAK_MEM_BYTES)
    has_samples = samples.null_count() < samples.len()
    values = {
        "steps": frame.height,
        "ranks": frame.get_column(S.RANK).n_unique(),
        "warmup_steps": skip,
        "rows": rows,
        "warmup": rows - frame.height - windows,
        "profiler_windows": windows,
        "step_median_ms": frame.get_column(S.WALL_MS).median(),
        "step_p90_ms": frame.get_column(S.WALL_MS).quantile(0.9, "linear"),
        "breakdown_ms": {p: frame.get_column(p).median() if known[p] else None for p in S.PARTS},
        "mean_ms": {p: frame.get_column(p).mean() if known[p] else None for p in S.PARTS},
        "share": {p: _clamp(total[p] / wt) if known[p] else None for p in S.PARTS},
        "effective": {p: _clamp(total[f"{p}__eff"] / wt) for p in WAITS},
        "step_mean_ms": per_rank.get_column("mean").max(),
        "busy_mean_ms": frame.get_column(S.GPU_BUSY_MS).mean() if has_gpu else None,
        "gpu_util": _clamp(total[S.GPU_BUSY_MS] / wt) if has_gpu else None,
        "idle_unexplained": _clamp(total["unexplained"] / wt) if has_gpu else None,
        "peak_mem_bytes": None if mem.null_count() == mem.len() else mem.max(),
        "batch_samples": samples.median() if has_samples else None,
        "samples_per_s": 1000.0 * samples.sum() / per_rank.get_column("sum").max() if has_samples else None,
    }
    per_step = (
        frame.with_columns(busy_wall=pl.when(pl.col(S.GPU_BUSY_MS).is_not_null()).then(wall))
        .group_by(S.STEP)
        .agg(
            *[(pl.col(f"{p}__eff").sum() / wall.sum()).alias(p) for p in WAITS],
            *[(pl.col(p).fill_null(0.0).sum() / wall.sum()).alias(p + "__raw") for p in WAITS],
            pl.when(pl.col(S.GPU_BUSY_MS).count() > 0)
            .then(pl.col(S.GPU_BUSY_MS).sum() / pl.col("busy_wall").sum())
            .alias(S.GPU_BUSY_MS),
            (pl.col("idle").sum() / wall.sum()).alias("gpu_idle"),
            (pl.col("unexplained").sum() / wall.sum()).alias("gpu_idle_unexplained"),
        )
        .sort(S.STEP)
    )
    stragglers, summaries, skew = _ranks(frame)
    return Oracle(values, per_step, stragglers, summaries, skew, kernels)


def _kernels(frame: pl.DataFrame) -> dict | None:
    rows = frame.filter(pl.col(S.KERNEL_STATS).is_not_null())
    if rows.height == 0:
        return None
    stats = [S.decode_kernel_stats(t) for t in rows.get_column(S.KERNEL_STATS).to_list()]
    if not any(st.kernel_count for st in stats):
        return None
    medians = [st.kernel_median_us for st in stats if st.kernel_median_us is not None]
    top: dict[str, list] = {}
    for st in stats:
        for k in st.top_kernels:
            t = top.setdefault(k.name, [0.0, 0])
            t[0] += k.total_ms
            t[1] += k.count
    return {
        "steps": rows.height,
        "totals_ms": {f: float(sum(getattr(st, f) for st in stats)) for f in S.KERNEL_STAT_FIELDS},
        "wall_ms": rows.get_column(S.WALL_MS).sum(),
        "kernel_count": sum(st.kernel_count for st in stats),
        "kernel_median_us": statistics.median(medians) if medians else None,
        "top": [n for n, _ in sorted(top.items(), key=lambda kv: kv[1][0], reverse=True)[:5]],
    }


def _ranks(frame: pl.DataFrame):
    if frame.get_column(S.RANK).n_unique() < 2:
        return [], [], None
    step_median = frame.get_column(S.WALL_MS).median()
    lf = frame.lazy().with_columns(
        work=pl.col(S.WALL_MS) - pl.col(S.SYNC_MS).fill_null(0.0), t=pl.col(S.START_UNIX_NS).cast(pl.Float64) / 1e6
    )
    lf = lf.with_columns(
        st=pl.when((pl.col("t").max() - pl.col("t").min()).over(S.STEP) <= START_SPREAD_MAX_STEPS * step_median)
        .then(pl.col("t") - pl.col("t").min().over(S.STEP))
        .otherwise(0.0)
    ).with_columns(arrival=pl.col("work") + pl.col("st"))
    lf = lf.with_columns(
        rest=(pl.col("work") - pl.sum_horizontal([pl.col(p).fill_null(0.0) for p in PHASES])).clip(lower_bound=0.0)
    )
    n_ranks = frame.get_column(S.RANK).n_unique()
    a, st = pl.col("arrival"), pl.col("st")
    baseline = a.median() if n_ranks >= 3 else a.min()
    st_base = st.median() if n_ranks >= 3 else st.min()
    per_step = lf.group_by(S.STEP).agg(
        baseline.alias("baseline"),
        st_base.alias("st_base"),
        a.max().alias("last"),
        (a.max() - a.min()).alias("skew"),
    )
    threshold = max(SLOW_STEP_MIN_MS, SLOW_STEP_FRACTION * step_median)
    slow = (
        lf.join(per_step, on=S.STEP)
        .filter((pl.col("last") - a <= threshold) & (a - pl.col("baseline") > threshold))
        .group_by(S.RANK)
        .agg(
            pl.len().alias("steps_slow"),
            (a - pl.col("baseline")).median().alias("excess"),
            (st - pl.col("st_base")).median().alias("start"),
        )
    )
    per_rank = lf.group_by(S.RANK).agg(
        pl.len().alias("steps"),
        pl.col(S.WALL_MS).median().alias("step"),
        pl.col("work").median().alias("work"),
        (pl.col(S.SYNC_MS).fill_null(0).sum() / pl.col(S.WALL_MS).sum()).alias("sync_share"),
        (pl.col(S.DATA_WAIT_MS).fill_null(0).sum() / pl.col(S.WALL_MS).sum()).alias("data_share"),
        *[pl.col(p).fill_null(0.0).median().alias(p) for p in PHASES],
        pl.col("rest").median().alias("rest"),
    )
    per_rank_df, slow_df, per_step_df = pl.collect_all([per_rank.sort(S.RANK), slow, per_step])
    summaries = [
        (r[S.RANK], r["steps"], r["step"], r["work"], r["sync_share"], r["data_share"])
        for r in per_rank_df.iter_rows(named=True)
    ]
    out = []
    for row in slow_df.sort(["steps_slow", "excess", S.RANK], descending=[True, True, False]).iter_rows(named=True):
        steps = per_rank_df.filter(pl.col(S.RANK) == row[S.RANK]).get_column("steps").item()
        if row["steps_slow"] < STRAGGLER_FRACTION * steps:
            continue
        mine = per_rank_df.filter(pl.col(S.RANK) == row[S.RANK])
        others = per_rank_df.filter(pl.col(S.RANK) != row[S.RANK])
        excess = {"start": row["start"]}
        excess |= {p: mine.get_column(p).item() - others.get_column(p).median() for p in (*PHASES, "rest")}
        phase = max(excess, key=excess.__getitem__)
        name = {"rest": "other"}.get(phase, phase.removesuffix("_ms").replace("data_wait", "data"))
        out.append((row[S.RANK], row["steps_slow"], steps, row["excess"], name, excess[phase]))
    return out, summaries, per_step_df.get_column("skew").median()
