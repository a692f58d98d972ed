import pytest

torch = pytest.importorskip("torch")

from analyzer.record.patches import Patches  # noqa: E402


def test_sync_wrappers_report_and_restore():
    seen = []
    original = torch.Tensor.item
    patches = Patches()
    patches.install(lambda kind, ns, owner, result: seen.append((kind, result)), lambda kind: None, sync=True)
    try:
        assert torch.tensor(3.0).item() == 3.0
    finally:
        patches.remove()
    assert ("sync", 3.0) in seen
    assert torch.Tensor.item is original
    seen.clear()
    torch.tensor(1.0).item()
    assert seen == []
