"""A fix is a typed value computed once per evaluation: the worker plan is searched once and travels
as a WorkerFix from the rule to its advice, compare's checks and run --try's candidates; recording
the DataLoader's workers happens where the loader is seen, not inside the data-wait predicate."""

from types import SimpleNamespace

import pytest

from analyzer import analyze
from analyzer.analysis.fixes import BatchFix, MicroBatchFix, PrecisionFix, WorkerFix
from analyzer.analysis.rules import workers
from analyzer.record.loaders import LoaderWatch
from analyzer.run.candidates import setting_of
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row


def _loading_trace(trace_factory):
    # 50 ms of loading that sleeps on I/O in the training process, 10 ms of compute: workers help
    rows = [make_row(i, wall=60.0, data=50.0, fwd=4.0, bwd=4.5, opt=1.0, samples=32, data_cpu=0.5) for i in range(40)]
    return trace_factory(rows, run={"cpu_count": 4}, end=EndInfo(status="ok", steps=40, loader_workers=0))


def test_the_worker_plan_is_searched_once_per_evaluation_and_travels_as_a_worker_fix(trace_factory, monkeypatch):
    searched = []
    real = workers._from_zero
    monkeypatch.setattr(workers, "_from_zero", lambda ctx, data, k: searched.append((ctx, k)) or real(ctx, data, k))
    report = analyze(_loading_trace(trace_factory))
    f = report.findings[0]
    assert f.bottleneck == "data_loading" and f.projection.fix == WorkerFix(5)
    # per evaluation (the run's and each resample's), one search over 1..max_workers, not one per
    # detect/evidence/project/batch_size call
    assert searched and len(searched) == len({(id(c), k) for c, k in searched})  # contexts kept alive: ids unique
    assert dict(f.projection.params) == {"num_workers": 5}  # the JSON report's pairs, from the fix
    assert any("num_workers=5" in rec for rec in f.recommendations)
    assert setting_of(f.projection.fix).label() == "num_workers=5"


def test_fix_kinds_check_their_own_values():
    with pytest.raises(ValueError):
        WorkerFix(0)
    with pytest.raises(ValueError):
        BatchFix(1)
    with pytest.raises(ValueError):
        MicroBatchFix(0, 2)
    assert BatchFix(2.0).params == (("batch_multiplier", 2),)
    assert PrecisionFix("bfloat16").autocast == "bf16" and PrecisionFix("float8").autocast is None
    assert setting_of(MicroBatchFix(8, 2)).script == (("accumulate", 2),)


class _Iter:
    """A DataLoader iterator stand-in (weakly referenced, as the watch holds iterators)."""


def test_asking_whether_a_call_is_data_wait_records_nothing():
    loader = SimpleNamespace(num_workers=3)
    watch = LoaderWatch(loader, samples_from_loader=True)
    assert watch.is_training_data(loader, in_block=False)
    assert watch.workers is None  # the predicate has no side effect
    it = _Iter()
    assert not watch.is_training_data(it, in_block=False)
    watch.saw_iter(loader, it)  # where the loader is seen: its workers and its iterator
    assert watch.workers == 3 and watch.is_training_data(it, in_block=False)
    assert not watch.is_training_data(it, in_block=True)  # inside prof.data() the block counts
    other = LoaderWatch(None, samples_from_loader=True)
    other.saw_iter(SimpleNamespace(num_workers=2), SimpleNamespace())
    other.saw_iter(SimpleNamespace(num_workers=1), SimpleNamespace())
    assert other.workers == 2


def test_a_resampled_context_does_not_reuse_the_plans_of_another(trace_factory):
    import dataclasses

    from analyzer.analysis.host_facts import HostFacts
    from analyzer.analysis.road import trace_road
    from analyzer.analysis.rules import Context
    from gpuanalyze.ingest.trace.reader import load_trace

    t = load_trace(_loading_trace(trace_factory))
    ctx = Context(m=trace_road(t).metrics, run=t.run, end=t.end, ceilings=None, host=HostFacts(4, 4))
    plan = workers.worker_plan(ctx, 50.0)
    other = dataclasses.replace(ctx, host=HostFacts(4, 1))  # as stability.py replaces the metrics
    assert other.memo == {} and ctx.memo
    assert workers.worker_plan(other, 50.0) != plan  # one free core: its own plan, not the cached one
