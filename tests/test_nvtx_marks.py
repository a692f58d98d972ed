"""NVTX ranges for steps and phases: emitted through torch.cuda.nvtx only when asked for and on CUDA; named
as the Nsight Systems importer reads them back."""

import torch
from typer.testing import CliRunner

import analyzer
from analyzer.cli import app
from analyzer.record import nvtx_marks
from analyzer.record.cuda_timer import CudaPhaseTimer
from analyzer.run.env_vars import options_from_env
from gpuanalyze.ingest.nsys.step_ranges import OUR_STEP
from gpuanalyze.ingest.sources import load_any
from gpuanalyze.ingest.trace import schema as S
from tests.nsys_fixtures import Export, build_export

runner = CliRunner()


class _Recorder:
    """torch.cuda.nvtx's range_start/range_end, recorded."""

    def __init__(self):
        self.events = []
        self._next = 0

    def range_start(self, name):
        self._next += 1
        self.events.append(("start", name, self._next))
        return self._next

    def range_end(self, rid):
        self.events.append(("end", rid))


class _Event:
    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass


def test_off_is_the_plain_timer():
    assert type(nvtx_marks.phase_timer(False, lambda: 0)) is CudaPhaseTimer


def test_on_without_cuda_emits_nothing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    called = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_start", lambda name: called.append(name))
    assert type(nvtx_marks.phase_timer(True, lambda: 0)) is CudaPhaseTimer and called == []


def test_steps_and_phases_become_ranges(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    rec, index = _Recorder(), [0]
    timer = nvtx_marks.NvtxPhaseTimer(rec, lambda: index[0])
    timer.begin(S.FORWARD_MS)
    timer.end(S.FORWARD_MS)
    timer.end(S.BACKWARD_MS)  # never begun: nothing to end
    timer.begin(S.OPTIMIZER_MS)
    timer.end(S.OPTIMIZER_MS)
    index[0] = 1
    assert [p for p, *_ in timer.take()] == [S.FORWARD_MS, S.OPTIMIZER_MS]
    assert rec.events == [
        ("start", "gpuanalyze:step#0", 1),
        ("start", "gpuanalyze:forward", 2),
        ("end", 2),
        ("start", "gpuanalyze:optimizer", 3),
        ("end", 3),
        ("end", 1),
        ("start", "gpuanalyze:step#1", 4),
    ]


def test_a_phase_begun_twice_ends_its_first_range(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    rec = _Recorder()
    timer = nvtx_marks.NvtxPhaseTimer(rec, lambda: 0)
    timer.begin(S.FORWARD_MS)
    timer.begin(S.FORWARD_MS)
    assert ("end", 2) in rec.events


def test_the_importer_reads_the_names_it_emits(tmp_path):
    assert nvtx_marks.STEP_RANGE.format(7).startswith(OUR_STEP)
    path = build_export(tmp_path / "r.sqlite", Export(step_name=nvtx_marks.STEP_RANGE, phases=True))
    t = load_any(path)
    assert t.frame.get_column(S.STEP).to_list() == [0, 1, 2] and t.frame.get_column(S.FORWARD_MS).null_count() == 0


def test_profile_with_nvtx_on_cpu_records_as_usual(tmp_path):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with analyzer.profile(model, out=tmp_path / "t.arrow", optimizer=opt, nvtx=True, system_interval_s=None) as prof:
        for _ in range(3):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    assert prof.error is None and prof.steps_recorded >= 2


def test_run_passes_nvtx_to_every_process():
    result = runner.invoke(app, ["run", "--nvtx", "--print-env", "--", "python", "t.py"])
    assert result.exit_code == 0 and "GPUANALYZE_NVTX=1" in result.output
    assert options_from_env({"GPUANALYZE_NVTX": "1"}).nvtx is True
