"""`gpuanalyze compare BEFORE AFTER`: a fix BEFORE's report projected, applied in AFTER, is checked
against what AFTER measured (projected vs measured step time and the error)."""

import json

import pytest
from typer.testing import CliRunner

from analyzer.analysis import thresholds as T
from analyzer.api import load_compared
from analyzer.cli import app
from analyzer.planning.compare import compare
from analyzer.planning.cost import CostInputs
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row

runner = CliRunner()
#: What the recommended workers project for 50 ms of sleeping loading: the fewest that make the 10 ms
#: compute path (plus receiving the batch) the limit, 5 (four would load a batch every 12.7 ms).
FIVE = 10.0 + T.WORKER_MAIN_COST_MS


def _trace(factory, *, wall, data, workers, samples=32, n=40):
    rows = [
        make_row(i, wall=wall, data=data, fwd=4.0, bwd=4.5, opt=1.0, samples=samples, data_cpu=0.0) for i in range(n)
    ]
    return factory(rows, run={"cpu_count": 4}, end=EndInfo(status="ok", steps=n, loader_workers=workers))


def test_the_recommended_worker_count_is_checked_against_the_measurement(trace_factory):
    before = _trace(trace_factory, wall=60.0, data=50.0, workers=0)
    after = _trace(trace_factory, wall=13.5, data=3.5, workers=5)
    c = compare([load_compared(before, CostInputs(), None), load_compared(after, CostInputs(), None)])
    (check,) = c.checks
    assert check.fix == "num_workers 0 -> 5" and check.bottleneck == "data_loading" and check.recommended
    assert check.projected_ms == pytest.approx(FIVE) and check.measured_ms == pytest.approx(13.5)
    assert check.error == pytest.approx((FIVE - 13.5) / 13.5)


def test_a_different_worker_count_gets_its_own_projection(trace_factory):
    before = _trace(trace_factory, wall=60.0, data=50.0, workers=0)
    after = _trace(trace_factory, wall=35.0, data=25.0, workers=2)
    (check,) = compare([load_compared(before, CostInputs(), None), load_compared(after, CostInputs(), None)]).checks
    assert not check.recommended and check.projected_ms == pytest.approx((50.0 + T.WORKER_SIDE_COST_MS) / 2)


def test_a_larger_batch_is_compared_per_batch_of_the_old_size(trace_factory):
    before = _trace(trace_factory, wall=20.0, data=0.2, workers=0, samples=16)
    after = _trace(trace_factory, wall=30.0, data=0.4, workers=0, samples=32)
    (check,) = compare([load_compared(before, CostInputs(), None), load_compared(after, CostInputs(), None)]).checks
    assert check.fix == "batch 16 -> 32" and check.per == "per batch of 16 samples"
    assert check.measured_ms == pytest.approx(15.0)


def test_unrelated_traces_have_no_check(trace_factory):
    a = _trace(trace_factory, wall=20.0, data=0.2, workers=0)
    b = _trace(trace_factory, wall=21.0, data=0.3, workers=0)
    assert compare([load_compared(a, CostInputs(), None), load_compared(b, CostInputs(), None)]).checks == ()


def test_the_cli_prints_and_the_json_carries_both_numbers(trace_factory):
    before = _trace(trace_factory, wall=60.0, data=50.0, workers=0)
    after = _trace(trace_factory, wall=13.5, data=3.5, workers=5)
    text = runner.invoke(app, ["compare", str(before), str(after)])
    assert text.exit_code == 0 and "Projection check" in text.output and "measured 13.50 ms" in text.output
    data = json.loads(runner.invoke(app, ["compare", str(before), str(after), "--json"]).output)
    (check,) = data["projection_checks"]
    assert check["projected_ms"] == pytest.approx(FIVE) and check["measured_ms"] == pytest.approx(13.5)
    assert check["error"] == pytest.approx((FIVE - 13.5) / 13.5, abs=1e-6)  # rounded for reading
