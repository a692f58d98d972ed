"""Multi-rank analysis: real 2-rank gloo DDP runs on CPU, and synthetic rank sets."""

import json

import pytest
from typer.testing import CliRunner

from analyzer import analyze
from analyzer.cli import app
from analyzer.distributed import rank_analysis
from ingest.reader import load_trace
from ingest.sources import load_any, rank_siblings
from tests.conftest import make_row, write_trace

runner = CliRunner()


def _ranks(tmp_path, works: dict[int, float], *, slow_phase: str = "fwd", steps: int = 20):
    """One .arrow per rank; every rank's step lasts 30 ms, the rest is waiting (sync)."""
    for rank, extra in works.items():
        rows = []
        for i in range(steps):
            parts = {"data": 1.0, "fwd": 5.0, "bwd": 8.0, "opt": 1.0}
            parts[slow_phase] += extra
            work = sum(parts.values())
            rows.append(make_row(i, rank=rank, wall=30.0, sync=30.0 - work, **parts))
        write_trace(tmp_path / f"trace.rank{rank}.arrow", rows, run={"world_size": len(works), "rank": rank})
    return tmp_path / "trace.arrow"


def test_a_slow_rank_is_the_straggler_with_its_phase(tmp_path):
    path = _ranks(tmp_path, {0: 0.0, 1: 0.2, 2: 10.0, 3: 0.1}, slow_phase="data")
    report = analyze(path)
    assert report.bottleneck == "sync"
    s = report.metrics.distributed.stragglers[0]
    assert (s.rank, s.phase, s.steps_slow) == (2, "data", 18)
    assert s.excess_ms == pytest.approx(9.9, abs=0.2)


def test_balanced_ranks_have_no_straggler(tmp_path):
    report = analyze(_ranks(tmp_path, {0: 0.0, 1: 0.3, 2: 0.1}))
    assert report.metrics.distributed.stragglers == ()
    assert report.metrics.distributed.skew_median_ms == pytest.approx(0.3)


def test_single_rank_has_no_rank_analysis(trace_factory):
    assert rank_analysis(load_trace(trace_factory([make_row(i) for i in range(5)])).frame) is None


def test_rank_siblings_are_found_from_any_name(tmp_path):
    _ranks(tmp_path, {0: 0.0, 1: 0.0})
    (tmp_path / "trace.rank1.arrow.bak").write_text("x")
    (tmp_path / "other.rank0.arrow").write_text("x")
    want = [tmp_path / "trace.rank0.arrow", tmp_path / "trace.rank1.arrow"]
    assert rank_siblings(tmp_path / "trace.arrow") == want
    assert rank_siblings(tmp_path / "trace.rank1.arrow") == want
    assert load_any(tmp_path / "trace.rank0.arrow").frame.get_column("rank").unique().sort().to_list() == [0, 1]


@pytest.mark.slow
def test_real_ddp_run_with_a_slow_rank(tmp_path):
    pytest.importorskip("torch")
    from analyzer.demo_ddp import run_ddp

    run_ddp(tmp_path / "trace.arrow", world=2, slow_rank=1, slow_s=0.02, steps=25)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.rank0.arrow", "trace.rank1.arrow"]
    r0 = load_trace(tmp_path / "trace.rank0.arrow")
    assert (r0.run["rank"], r0.run["world_size"], r0.run["backend"]) == (0, 2, "gloo")
    result = runner.invoke(app, [str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["bottleneck"] == "sync"
    assert [(s["rank"], s["phase"]) for s in data["stragglers"]] == [(1, "forward")]
    assert data["stragglers"][0]["excess_ms"] > 10
    waiting = {r["rank"]: r["sync_share"] for r in data["per_rank"]}
    assert waiting[0] > 0.5 > waiting[1]


@pytest.mark.slow
def test_real_balanced_ddp_run_has_no_straggler(tmp_path):
    pytest.importorskip("torch")
    from analyzer.demo_ddp import run_ddp

    run_ddp(tmp_path / "trace.arrow", world=2, slow_rank=-1, steps=25)
    data = json.loads(runner.invoke(app, [str(tmp_path / "trace.arrow"), "--json"]).output)
    assert data["stragglers"] == [] and data["ranks"] == 2
