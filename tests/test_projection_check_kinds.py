"""`compare` names the fix AFTER applied by its kind: a micro-batch re-split is not a loader change, an
evaluation made less frequent is not a loader change, a checkpoint made less frequent is not logging."""

import pytest

from analyzer.api import load_compared
from analyzer.planning.compare import compare
from analyzer.planning.cost import CostInputs
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row


def _checks(before, after):
    return compare([load_compared(before, CostInputs(), None), load_compared(after, CostInputs(), None)]).checks


def _accumulating(factory, micro, per_step, *, data, fb):
    rows = [
        make_row(i, wall=data + fb + 1.2, data=data, fwd=fb / 2, bwd=fb / 2, opt=1.0, samples=16) for i in range(40)
    ]
    end = EndInfo(status="ok", steps=40, loader_workers=0, fetches=40 * per_step, fetch_samples=micro)
    return factory(rows, run={"cpu_count": 2}, end=end)


def test_a_micro_batch_change_is_named_micro_batch_not_loader(trace_factory):
    before = _accumulating(trace_factory, 2, 8, data=16.0, fb=24.0)
    after = _accumulating(trace_factory, 8, 2, data=5.0, fb=9.0)
    (check,) = _checks(before, after)
    assert check.kind == "micro_batch" and "8 -> 2" in check.fix
    assert check.bottleneck == "batch_size"
    assert check.projected_low_ms <= check.measured_ms <= check.projected_high_ms


def _periodic(factory, every, *, where):
    rows = []
    for i in range(96):
        spike = every and i % every == 0 and i > 0
        if where == "other":  # a checkpoint: torch.save after the step, unattributed host time
            rows.append(make_row(i, wall=80.0 if spike else 20.0, data=1.0))
        else:  # an evaluation pass: forward work
            rows.append(make_row(i, wall=80.0 if spike else 20.0, data=1.0, fwd=67.0 if spike else 7.0))
    return factory(rows, run={"cpu_count": 2}, end=EndInfo(status="ok", steps=96, loader_workers=0))


@pytest.mark.parametrize(("where", "kind"), [("other", "checkpoint"), ("forward", "eval")])
def test_a_periodic_change_is_named_by_what_spiked(trace_factory, where, kind):
    before = _periodic(trace_factory, 12, where=where)
    after = _periodic(trace_factory, 24, where=where)
    checks = _checks(before, after)
    assert [c.kind for c in checks] == [kind], [(c.kind, c.fix) for c in checks]
    (check,) = checks
    assert "every 12 -> every 24" in check.fix and check.recommended  # BEFORE's own projection: half as often
    assert check.projected_low_ms <= check.measured_ms <= check.projected_high_ms
    never = _checks(before, _periodic(trace_factory, 0, where=where))
    assert [c.kind for c in never] == [kind] and "never" in never[0].fix and not never[0].recommended
    assert never[0].error == pytest.approx(0.0, abs=0.05)
