"""NVTX ranges around the host-side phases (data wait, copies to the GPU, syncs) with ``nvtx=True``: pushed and
popped around exactly the calls they name, removed with the profile, and never a failure of the training.
torch.cuda.nvtx does nothing without CUDA: its range functions are recorded by a stand-in."""

import contextlib
import types

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import analyzer
from analyzer.record.nvtx_phases import DATA, H2D, SYNC, NvtxPhases
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
from tests.nsys_fixtures import Export, build_export


class _Recorder:
    def __init__(self, fail=False):
        self.events, self.fail, self._next = [], fail, 0

    def range_start(self, name):
        if self.fail:
            raise RuntimeError("NVTX is broken")
        self._next += 1
        self.events.append(("start", name))
        return self._next

    def range_end(self, rid):
        self.events.append(("end", rid))


def _names(rec):
    return [name for kind, name in rec.events if kind == "start"]


def _balanced(rec):
    return sum(k == "start" for k, _ in rec.events) == sum(k == "end" for k, _ in rec.events)


@pytest.fixture
def phases():
    rec = _Recorder()
    p = NvtxPhases(rec)
    p.install()
    yield p, rec
    p.remove()


def test_a_dataloader_fetch_is_a_data_range(phases):
    _, rec = phases
    batches = list(DataLoader(TensorDataset(torch.arange(6.0)), batch_size=2))
    assert len(batches) == 3 and _names(rec).count(DATA) == 4  # three batches and the StopIteration
    assert _balanced(rec)


def test_only_a_cpu_tensor_sent_to_a_cuda_device_is_a_copy_range(phases):
    _, rec = phases
    x = torch.ones(2)
    assert x.to(torch.float16).dtype == torch.float16 and x.to("cpu") is x  # casts and CPU moves: no range
    assert _names(rec) == []
    for send in (lambda: x.to("cuda"), lambda: x.to(device=torch.device("cuda", 0)), lambda: x.cuda()):
        with contextlib.suppress(RuntimeError, AssertionError):  # no CUDA here: it fails as it would unwrapped
            send()
    assert _names(rec) == [H2D] * 3 and _balanced(rec)  # each range ended though its call raised


def test_reads_of_cpu_tensors_are_not_sync_ranges(phases):
    _, rec = phases
    assert torch.tensor(3.0).item() == 3.0 and torch.tensor([1, 2]).tolist() == [1, 2]
    assert _names(rec) == []


def test_cuda_synchronize_is_a_sync_range(phases, monkeypatch):
    _, rec = phases
    assert SYNC not in _names(rec)
    with contextlib.suppress(RuntimeError, AssertionError):  # no CUDA here: it fails as it would unwrapped
        torch.cuda.synchronize()
    assert _names(rec) == [SYNC] and _balanced(rec)


def test_removed_the_tensor_methods_are_torchs_own_again():
    before = torch.Tensor.to
    p = NvtxPhases(_Recorder())
    p.install()
    assert torch.Tensor.to is not before
    p.remove()
    assert "to" not in torch.Tensor.__dict__ and torch.Tensor.to is before


def test_a_failing_nvtx_never_fails_the_call():
    p = NvtxPhases(_Recorder(fail=True))
    p.install()
    try:
        assert [b[0].tolist() for b in DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2)] == [[0, 1], [2, 3]]
    finally:
        p.remove()


class _Event:
    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 0.5


def test_a_cuda_profile_with_nvtx_ranges_every_phase_and_trains_on(tmp_path, monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a: {})
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    props = types.SimpleNamespace(name="a stand-in GPU", total_memory=1 << 30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda.nvtx, "range_start", rec.range_start)
    monkeypatch.setattr(torch.cuda.nvtx, "range_end", rec.range_end)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    with analyzer.profile(
        model, out=tmp_path / "t.arrow", optimizer=opt, nvtx=True, device="cuda", system_interval_s=None
    ) as prof:
        for (x,) in loader:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    assert prof.error is None and prof.steps_recorded >= 3
    names = _names(rec)
    assert DATA in names and "gpuanalyze:forward" in names and "gpuanalyze:optimizer" in names
    assert "to" not in torch.Tensor.__dict__  # the wrappers are off with the profile


def test_the_importer_reads_data_copy_and_sync_ranges_as_those_phases(tmp_path):
    e = Export(step_name="gpuanalyze:step#{}", phase_names=(DATA, H2D, SYNC))
    t = load_any(build_export(tmp_path / "r.sqlite", e))
    for col in (S.DATA_WAIT_MS, S.H2D_MS, S.SYNC_MS):
        assert t.frame.get_column(col).to_list() == pytest.approx([5.9] * 3), col
