"""The worker projection moves only what torch's DataLoader workers run: the Dataset's ``__getitem__`` calls and the
collate. The sampler's indices are drawn in the training process (``_MultiProcessingDataLoaderIter._try_put_index``),
so a fetch that is mostly the sampler gains nothing from workers (rules/workers.py)."""

from analyzer import analyze
from analyzer.analysis.fixes import WorkerFix
from gpuanalyze.ingest.trace.runinfo import EndInfo
from tests.conftest import make_row


def _report(trace_factory, dataset_ms: float, collate_ms: float):
    # 40 steps of 60 ms, 50 ms of it fetching (CPU work) in the training process; 4 cores
    rows = [make_row(i, wall=60.0, data=50.0, fwd=4.0, bwd=4.5, opt=1.0, samples=32, data_cpu=50.0) for i in range(40)]
    end = EndInfo(
        status="ok", steps=40, loader_workers=0, fetches=40, fetch_ms=2000.0,
        fetch_dataset_ms=dataset_ms * 40, fetch_collate_ms=collate_ms * 40,
    )  # fmt: skip
    return analyze(trace_factory(rows, run={"cpu_count": 4}, end=end))


def test_a_fetch_that_is_mostly_the_sampler_gets_no_workers(trace_factory):
    r = _report(trace_factory, dataset_ms=1.0, collate_ms=0.5)  # 97% of each fetch outside the dataset fetcher
    assert not any(isinstance(f.projection.fix, WorkerFix) for f in r.findings)
    data = next(f for f in r.findings if f.bottleneck == "data_loading")
    assert "48.50 ms of each fetch (sampler, iterator) stays in the training process" in data.projection.rule
    gain = next(e for e in data.supporting + data.contrary if e.metric == "worker_gain")
    assert gain.value < 0.05


def test_a_fetch_that_is_mostly_getitem_moves_into_the_workers(trace_factory):
    r = _report(trace_factory, dataset_ms=40.0, collate_ms=8.0)
    f = r.findings[0]
    assert isinstance(f.projection.fix, WorkerFix)
    # the 2 ms outside the dataset fetcher stay on the training process's path: no faster than compute + it
    assert 10.0 + 2.0 <= f.projection.step_ms < 0.5 * 60.0
