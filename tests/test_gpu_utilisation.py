"""GPU utilisation over the same steps in numerator and denominator: work after the last step is in neither.

Small Kineto traces of mechanisms seen in real GPU traces (tests/mechanism_fixtures.py); each test failed on the
code before its fix."""

from __future__ import annotations

import itertools

import pytest

from analyzer.api import analyze
from tests import mechanism_fixtures as F
from tests.conftest import SHARED
from tests.kineto_fixtures import write

EXTERNAL = SHARED / "external_traces"


# -- utilisation over the same steps in numerator and denominator ----------------------------------


def _sweep_util(doc: dict) -> float:
    """Utilisation by an interval sweep of the raw events: device-busy time inside the ProfilerStep windows
    over the windows' length."""
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    dev = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    points = sorted({p for s in steps for p in s} | {p for d in dev for p in d})
    busy = 0.0
    for a, b in itertools.pairwise(points):
        mid = (a + b) / 2
        if any(s <= mid < e for s, e in steps) and any(s <= mid < e for s, e in dev):
            busy += b - a
    return busy / sum(e - s for s, e in steps)


def test_utilisation_leaves_work_after_the_last_step_out_of_both_bounds(tmp_path):
    doc = F.tail_trace()
    r = analyze(write(tmp_path / "t.json", doc))
    # before: the 158 ms tail counted in the last step's busy, capped at its wall: 47.5% instead of 30.1%
    assert r.metrics.gpu_util == pytest.approx(_sweep_util(doc), abs=1e-3)
    assert r.metrics.gpu_util == pytest.approx((4 * 3.0 + 0.05) / 40, abs=1e-6)
    assert any("after the last step's window" in n for n in r.notes), r.notes


@pytest.mark.parametrize(("tail_us", "said"), [(52.0, False), (60.0, True)])
def test_work_after_the_last_step_is_said_only_where_it_reads_above_zero(tmp_path, tail_us, said):
    # the tail kernel starts 50 us before the last window ends: 2 us after it would read "0.00 ms", 10 us "0.01 ms"
    r = analyze(write(tmp_path / "t.json", F.tail_trace(tail_us=tail_us)))
    notes = [n for n in r.notes if "after the last step's window" in n]
    assert bool(notes) is said, r.notes
    assert all(not n.startswith("0.00 ms") for n in notes)


@pytest.mark.slow
@pytest.mark.skipif(not EXTERNAL.is_dir(), reason="../shared/external_traces is absent")
def test_external_v100_utilisation_matches_an_interval_sweep_of_its_steps():
    import gzip
    import json

    path = EXTERNAL / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "ts" in e and "cat" in e]
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
        or (e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    ]
    r = analyze(path)
    # all analysed steps (the importer's warm-up skip drops none of 5), utilisation 99.07% before
    assert r.metrics.accounting.warmup == 0
    assert r.metrics.gpu_util == pytest.approx(_sweep_util(doc), abs=2e-3)
