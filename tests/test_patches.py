import pytest

torch = pytest.importorskip("torch")

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
