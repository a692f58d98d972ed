"""The recorder's memory per step (analyzer.record.memory_reader.py): the process's resident memory on CPU, the
caching allocator's counters on CUDA (faked here; scripts/gpu_check.sh checks them on a GPU)."""

from __future__ import annotations

import itertools
import types

import torch

import analyzer
from analyzer.api import analyze
from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.reader import load_trace

MB = 1 << 20


def test_a_cpu_profile_records_peak_resident_memory_per_step_and_a_creep(tmp_path):
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    with analyzer.profile(model, out=tmp_path / "t.arrow", optimizer=opt, system_interval_s=None) as prof:
        for _ in range(24):
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            kept.append(b"x" * (8 * MB))  # written: resident, kept across steps
    assert prof.error is None
    f = load_trace(prof.path).frame
    start, peak = f.get_column(S.MEM_START_BYTES).to_list(), f.get_column(S.PEAK_MEM_BYTES).to_list()
    assert all(s is not None and p >= s for s, p in zip(start, peak, strict=True))
    grown = sorted(b - a for a, b in itertools.pairwise(start))
    assert grown[len(grown) // 2] >= 7 * MB  # each step keeps 8 MB more (other memory may come and go beside it)
    assert f.get_column(S.MEM_RESERVED_BYTES).null_count() == f.height  # no allocator reserve on a CPU run
    m = analyze(prof.path).metrics.memory
    assert m is not None and m.host and m.total is None and m.creep is not None
    assert m.creep.per_step >= 7 * MB and m.creep.full_at is None  # no device total: no step it runs out at


class _Allocator:
    """torch.cuda's allocator counters as a stand-in: each step allocates 3 MB of activations and keeps 1 MB."""

    def __init__(self) -> None:
        self.current, self.peak, self.resets = 10 * MB, 10 * MB, 0

    def step(self) -> None:
        self.peak = max(self.peak, self.current + 3 * MB)
        self.current += MB

    def stats(self) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": self.current,
            "allocated_bytes.all.peak": self.peak,
            "reserved_bytes.all.peak": 32 * MB,
        }

    def reset(self, *_: object) -> None:
        self.peak, self.resets = self.current, self.resets + 1


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        pass

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: object) -> float:
        return 0.5


def test_a_cuda_profile_reads_the_allocator_once_per_step_boundary(tmp_path, monkeypatch):
    alloc = _Allocator()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a: alloc.stats())
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: alloc.current)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", alloc.reset)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    props = types.SimpleNamespace(name="a stand-in GPU", total_memory=1 << 30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with analyzer.profile(model, out=tmp_path / "t.arrow", optimizer=opt, device="cuda", system_interval_s=None) as p:
        for _ in range(8):
            model(torch.randn(4, 4)).sum().backward()
            alloc.step()  # forward and backward's activations; the step's boundary is the optimizer step
            opt.step()
            opt.zero_grad()
    assert p.error is None and alloc.resets >= p.steps_recorded
    f = load_trace(p.path).frame
    start = f.get_column(S.MEM_START_BYTES).to_list()
    assert [b - a for a, b in itertools.pairwise(start)] == [MB] * (len(start) - 1)
    assert f.get_column(S.PEAK_MEM_BYTES).to_list() == [s + 3 * MB for s in start]
    assert set(f.get_column(S.MEM_RESERVED_BYTES).to_list()) == {32 * MB}
    m = analyze(p.path).metrics.memory
    assert m is not None and not m.host and m.total == 1 << 30 and m.transient == 3 * MB
