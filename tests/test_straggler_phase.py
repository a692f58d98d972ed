"""The straggler's phase from per-phase differences, with the numbers; CPU runs in CPU words.

Small Kineto traces of mechanisms seen in real GPU traces (tests/mechanism_fixtures.py); each test failed on the
code before its fix."""

from __future__ import annotations

import pytest

from analyzer.api import ReadOptions, analyze
from tests import mechanism_fixtures as F
from tests.kineto_fixtures import write

# -- the straggler's phase from per-phase differences; CPU runs in CPU words -----------------------


def _straggler_run(tmp_path, *, gpu: bool):
    run = tmp_path / ("gpu" if gpu else "cpu")
    run.mkdir()
    for rank, slow in ((0, 0.0), (1, 30.0)):
        write(run / f"rank{rank}.json", F.straggler_rank(rank, slow_forward_ms=slow, gpu=gpu))
    return analyze(run)


@pytest.mark.parametrize("gpu", [False, True])
def test_the_straggler_is_named_slow_in_forward_with_the_numbers(tmp_path, gpu):
    r = _straggler_run(tmp_path, gpu=gpu)
    s = r.metrics.distributed.stragglers[0]
    # before: Kineto marks no forward, so rank 1's 30 ms went to "other"
    assert (s.rank, s.phase) == (1, "forward")
    diffs = dict(s.phase_diffs)
    assert diffs["forward"] == pytest.approx(30.0, abs=0.1) and abs(diffs["backward"]) < 0.1
    f = next(f for f in r.findings if f.cause == "straggler")
    assert "forward +30.0" in f.summary


def test_a_cpu_straggler_is_not_told_to_check_its_gpu(tmp_path):
    cpu = _straggler_run(tmp_path, gpu=False)
    advice = " ".join(next(f for f in cpu.findings if f.cause == "straggler").recommendations)
    assert "GPU" not in advice and "CPU" in advice
    gpu = _straggler_run(tmp_path, gpu=True)
    advice = " ".join(next(f for f in gpu.findings if f.cause == "straggler").recommendations)
    # no clock/temperature/power samples in the trace: say what to record, not "check its GPU"
    assert "check that node's GPU" not in advice and "clocks.sm" in advice


def test_a_cpu_run_is_costed_and_headlined_in_cpu_words(tmp_path):
    from rich.console import Console

    from analyzer.planning.cost import CostInputs
    from analyzer.render import words
    from analyzer.render.terminal import render_terminal

    run = tmp_path / "cpu"
    run.mkdir()
    for rank in (0, 1):
        write(run / f"rank{rank}.json", F.straggler_rank(rank, slow_forward_ms=0.0, gpu=False))
    r = analyze(run, ReadOptions(cost=CostInputs(steps_per_run=1e5)))
    console = Console(width=200, record=True)
    console.print(render_terminal(r))
    out = console.export_text()
    assert "GPU-h" not in out and "GPU(s)" not in out and "CPU-h" in out, out
    assert "GPU" not in words.verdict_line(r)


# -- one cause reported once: a straggler's own excess is not a second finding -----------------------


def _late_rank_run(tmp_path, *, everyone_ms: float, phase: str = "other"):
    """Two CPU ranks of 50 ms steps; rank 1 spends 30 ms more in ``phase`` (a sleep in its loop, or its own slow
    loader) and rank 0 waits for it in the all-reduce; ``everyone_ms`` of such work on both ranks."""
    from tests.conftest import make_row, write_trace

    for rank in (0, 1):
        rows = []
        for i in range(40):
            wall = 50.0 + (i % 3) * 0.2
            extra = everyone_ms + (30.0 if rank == 1 else 0.0)
            data = 1.0 + (extra if phase == "data" else 0.0)
            other = extra if phase == "other" else 0.0
            sync = wall - 14 - data - other
            rows.append(make_row(i, rank=rank, wall=wall, data=data, fwd=5.0, bwd=8.0, opt=1.0, sync=sync))
        write_trace(tmp_path / f"trace.rank{rank}.arrow", rows, run={"world_size": 2, "rank": rank})
    return analyze(tmp_path / "trace.arrow")


@pytest.mark.parametrize("phase", ["other", "data"])
def test_a_stragglers_own_excess_is_the_straggler_not_a_second_finding(tmp_path, phase):
    r = _late_rank_run(tmp_path, everyone_ms=0.0, phase=phase)
    assert [(f.bottleneck, f.cause) for f in r.findings] == [("sync", "straggler")]  # was also host / data, high


@pytest.mark.parametrize(("phase", "bottleneck"), [("other", "host"), ("data", "data_loading")])
def test_work_every_rank_does_is_still_its_own_finding_beside_the_straggler(tmp_path, phase, bottleneck):
    r = _late_rank_run(tmp_path, everyone_ms=10.0, phase=phase)
    f = next(f for f in r.findings if f.bottleneck == bottleneck)
    assert f.share == pytest.approx((10.0 + (phase == "data")) / 50.0, abs=0.02)
