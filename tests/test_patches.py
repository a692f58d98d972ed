import pytest

torch = pytest.importorskip("torch")

from analyzer.record.patch_fetcher import DatasetCall  # noqa: E402
from analyzer.record.patches import Patches  # noqa: E402


def test_sync_wrappers_report_and_restore():
    seen = []
    original = torch.Tensor.item
    patches = Patches()
    report = lambda kind, ns, owner, result, cpu_ns: seen.append((kind, result))  # noqa: E731
    patches.install(report, lambda kind: None)
    patches.install_sync(report)
    try:
        assert torch.tensor(3.0).item() == 3.0
    finally:
        patches.remove()
    assert ("sync", 3.0) in seen
    assert torch.Tensor.item is original
    seen.clear()
    torch.tensor(1.0).item()
    assert seen == []


def test_compile_wrapper_reports_the_compiled_module_and_restores():
    original = torch.compile
    seen = []
    patches = Patches()
    patches.install_compile(lambda module, compiled: seen.append((module, compiled)))
    model = torch.nn.Linear(2, 2)
    try:
        compiled = torch.compile(model, backend="eager")
    finally:
        patches.remove()
    assert seen == [(model, compiled)] and torch.compile is original


def test_before_calls_follow_what_can_still_matter():
    """The backward wrapper calls ``before`` only once CUDA timing asks for it; the fetch wrapper
    stops calling it once fetches can no longer end a step. Reports are unchanged throughout."""
    calls, reports = [], []
    patches = Patches()
    patches.install(lambda kind, ns, owner, result, cpu_ns: reports.append(kind), calls.append)
    x = torch.ones(2, requires_grad=True)
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2)
    try:
        it = iter(loader)
        next(it)
        (x * 2).sum().backward()
        assert calls == ["iter", "fetch"]
        patches.time_backward_start(calls.append)
        (x * 2).sum().backward()
        assert calls == ["iter", "fetch", "backward"]
        patches.fetches_end_no_step()
        next(it)
        assert calls == ["iter", "fetch", "backward"]
    finally:
        patches.remove()
    assert reports == ["iter", "fetch", "backward", "backward", "fetch"]


def test_the_dataset_fetcher_is_timed_with_its_collate_and_restored():
    """One fetch through torch's dataset fetcher reports its time and its collate's, calls the collate once per
    fetch, and leaves the fetcher's collate_fn and the class as they were."""
    from torch.utils.data import DataLoader, TensorDataset, default_collate
    from torch.utils.data._utils import fetch

    original = fetch._MapDatasetFetcher.fetch
    cell = DatasetCall()
    calls = []

    def collate(batch):
        calls.append(len(batch))
        return default_collate(batch)

    patches = Patches()
    patches.install(lambda *a: None, lambda kind: None, cell)
    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, collate_fn=collate)
    try:
        it = iter(loader)
        first = next(it)
        fetcher = it._dataset_fetcher
        assert cell.fetcher is fetcher and cell.ns >= cell.collate_ns > 0
        next(it)
        assert fetcher.collate_fn is loader.collate_fn  # put back after each call
    finally:
        patches.remove()
    assert calls == [4, 4]
    assert fetch._MapDatasetFetcher.fetch is original
    assert torch.equal(first[0], torch.arange(4.0))
