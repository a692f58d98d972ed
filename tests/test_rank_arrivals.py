"""Culprits and victims from arrival at the collective: step start plus own work, compared across ranks."""

import numpy as np
import pytest

from analyzer import analyze
from gpuanalyze.ingest.trace import schema as S
from tests.conftest import make_row, write_trace

T0 = 1_700_000_000_000_000_000
PARTS = {"data": 1.0, "fwd": 5.0, "bwd": 8.0, "opt": 1.0}


def _run(tmp_path, ranks, late, *, extra=None, collective=2.0, steps=40, clock=None):
    """Ranks meet in a collective lasting ``collective`` ms; ``late[r](i)``: rank r's late start on step i
    (ms); ``extra[r]``: (part, ms) it does more of. Each waits the last arrival minus its own."""
    rng = np.random.default_rng(0)
    extra = extra or {}
    for i in range(steps):
        noise = {r: rng.uniform(0, 0.2) for r in range(ranks)}
        starts = {r: late.get(r, lambda _: 0.0)(i) + noise[r] for r in range(ranks)}
        work = {}
        for r in range(ranks):
            p = dict(PARTS)
            if r in extra:
                p[extra[r][0]] += extra[r][1]
            work[r] = p
        arrive = {r: starts[r] + sum(work[r].values()) for r in range(ranks)}
        last = max(arrive.values())
        for r in range(ranks):
            sync = last - arrive[r] + collective
            row = make_row(i, rank=r, wall=sum(work[r].values()) + sync, sync=sync, **work[r])
            row[S.START_UNIX_NS] = T0 + i * 40_000_000 + int((starts[r] + (clock or {}).get(r, 0.0)) * 1e6)
            rows = row
            path = tmp_path / f"trace.rank{r}.arrow"
            _rows.setdefault(path, []).append(rows)
    for path, rows in _rows.items():
        write_trace(path, rows, run={"world_size": ranks, "rank": rows[0][S.RANK]})
    _rows.clear()
    return tmp_path


_rows: dict = {}


def test_ranks_that_start_late_are_named_with_the_phase_before_the_step(tmp_path):
    lateness = {5: lambda i: 5.0 + 2.5 * ((i * 7) % 11) / 10, 6: lambda i: 5.0 + 2.5 * ((i * 3) % 11) / 10}
    report = analyze(_run(tmp_path, 8, lateness))
    d = report.metrics.distributed
    assert sorted(s.rank for s in d.stragglers) == [5, 6]
    assert {s.phase for s in d.stragglers} == {"start"}
    assert all(5.0 <= s.start_late_ms <= 7.6 for s in d.stragglers)
    assert sorted(v.rank for v in d.victims) == [0, 1, 2, 3, 4, 7]
    assert all(5.0 <= v.waits_ms <= 7.6 for v in d.victims)
    f = report.findings[0]
    assert (report.bottleneck, f.cause) == ("sync", "straggler")
    assert "before the step" in f.summary and "Ranks 5, 6" in f.summary.replace("6, 5", "5, 6")
    advice = " ".join(f.recommendations)
    assert "starts its steps late" in advice and "bucket_cap_mb" not in advice
    # the projection removes the victims' wait, no more than the late ranks' excess
    assert report.metrics.step_mean_ms - f.projection.step_ms <= max(s.excess_ms for s in d.stragglers) + 1e-9


def test_a_data_straggler_below_its_own_all_reduce_share_is_named(tmp_path):
    """Rank 2 loads 3.5 ms more per step (+27% of its work) while every rank waits 12 ms in the all-reduce
    itself: it is still the straggler, in data, whatever its own sync share."""
    report = analyze(_run(tmp_path, 4, {}, extra={2: ("data", 3.5)}, collective=12.0))
    d = report.metrics.distributed
    assert [(s.rank, s.phase) for s in d.stragglers] == [(2, "data")]
    own = next(r for r in d.per_rank if r.rank == 2)
    assert d.stragglers[0].excess_ms / d.step_median_ms < own.sync_share
    assert report.findings[0].cause == "straggler"
    assert "DataLoader workers" in report.findings[0].recommendations[0]


def test_balanced_ranks_name_no_culprit(tmp_path):
    d = analyze(_run(tmp_path, 8, {})).metrics.distributed
    assert d.stragglers == () and d.victims == ()


def test_a_rank_slow_in_forward_gets_forward_advice_not_bucket_settings(tmp_path):
    report = analyze(_run(tmp_path, 4, {}, extra={1: ("fwd", 6.0)}))
    s = report.metrics.distributed.stragglers[0]
    assert (s.rank, s.phase) == (1, "forward")
    advice = " ".join(report.findings[0].recommendations)
    assert "input imbalance" in advice and "bucket_cap_mb" not in advice


def test_starts_on_different_clocks_count_as_equal(tmp_path):
    """Rank 3's clock is an hour off: its arrivals are its work alone, so no one is late."""
    d = analyze(_run(tmp_path, 4, {}, clock={3: 3_600_000.0})).metrics.distributed
    assert d.stragglers == ()
    assert d.skew_median_ms == pytest.approx(0.2, abs=0.2)


def test_a_late_rank_in_imported_kineto_traces_is_named(tmp_path):
    """A directory of 4 Kineto rank traces: rank 2 starts every 20 ms step 6 ms late; the others block in
    cudaStreamSynchronize until it arrives."""
    from tests.kineto_fixtures import ev, write

    late = {2: 6000}
    for rank in range(4):
        events = []
        for i in range(12):
            t = i * 20_000 + late.get(rank, 0)
            wait = max(late.values()) - late.get(rank, 0) + 500
            events += [
                ev("user_annotation", f"ProfilerStep#{i}", t, 10_000 + wait),
                ev("cpu_op", "aten::mm", t + 10, 9_900),
                ev("cuda_runtime", "cudaStreamSynchronize", t + 10_000, wait),
            ]
        write(tmp_path / f"r{rank}.json", {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 4}})
    report = analyze(tmp_path)
    d = report.metrics.distributed
    assert [(s.rank, s.phase) for s in d.stragglers] == [(2, "start")]
    assert d.stragglers[0].start_late_ms == pytest.approx(6.0, abs=0.1)
    assert sorted(v.rank for v in d.victims) == [0, 1, 3] and all(
        v.waits_ms == pytest.approx(6.0, abs=0.1) for v in d.victims
    )
